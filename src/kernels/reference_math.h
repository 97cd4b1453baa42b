// The per-element arithmetic of the reference-path kernels, written once and called by both
// the CPU oracle (kernels/*.cpp) and the CUDA kernels (kernels/*.cu), so that the two can
// differ only in memory layout, reduction order and the libm behind tanhf/expf/cosf/sinf.
// Each function evaluates in the order PyTorch eager does, in fp32. The build forbids FMA
// contraction (-ffp-contract=off, --fmad=false), so + - * / sqrt round identically on host
// and device; the transcendentals may differ by an ulp or two between glibc and CUDA.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/bf16.h"

namespace s3d::kernels::math {

// ---- activations (aten's CUDA formulas) ----

// kBeta = M_SQRT2 * M_2_SQRTPI * 0.5, formed in double and rounded to float, as aten does.
inline constexpr float kGeluBeta = static_cast<float>(1.4142135623730951 * 1.1283791670955126 * 0.5);
inline constexpr float kGeluKappa = 0.044715f;

// 0.5 x (1 + tanh(kBeta (x + kKappa x^3)))
S3D_HD float gelu_tanh(float x) {
  float cube = x * x * x;
  float inner = kGeluBeta * (x + kGeluKappa * cube);
  return 0.5f * x * (1.0f + tanhf(inner));
}

// x / (1 + exp(-x))
S3D_HD float silu(float x) { return x / (1.0f + expf(-x)); }

// ---- normalisations ----

// Row statistics are accumulated in double (on both backends, so that CPU and GPU agree
// although they add in different orders) and rounded once to fp32 here.
S3D_HD float mean_from_sum(double sum, int64_t n) {
  return static_cast<float>(sum / static_cast<double>(n));
}
// ||x||_2 from the sum of squares; the square root is taken in fp32, as torch's fp32 norm.
S3D_HD float l2_norm_from_squares(double sum_sq) { return sqrtf(static_cast<float>(sum_sq)); }

// LayerNorm: rstd = 1 / sqrt(var + eps); y = (x - mean) * rstd, then * w[c], then + b[c]
// for whichever of weight and bias is given (null when absent).
S3D_HD float layer_norm_rstd(float var, float eps) { return 1.0f / sqrtf(var + eps); }
S3D_HD float layer_norm_apply(float x, float mean, float rstd, const float* w, const float* b,
                              int64_t c) {
  float y = (x - mean) * rstd;
  if (w != nullptr) y = y * w[c];
  if (b != nullptr) y = y + b[c];
  return y;
}

// MultiHeadRMSNorm: F.normalize (x / max(||x||, 1e-12)), then * gamma, then * sqrt(D).
S3D_HD float head_rmsnorm_apply(float x, float norm, float gamma, float scale) {
  float y = x / fmaxf(norm, 1e-12f);
  y = y * gamma;
  return y * scale;
}
// Python's `dim ** 0.5` is a double, rounded to float when it multiplies an fp32 tensor.
inline float head_rmsnorm_scale(int head_dim) {
  return static_cast<float>(std::sqrt(static_cast<double>(head_dim)));
}

// RoPE phase of one axis: the integer grid coordinate as float, times the frequency.
S3D_HD float rope_phase(int32_t coord, float freq) { return static_cast<float>(coord) * freq; }

// RoPE: (a + ib)(c + is) = (ac - bs) + i(as + bc), the product torch's complex mul forms.
S3D_HD void rope_rotate(float a, float b, float c, float s, float& re, float& im) {
  re = a * c - b * s;
  im = a * s + b * c;
}

// ---- fused chains: several reference ops per element, every bf16 store of the
// reference chain kept as a round_bf16 (core/bf16.h), so that a fused kernel reproduces the
// chain's bits. Each returns the fp32 value whose bf16 rounding the caller stores. ----

// modulate(LayerNorm(x)): h = bf16(ln); s = bf16(scale + 1); m = bf16(h * s); m + shift
// (the eager layer_norm -> bf16, add_scalar -> bf16, mul -> bf16, add chain).
S3D_HD float modulate_chain(float ln, float scale, float shift) {
  const float h = round_bf16(ln);
  const float s = round_bf16(scale + 1.0f);
  const float m = round_bf16(h * s);
  return m + shift;
}

// Gated residual: x + bf16(h * gate) (the eager mul -> bf16, add chain).
S3D_HD float gated_residual_chain(float x, float h, float gate) { return x + round_bf16(h * gate); }

// ---- sampler ----

S3D_HD float cfg_combine(float v_cond, float v_uncond, float g, float one_minus_g) {
  return g * v_cond + one_minus_g * v_uncond;
}
S3D_HD float euler_step(float x, float v, float dt) { return x - dt * v; }
S3D_HD float axpby_sub(float x, float a, float v, float b) { return a * x - b * v; }
S3D_HD float xstart_to_pred(float x, float a, float x0, float b) { return (a * x - x0) / b; }
// Standard deviation from the sum of squared deviations, divided by n (population; pass
// n - 1 for the unbiased estimate), in double.
S3D_HD float std_from_squares(double sum_sq_dev, int64_t n) {
  return static_cast<float>(sqrt(sum_sq_dev / static_cast<double>(n)));
}
// ratio = std_pos / std_cfg (an fp32 tensor division in the original).
S3D_HD float guidance_rescale(float x0, float ratio, float rho, float one_minus_rho) {
  return rho * (x0 * ratio) + one_minus_rho * x0;
}

// ---- frequency tables ----

// Frequencies are computed once on the host (as the original builds them on the CPU before
// moving them to the GPU) and handed to CUDA kernels by value: no device buffer, no copy.
inline constexpr int kMaxFreqs = 960;  // keeps a kernel's parameters under 4 KB
struct FreqTable {
  int count = 0;
  float value[kMaxFreqs];
};

}  // namespace s3d::kernels::math
