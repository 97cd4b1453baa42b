// Modulated LayerNorm: the reference chain, the fused kernel's support rule, argument checks and device dispatch, and its CPU version
// (cpu::layer_norm's row statistics, then math::modulate_chain per element).
#include "kernels/modulated_layernorm.h"

#include "core/error.h"
#include "kernels/elementwise.h"
#include "kernels/modulated_layernorm_cuda.h"
#include "kernels/kernel_checks.h"
#include "kernels/layernorm.h"
#include "kernels/reference_math.h"

namespace s3d::kernels {
namespace {

using detail::aligned16;

}  // namespace

namespace cpu {

void modulated_layernorm(const Tensor& x, const RowView& shift, const RowView& scale,
                          const Tensor& batch_index, float eps, Tensor& out) {
  const int64_t T = x.size(0), C = x.size(1);
  const uint16_t* xp = x.data_as<uint16_t>();
  const auto* shp = static_cast<const uint16_t*>(shift.data());
  const auto* scp = static_cast<const uint16_t*>(scale.data());
  const int32_t* bidx = batch_index.data_as<int32_t>();
  uint16_t* yp = out.data_as<uint16_t>();
  for (int64_t t = 0; t < T; ++t) {
    S3D_CHECK(bidx[t] >= 0 && bidx[t] < shift.rows, "modulated_layernorm: batch_index[", t,
              "] = ", bidx[t], " is outside [0, ", shift.rows, ")");
  }
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < T; ++t) {
    const uint16_t* xr = xp + t * C;
    // Two passes in double, as cpu::layer_norm.
    double sum = 0.0;
    for (int64_t c = 0; c < C; ++c) sum += bf16_to_float(xr[c]);
    const double mean_d = sum / static_cast<double>(C);
    double sum_sq = 0.0;
    for (int64_t c = 0; c < C; ++c) {
      const double d = bf16_to_float(xr[c]) - mean_d;
      sum_sq += d * d;
    }
    const float mean = math::mean_from_sum(sum, C);
    const float rstd = math::layer_norm_rstd(math::mean_from_sum(sum_sq, C), eps);
    const uint16_t* sh = shp + bidx[t] * shift.stride;
    const uint16_t* sc = scp + bidx[t] * scale.stride;
    for (int64_t c = 0; c < C; ++c) {
      const float ln =
          math::layer_norm_apply(bf16_to_float(xr[c]), mean, rstd, nullptr, nullptr, c);
      yp[t * C + c] =
          float_to_bf16(math::modulate_chain(ln, bf16_to_float(sc[c]), bf16_to_float(sh[c])));
    }
  }
}

}  // namespace cpu

namespace fused {

std::string modulated_layernorm_unsupported(const Tensor& x, const RowView& shift,
                                             const RowView& scale, const Tensor& out) {
  if (x.dtype() != DType::BF16) return cat("x is ", x.describe(), ", not bf16");
  if (out.dtype() != DType::BF16 || shift.dtype() != DType::BF16 || scale.dtype() != DType::BF16)
    return "out, shift and scale must be bf16";
  const int64_t C = x.ndim() == 2 ? x.size(1) : 0;
  if (C % 8 != 0) return cat("C = ", C, " is not a multiple of 8 (16-byte chunks)");
  if (shift.stride % 8 != 0 || scale.stride % 8 != 0)
    return cat("modulation row stride ", shift.stride, " is not a multiple of 8");
  if (!aligned16(x.data()) || !aligned16(out.data()) || !aligned16(shift.data()) ||
      !aligned16(scale.data()))
    return "rows are not 16-byte aligned";
  return "";
}

void modulated_layernorm(const Tensor& x, const RowView& shift, const RowView& scale,
                          const Tensor& batch_index, float eps, Tensor& out) {
  const char* op = "modulated_layernorm";
  detail::check_modulated_norm_operands(op, x, shift, scale, batch_index, eps, out);
  detail::run_supported(
      op, modulated_layernorm_unsupported(x, shift, scale, out), x,
      [&] { cpu::modulated_layernorm(x, shift, scale, batch_index, eps, out); },
      [&] { cuda::modulated_layernorm(x, shift, scale, batch_index, eps, out); });
}

}  // namespace fused

namespace reference {

// pure_eager's chain, one op per launch at the original's rounding points.
void modulated_layernorm(const Tensor& x, const RowView& shift, const RowView& scale,
                         const Tensor& batch_index, float eps, Tensor& out) {
  const int64_t T = x.size(0), C = x.size(1), B = scale.rows;
  const Device dev = x.device();
  auto bf16 = [&](Shape s) { return Tensor::empty(s, DType::BF16, dev); };
  Tensor hn = bf16({T, C});
  layer_norm(x, nullptr, nullptr, eps, hn);
  Tensor one_plus = bf16({B, C});
  add_scalar(scale, 1.0f, one_plus);
  Tensor g = bf16({T, C});
  gather_rows(RowView::of(one_plus), batch_index, g);
  Tensor scaled = bf16({T, C});
  mul(hn, g, scaled);
  gather_rows(shift, batch_index, g);
  add(scaled, g, out);
}

}  // namespace reference
}  // namespace s3d::kernels
