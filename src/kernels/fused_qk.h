// Fused q/k preparation (issue 5): per-head RMSNorm and RoPE applied in place to the q and
// k slots of the packed QKV tensor, and the cross-attention q RMSNorm in place. They replace
// the reference chain head_rmsnorm -> bf16 [T, H, D] -> rope_apply -> bf16 [T, H, D] ->
// copy_rows restack into a new [T, 3C] (qk_norm_rope.h): no split, no temporaries.
//
// Contract: bitwise equal to the reference chain on the same backend. Both bf16 roundings
// of the chain are kept (the RMSNorm output is rounded to bf16, RoPE reads those bf16
// values, works in fp32 and rounds again); the sum of squares is added in the reference
// kernel's order (CPU: sequential; GPU: the head_rmsnorm kernel's lane order and butterfly).
#pragma once

#include <string>

#include "core/tensor.h"

namespace s3d::kernels {

// Why the fused ops cannot run on x (bf16, rows of `row_stride` elements) with these
// heads, or "" when they can: head_dim a multiple of 8 (one 16-byte chunk per lane),
// row_stride a multiple of 8, x and the RoPE tables 16-byte aligned. The same rule on both
// backends, so that a CPU test sees the fallbacks a GPU run would take.
std::string fused_qk_unsupported(const Tensor& x, int64_t row_stride, int heads, int head_dim,
                                 const Tensor* cos, const Tensor* sin);

// qkv: bf16 [T, 3 * H * D] (q, k, v slots of H heads of D). For each token and head of the
// q and k slots: if q_gamma/k_gamma (f32 [H, D], both or neither) are given,
//   y = bf16(x / max(||x||, 1e-12) * gamma * sqrt(D))       (as head_rmsnorm)
// else y = x; then if cos/sin (f32 [T, D/2], both or neither) are given,
//   (y[2p], y[2p+1]) = bf16(rotate(y[2p], y[2p+1], cos[t, p], sin[t, p]))  (as rope_apply).
// Written back into the same q and k elements; v is untouched. Throws when
// fused_qk_unsupported says why not (callers check it first and fall back).
void qk_rmsnorm_rope_inplace(Tensor& qkv, int heads, int head_dim, const Tensor* q_gamma,
                             const Tensor* k_gamma, const Tensor* cos, const Tensor* sin);

// x: bf16 [T, H * D] (e.g. the cross-attention q); per-head RMSNorm in place, as
// head_rmsnorm (bitwise).
void head_rmsnorm_inplace(Tensor& x, const Tensor& gamma, int heads, int head_dim);

}  // namespace s3d::kernels
