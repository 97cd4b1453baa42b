// `sparse3d bench-kernels` (issue 5, "Done means" 5): the achieved memory bandwidth of each
// fused kernel at the model's shapes against the copy bandwidth of the same GPU measured in
// the same run (a device-to-device cudaMemcpy of 1 GiB). Bytes are the kernel's compulsory
// traffic (every input read once, every output written once); inputs rotate over enough
// buffers that a call finds none of its data in L2. A memory-bound kernel below 70% of the
// copy rate needs a reason in the report.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "io/json.h"
#include "model/config.h"

namespace s3d::bench {

struct KernelBandwidthRow {
  std::string kernel;   // the op (a fused kernel, or the reference op it is compared with)
  std::string role;     // "fused" or "reference"
  int64_t tokens = 0;
  double bytes = 0;     // compulsory traffic per call
  double seconds = 0;   // per call
  double gbps() const { return seconds > 0 ? bytes / seconds / 1e9 : 0; }
};

struct KernelBandwidth {
  std::string date;
  io::Json fingerprint;
  double copy_bytes = 0;    // read + written by the reference copy
  double copy_seconds = 0;
  double copy_gbps() const { return copy_seconds > 0 ? copy_bytes / copy_seconds / 1e9 : 0; }
  std::vector<KernelBandwidthRow> rows;
};

KernelBandwidth measure_kernel_bandwidth(const model::ModelConfig& c,
                                         const std::vector<int64_t>& tokens);
std::string to_markdown(const KernelBandwidth& k);
io::Json to_json(const KernelBandwidth& k);

}  // namespace s3d::bench
