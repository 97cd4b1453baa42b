// The op qk_rmsnorm_rope: the self-attention's per-head q/k RMSNorm and 3-D RoPE on the packed
// to_qkv output (kernels/qk_rmsnorm.h). Candidates, in try order: fast_qk_rmsnorm_rope
// (tolerance, kernels/fast_norm.h), then qk_rmsnorm_rope_inplace (bitwise), both in place in
// qkv; the reference is pure_eager's chain and its restack into a new [T, 3C].
#pragma once

#include "core/tensor.h"
#include "ops/op.h"

namespace s3d::ops {

// qkv: bf16 [T, 3 * H * D]; q_gamma/k_gamma: f32 [H, D], both or neither; cos/sin: f32
// [T, D / 2], both or neither. Returns the [T, 3C] tensor the attention reads q, k, v from:
// qkv itself when a candidate ran in place or there is nothing to do (no gamma, no RoPE),
// else the reference's restack (qkv untouched).
Tensor qk_rmsnorm_rope(const OpPlan& plan, Tensor& qkv, int heads, int head_dim,
                       const Tensor* q_gamma, const Tensor* k_gamma, const Tensor* cos,
                       const Tensor* sin);

}  // namespace s3d::ops
