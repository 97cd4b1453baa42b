// The op sdpa: scaled dot-product attention over ragged sequences (attention/attention.h):
// cuDNN SDPA on the GPU, the fp32 loop on the CPU. Reference: the cuDNN graph's heuristic
// execution plan, built with the plan's implementation (auto, unified or composite:
// SPARSE3D_SDPA_IMPLEMENTATION, read once when the plan is resolved). Candidate:
//   tuned_attention (tolerance): the fastest execution plan cuDNN offers for the graph, timed
//     once per graph key and kept in the plan's store; no effect on the CPU.
// Every attention of the model (self-attention, cross-attention, their sequence-parallel and
// null-context forms) is a call of this op.
#pragma once

#include "attention/attention.h"
#include "core/tensor.h"
#include "ops/op.h"

namespace s3d::ops {

// As attention::sdpa_varlen: q rows = q_layout.total(), k and v rows = kv_layout.total(), all
// bf16 with H * D columns; out: bf16 [q_layout.total(), H * D].
void sdpa(const OpPlan& plan, const RowView& q, const attention::SeqLayout& q_layout,
          const RowView& k, const RowView& v, const attention::SeqLayout& kv_layout, int heads,
          int head_dim, float scale, Tensor& out);

}  // namespace s3d::ops
