// The kernel bench (`sparse3d bench-kernels`): every candidate of every op in the table and
// its reference, timed at the model's shapes on the GPU, with the op's byte model, against
// the copy rate of the same GPU measured in the same call. Inputs rotate over enough operand
// sets that no call finds its data in L2.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ops/op.h"

namespace s3d::ops {

struct KernelBandwidthRow {
  std::string op;         // the op's name
  std::string candidate;  // the candidate's flag, or "reference"
  std::string role;       // "bitwise" | "tolerance" | "reference"
  int64_t tokens = 0;
  double bytes = 0, seconds = 0;  // per call: the op's byte model, the time measured
  std::string skipped;            // why the candidate refused the shape ("" = measured)
};

struct KernelBandwidth {
  double copy_bytes = 0, copy_seconds = 0;
  std::vector<KernelBandwidthRow> rows;
};

// `model`: the heads, head_dim and MLP width of the model (tokens and batch are ignored).
// Needs a CUDA device; runs on the current context's stream.
KernelBandwidth measure_bandwidth(const OpShape& model, const std::vector<int64_t>& tokens);

std::string_view role_name(Contract c);

}  // namespace s3d::ops
