// The op qk_rmsnorm_cross: the cross-attention's per-head q RMSNorm on the to_q output
// (kernels/qk_rmsnorm.h). Candidates, in try order: fast_qk_rmsnorm_cross (tolerance,
// kernels/fast_norm.h), then qk_rmsnorm_cross_inplace (bitwise), both in place in q; the
// reference is pure_eager's head_rmsnorm into a new tensor. K keeps the reference op: its
// [BL, H, D] layout is the one the condition K/V cache stores (docs/KERNELS.md, "Fused kernels").
#pragma once

#include "core/tensor.h"
#include "ops/op.h"

namespace s3d::ops {

// q: bf16 [T, H * D]; gamma: f32 [H, D]. Returns the normalised q, bf16 [T, H * D]: q itself
// when a candidate ran in place, else a new tensor (q untouched).
Tensor qk_rmsnorm_cross(const OpPlan& plan, Tensor& q, const Tensor& gamma, int heads,
                        int head_dim);

}  // namespace s3d::ops
