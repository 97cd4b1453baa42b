// Tolerance kernels: the block's normalisations written for bandwidth instead of for bits,
// the first candidate of three ops (ops/), each a flag beside its op's bitwise candidate:
//   fast::modulated_layernorm  flag fast_modulated_layernorm  (bitwise: modulated_layernorm.h)
//   fast::qk_rmsnorm_rope      flag fast_qk_rmsnorm_rope      (bitwise: qk_rmsnorm.h)
//   fast::qk_rmsnorm_cross     flag fast_qk_rmsnorm_cross     (bitwise: qk_rmsnorm.h)
// One file for the three: they share the lane layout and the per-element formulas.
// The bitwise twins keep the reference chain's fp64 sums in its lane order and every
// intermediate bf16 store; these kernels read each row or head once into registers, reduce
// in fp32 (LayerNorm: two passes over the registers, mean then squared deviations) and round
// once per element, to bf16. Per-element formulas and lane layout: fast_norm_math.h.
//
// Contract (the fp64-golden rule, docs/CONTRACTS.md): with g the fp64 result computed on the
// host from the same bf16 inputs (and the same f32 gamma / cos / sin), r the bitwise path's
// bf16 output (the reference chain, or its bitwise fused twin: the same bits) and f this
// kernel's output, over all elements of a call
//   mean |g - f| <= 1.1 mean |g - r|,  and no NaN or Inf in f.
// The one rounding makes f at most about as far from g as r (r rounds two to four times; the
// fp32 sums are off by ~1e-6 relative, far below a bf16 ulp). Between the backends (same op,
// GPU against CPU) the contract is rel L2 <= 1e-3. The tests check every element too: within
// one bf16 ulp of g plus the fp32 evaluation's error (tests/fast_norm_golden.h).
//
// Support: each kernel has a fast::*_unsupported(...) rule ("" = supported), the same on both
// backends; the fast:: kernels throw on a shape their rule refuses (the op's ladder, ops/op.h,
// asks the rule first and counts a fallback when it refuses).
#pragma once

#include <string>

#include "core/tensor.h"

namespace s3d::kernels {

namespace fast {

// Why the fast modulated LayerNorm cannot run, or "": bf16 operands, C a multiple of 8 and
// at most 4096 (the row lives in one warp's registers), the modulation's row stride a
// multiple of 8, x, out, shift and scale 16-byte aligned.
std::string modulated_layernorm_unsupported(const Tensor& x, const RowView& shift,
                                             const RowView& scale, const Tensor& out);

// The fast kernel (out may be x: each row is read whole before it is written). Throws on a
// shape the rule refuses; a batch index outside [0, B) throws on the CPU and traps on the GPU.
// out = bf16((x - mean) * rstd * (1 + scale[b]) + shift[b]), b = batch_index[t]; mean and
// rstd of the row x[t] (LayerNorm without affine, eps), all in fp32. Operands as
// reference::modulated_layernorm (modulated_layernorm.h).
void modulated_layernorm(const Tensor& x, const RowView& shift, const RowView& scale,
                         const Tensor& batch_index, float eps, Tensor& out);

// Why the fast q/k kernels cannot run on x (bf16, rows of `row_stride` elements), or "":
// head_dim a multiple of 8 and at most 256 (a head lives in 8 lanes' registers), row_stride
// a multiple of 8, x, the gammas and the RoPE tables 16-byte aligned.
std::string qk_unsupported(const Tensor& x, int64_t row_stride, int heads, int head_dim,
                           const Tensor* gamma0, const Tensor* gamma1, const Tensor* cos,
                           const Tensor* sin);

// q/k RMSNorm and RoPE in place in the packed qkv bf16 [T, 3 * H * D] (v untouched), the
// semantics of reference::qk_rmsnorm_rope (qk_rmsnorm.h) with one rounding:
// y = x / max(||x||, 1e-12) * gamma * sqrt(D), then the pairs (2p, 2p+1) rotated by
// (cos, sin)[t, p], in fp32, rounded once. Throws on a shape qk_unsupported refuses, or when
// there is nothing to do.
void qk_rmsnorm_rope(Tensor& qkv, int heads, int head_dim, const Tensor* q_gamma,
                     const Tensor* k_gamma, const Tensor* cos, const Tensor* sin);

// The cross-attention's q, bf16 [T, H * D], RMSNormed per head in place (the kernel above
// with one slot and no RoPE).
void qk_rmsnorm_cross(Tensor& x, const Tensor& gamma, int heads, int head_dim);

}  // namespace fast
}  // namespace s3d::kernels
