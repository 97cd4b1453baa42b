// The q/k preparation of a block's attentions: per-head RMSNorm and RoPE of the
// self-attention's q and k (op qk_rmsnorm_rope), and the cross-attention's q RMSNorm (op
// qk_rmsnorm_cross). ops/qk_rmsnorm_rope.h and ops/qk_rmsnorm_cross.h choose among:
//   reference:: pure_eager's chains: head_rmsnorm -> bf16 [T, H, D] -> rope_apply -> bf16
//     [T, H, D] per q and k, then the copy_rows restack with v into a new [T, 3C]
//     (qk_norm_rope.h); for the cross q, head_rmsnorm into a new [T, H, D].
//   fused:: the candidates of flags qk_rmsnorm_rope_inplace and qk_rmsnorm_cross_inplace, in
//     place in the projection's output: no split, no temporaries.
// Contract: fused and reference bitwise equal on the same backend. Both bf16 roundings of the
// chain are kept (the RMSNorm output is rounded to bf16, RoPE reads those bf16 values, works
// in fp32 and rounds again); the sum of squares is added in the reference kernel's order
// (CPU: sequential; GPU: the head_rmsnorm kernel's lane order and butterfly). The tolerance
// candidates are in fast_norm.h.
#pragma once

#include <string>

#include "core/tensor.h"

namespace s3d::kernels {

namespace reference {

// qkv: bf16 [T, 3 * H * D] (q, k, v slots of H heads of D), the self-attention's to_qkv
// output. For each token and head of the q and k slots: if q_gamma/k_gamma (f32 [H, D], both
// or neither) are given,
//   y = bf16(x / max(||x||, 1e-12) * gamma * sqrt(D))       (as head_rmsnorm)
// else y = x; then if cos/sin (f32 [T, D/2], both or neither) are given,
//   (y[2p], y[2p+1]) = bf16(rotate(y[2p], y[2p+1], cos[t, p], sin[t, p]))  (as rope_apply).
// Returns the new [T, 3C] tensor the attention reads q, k, v from (qkv untouched). Every
// shape; the op skips the call when there is nothing to do (no gamma, no RoPE).
Tensor qk_rmsnorm_rope(const Tensor& qkv, int heads, int head_dim, const Tensor* q_gamma,
                       const Tensor* k_gamma, const Tensor* cos, const Tensor* sin);

// q: bf16 [T, H * D], the cross-attention's to_q output; gamma: f32 [H, D]. Returns the
// per-head RMSNorm of q (as head_rmsnorm) as a new bf16 [T, H * D] (q untouched).
Tensor qk_rmsnorm_cross(const Tensor& q, const Tensor& gamma, int heads, int head_dim);

}  // namespace reference

namespace fused {

// Why the fused kernels cannot run on x (bf16, rows of `row_stride` elements) with these
// heads, or "" when they can: head_dim a multiple of 8 (one 16-byte chunk per lane),
// row_stride a multiple of 8, x and the RoPE tables 16-byte aligned. The same rule on both
// backends, so that a CPU test sees the fallbacks a GPU run would take.
std::string qk_unsupported(const Tensor& x, int64_t row_stride, int heads, int head_dim,
                           const Tensor* cos, const Tensor* sin);

// The candidate of flag qk_rmsnorm_rope_inplace: q and k normalised and rotated in place in
// qkv (the result of reference::qk_rmsnorm_rope, in qkv itself); v is untouched. Throws when
// qk_unsupported says why not.
void qk_rmsnorm_rope_inplace(Tensor& qkv, int heads, int head_dim, const Tensor* q_gamma,
                             const Tensor* k_gamma, const Tensor* cos, const Tensor* sin);

// The candidate of flag qk_rmsnorm_cross_inplace: x bf16 [T, H * D] normalised per head in
// place (the result of reference::qk_rmsnorm_cross, in x itself).
void qk_rmsnorm_cross_inplace(Tensor& x, const Tensor& gamma, int heads, int head_dim);

}  // namespace fused
}  // namespace s3d::kernels
