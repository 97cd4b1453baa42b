// The arithmetic of the tolerance kernels (fast_norm.h), written once and called by their CPU
// and CUDA versions: the per-element formulas and the lane layout of the fp32 reductions.
// The CPU version adds in the GPU's order (each lane's partial sum over its chunks, then the
// xor butterfly), so that the two backends differ only where the device's sqrtf or division
// could (they do not under --fmad=false and IEEE sqrt/div); the contract between them is
// still a tolerance (rel L2 <= 1e-3), not bits.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/bf16.h"

namespace s3d::kernels::fastmath {

// ---- modulated LayerNorm: one warp per token row ----

inline constexpr int kLnLanes = 32;         // lanes per row
inline constexpr int kLnMaxChunks = 16;     // 16-byte chunks per lane, at most
inline constexpr int64_t kLnMaxC = int64_t{kLnLanes} * kLnMaxChunks * 8;  // 4096 channels

// Lane l of a row owns the 16-byte chunks l, l + 32, l + 64, ... (8 elements each), so that
// a warp's k-th load covers 512 contiguous bytes.
S3D_HD int ln_chunks_per_lane(int64_t C) { return static_cast<int>((C / 8 + kLnLanes - 1) / kLnLanes); }

// mean = sum / C and rstd = 1 / sqrt(sum of squared deviations / C + eps), in fp32.
S3D_HD float ln_mean(float sum, int64_t C) { return sum / static_cast<float>(C); }
S3D_HD float ln_rstd(float sum_sq_dev, int64_t C, float eps) {
  return 1.0f / sqrtf(sum_sq_dev / static_cast<float>(C) + eps);
}
// (x - mean) * rstd * (1 + scale) + shift in fp32; the caller rounds once to bf16.
S3D_HD float modulated_ln(float x, float mean, float rstd, float scale, float shift) {
  const float h = (x - mean) * rstd;
  return h * (1.0f + scale) + shift;
}

// ---- per-head RMSNorm (+ RoPE): one group of 8 lanes per (token, slot, head) ----

inline constexpr int kQkLanes = 8;       // lanes per head
inline constexpr int kQkMaxChunks = 4;   // 16-byte chunks per lane, at most
inline constexpr int kQkMaxHeadDim = kQkLanes * kQkMaxChunks * 8;  // 256

// Lane j of a head's group owns chunks j, j + 8, ... of the head.
S3D_HD int qk_chunks_per_lane(int head_dim) { return (head_dim / 8 + kQkLanes - 1) / kQkLanes; }

// 1 / max(||x||, 1e-12), ||x|| = sqrtf of the fp32 sum of squares (F.normalize's clamp).
S3D_HD float rms_inv_norm(float sum_sq) { return 1.0f / fmaxf(sqrtf(sum_sq), 1e-12f); }
// x / max(||x||, 1e-12) * gamma * sqrt(D), as a product with the reciprocal.
S3D_HD float rms_apply(float x, float inv_norm, float gamma, float scale) {
  return x * inv_norm * gamma * scale;
}
// The rotation is math::rope_rotate (the reference's product), applied to the unrounded y.

// ---- the butterfly of __shfl_xor_sync, on the host ----

// partial[0..lanes) after the xor butterfly over offsets lanes/2, ..., 1: every lane ends
// with the same value (IEEE addition commutes), returned here. lanes: a power of two.
inline float butterfly_sum(float* partial, int lanes) {
  for (int offset = lanes / 2; offset > 0; offset >>= 1) {
    float next[32];
    for (int l = 0; l < lanes; ++l) next[l] = partial[l] + partial[l ^ offset];
    for (int l = 0; l < lanes; ++l) partial[l] = next[l];
  }
  return partial[0];
}

}  // namespace s3d::kernels::fastmath
