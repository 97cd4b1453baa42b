// Tolerance kernels: the support rules, argument checks and device dispatch, and the CPU versions, which add in the
// GPU kernels' lane order (fast_norm_math.h) and round once per element.
#include "kernels/fast_norm.h"

#include <cstdint>

#include "core/error.h"
#include "kernels/fast_norm_cuda.h"
#include "kernels/fast_norm_math.h"
#include "kernels/modulated_layernorm.h"
#include "kernels/kernel_checks.h"
#include "kernels/qk_inplace.h"
#include "kernels/reference_math.h"

namespace s3d::kernels {
namespace {

using detail::aligned16;
namespace fm = fastmath;

}  // namespace

namespace cpu {

// Per row: the 32 lanes' partial sums over their chunks (lane l: chunks l, l + 32, ...),
// the butterfly, then the same for the squared deviations; one rounding per element.
void fast_modulated_layernorm(const Tensor& x, const RowView& shift, const RowView& scale,
                               const Tensor& batch_index, float eps, Tensor& out) {
  const int64_t T = x.size(0), C = x.size(1), chunks = C / 8;
  const int per_lane = fm::ln_chunks_per_lane(C);
  const uint16_t* xp = x.data_as<uint16_t>();
  const auto* shp = static_cast<const uint16_t*>(shift.data());
  const auto* scp = static_cast<const uint16_t*>(scale.data());
  const int32_t* bidx = batch_index.data_as<int32_t>();
  uint16_t* yp = out.data_as<uint16_t>();
  for (int64_t t = 0; t < T; ++t) {
    S3D_CHECK(bidx[t] >= 0 && bidx[t] < shift.rows, "fast modulated_layernorm: batch_index[",
              t, "] = ", bidx[t], " is outside [0, ", shift.rows, ")");
  }
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < T; ++t) {
    const uint16_t* xr = xp + t * C;
    float partial[fm::kLnLanes];
    auto lane_sums = [&](auto term) {
      for (int l = 0; l < fm::kLnLanes; ++l) {
        float s = 0.0f;
        for (int k = 0; k < per_lane; ++k) {
          const int64_t chunk = int64_t{k} * fm::kLnLanes + l;
          if (chunk >= chunks) break;
          for (int e = 0; e < 8; ++e) s += term(bf16_to_float(xr[chunk * 8 + e]));
        }
        partial[l] = s;
      }
      return fm::butterfly_sum(partial, fm::kLnLanes);
    };
    const float mean = fm::ln_mean(lane_sums([](float v) { return v; }), C);
    const float rstd = fm::ln_rstd(lane_sums([mean](float v) {
                                     const float d = v - mean;
                                     return d * d;
                                   }),
                                   C, eps);
    const uint16_t* sh = shp + bidx[t] * shift.stride;
    const uint16_t* sc = scp + bidx[t] * scale.stride;
    uint16_t* yr = yp + t * C;
    for (int64_t c = 0; c < C; ++c) {
      yr[c] = float_to_bf16(fm::modulated_ln(bf16_to_float(xr[c]), mean, rstd,
                                             bf16_to_float(sc[c]), bf16_to_float(sh[c])));
    }
  }
}

// Per (token, slot, head): the 8 lanes' partial sums of squares (lane j: chunks j, j + 8,
// ...), the butterfly, the norm applied and the pairs rotated in fp32, one rounding.
void fast_qk_inplace(Tensor& x, int64_t row_stride, int slots, int heads, int head_dim,
                     const float* const* gamma, float scale, const float* cos, const float* sin) {
  uint16_t* base = x.data_as<uint16_t>();
  const int64_t T = x.size(0), H = heads, D = head_dim, half = D / 2, chunks = D / 8;
  const int per_lane = fm::qk_chunks_per_lane(head_dim);
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < T; ++t) {
    float y[fm::kQkMaxHeadDim];
    for (int s = 0; s < slots; ++s) {
      for (int64_t h = 0; h < H; ++h) {
        uint16_t* v = base + t * row_stride + (s * H + h) * D;
        for (int64_t d = 0; d < D; ++d) y[d] = bf16_to_float(v[d]);
        if (gamma[s] != nullptr) {
          const float* g = gamma[s] + h * D;
          float partial[fm::kQkLanes];
          for (int j = 0; j < fm::kQkLanes; ++j) {
            float a = 0.0f;
            for (int k = 0; k < per_lane; ++k) {
              const int64_t chunk = int64_t{k} * fm::kQkLanes + j;
              if (chunk >= chunks) break;
              for (int e = 0; e < 8; ++e) a += y[chunk * 8 + e] * y[chunk * 8 + e];
            }
            partial[j] = a;
          }
          const float inv = fm::rms_inv_norm(fm::butterfly_sum(partial, fm::kQkLanes));
          for (int64_t d = 0; d < D; ++d) y[d] = fm::rms_apply(y[d], inv, g[d], scale);
        }
        if (cos != nullptr) {
          for (int64_t p = 0; p < half; ++p) {
            float re, im;
            math::rope_rotate(y[2 * p], y[2 * p + 1], cos[t * half + p], sin[t * half + p], re,
                              im);
            y[2 * p] = re;
            y[2 * p + 1] = im;
          }
        }
        for (int64_t d = 0; d < D; ++d) v[d] = float_to_bf16(y[d]);
      }
    }
  }
}

}  // namespace cpu

namespace fast {

std::string modulated_layernorm_unsupported(const Tensor& x, const RowView& shift,
                                             const RowView& scale, const Tensor& out) {
  // The bitwise kernel's rule (dtypes, 16-byte chunks and alignment), and a row that fits in
  // one warp's registers.
  const std::string why = fused::modulated_layernorm_unsupported(x, shift, scale, out);
  if (!why.empty()) return why;
  const int64_t C = x.ndim() == 2 ? x.size(1) : 0;
  if (C > fm::kLnMaxC)
    return cat("C = ", C, " exceeds ", fm::kLnMaxC,
               " (the row must fit in one warp's registers)");
  return "";
}

void modulated_layernorm(const Tensor& x, const RowView& shift, const RowView& scale,
                          const Tensor& batch_index, float eps, Tensor& out) {
  const char* op = "fast modulated_layernorm";
  detail::check_modulated_norm_operands(op, x, shift, scale, batch_index, eps, out);
  detail::run_supported(
      op, modulated_layernorm_unsupported(x, shift, scale, out), x,
      [&] { cpu::fast_modulated_layernorm(x, shift, scale, batch_index, eps, out); },
      [&] { cuda::fast_modulated_layernorm(x, shift, scale, batch_index, eps, out); });
}

std::string qk_unsupported(const Tensor& x, int64_t row_stride, int heads, int head_dim,
                           const Tensor* gamma0, const Tensor* gamma1, const Tensor* cos,
                           const Tensor* sin) {
  (void)heads;
  if (x.dtype() != DType::BF16) return cat("x is ", x.describe(), ", not bf16");
  if (head_dim % 8 != 0)
    return cat("head_dim ", head_dim, " is not a multiple of 8 (16-byte chunks)");
  if (head_dim > fm::kQkMaxHeadDim)
    return cat("head_dim ", head_dim, " exceeds ", fm::kQkMaxHeadDim,
               " (a head must fit in 8 lanes' registers)");
  if (row_stride % 8 != 0) return cat("row stride ", row_stride, " is not a multiple of 8");
  if (!aligned16(x.data())) return "q/k rows are not 16-byte aligned";
  if ((gamma0 && !aligned16(gamma0->data())) || (gamma1 && !aligned16(gamma1->data())))
    return "gamma is not 16-byte aligned";
  if ((cos && !aligned16(cos->data())) || (sin && !aligned16(sin->data())))
    return "the RoPE tables are not 16-byte aligned";
  return "";
}

}  // namespace fast

namespace fast {
namespace {

const detail::QkKernels kQk{&qk_unsupported, &cpu::fast_qk_inplace, &cuda::fast_qk_inplace};

}  // namespace

void qk_rmsnorm_rope(Tensor& qkv, int heads, int head_dim, const Tensor* q_gamma,
                     const Tensor* k_gamma, const Tensor* cos, const Tensor* sin) {
  detail::qk_packed_inplace("fast qk_rmsnorm_rope", kQk, qkv, heads, head_dim, q_gamma, k_gamma,
                            cos, sin);
}

void qk_rmsnorm_cross(Tensor& x, const Tensor& gamma, int heads, int head_dim) {
  detail::qk_heads_inplace("fast qk_rmsnorm_cross", kQk, x, gamma, heads, head_dim);
}

}  // namespace fast

}  // namespace s3d::kernels
