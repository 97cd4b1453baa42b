// LayerNorm: argument checks, device dispatch, and the CPU oracle (namespace cpu).
#include "kernels/layernorm.h"

#include "kernels/kernel_checks.h"
#include "kernels/layernorm_cuda.h"
#include "kernels/reference_math.h"

namespace s3d::kernels {
namespace cpu {

// Two passes per row in double (mean, then squared deviations), then fp32 as the GPU does.
void layer_norm(const Tensor& x, const Tensor* weight, const Tensor* bias, float eps,
                Tensor& out) {
  const int64_t C = x.size(-1);
  const int64_t rows = x.numel() / C;
  const void* xp = x.data();
  void* yp = out.data();
  const DType xd = x.dtype(), yd = out.dtype();
  const float* w = weight ? weight->data_as<float>() : nullptr;
  const float* b = bias ? bias->data_as<float>() : nullptr;
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t base = r * C;
    double sum = 0.0;
    for (int64_t c = 0; c < C; ++c) sum += detail::load_f32(xp, xd, base + c);
    const double mean_d = sum / static_cast<double>(C);
    double sum_sq = 0.0;
    for (int64_t c = 0; c < C; ++c) {
      const double d = detail::load_f32(xp, xd, base + c) - mean_d;
      sum_sq += d * d;
    }
    const float mean = math::mean_from_sum(sum, C);
    const float rstd = math::layer_norm_rstd(math::mean_from_sum(sum_sq, C), eps);
    for (int64_t c = 0; c < C; ++c) {
      const float v = detail::load_f32(xp, xd, base + c);
      detail::store_f32(yp, yd, base + c, math::layer_norm_apply(v, mean, rstd, w, b, c));
    }
  }
}

}  // namespace cpu

void layer_norm(const Tensor& x, const Tensor* weight, const Tensor* bias, float eps,
                Tensor& out) {
  const char* op = "layer_norm";
  detail::check_float(x, op, "x");
  detail::check_float(out, op, "out");
  detail::check_same_shape(out, x, op, "out", "x");
  S3D_CHECK(x.ndim() >= 1 && x.size(-1) > 0, op, ": x needs a non-empty last dimension, got ",
            x.describe());
  const int64_t C = x.size(-1);
  detail::check_same_device(op, {{"x", &x}, {"out", &out}});
  if (weight != nullptr) {
    detail::check_dtype(*weight, DType::F32, op, "weight");
    detail::check_shape(*weight, {C}, op, "weight");
    detail::check_same_device(op, {{"x", &x}, {"weight", weight}});
  }
  if (bias != nullptr) {
    detail::check_dtype(*bias, DType::F32, op, "bias");
    detail::check_shape(*bias, {C}, op, "bias");
    detail::check_same_device(op, {{"x", &x}, {"bias", bias}});
  }
  S3D_CHECK(eps >= 0.0f, op, ": eps must be >= 0, got ", eps);
  if (x.numel() == 0) return;
  if (x.is_cuda()) {
    cuda::layer_norm(x, weight, bias, eps, out);
  } else {
    cpu::layer_norm(x, weight, bias, eps, out);
  }
}

}  // namespace s3d::kernels
