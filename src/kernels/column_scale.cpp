// scale_columns_add_bias: the checks, the CPU reference loop and the dispatch.
#include "kernels/column_scale.h"

#include <cmath>

#include "kernels/column_scale_cuda.h"
#include "kernels/kernel_checks.h"

namespace s3d::kernels {
namespace {

float bias_at(const Tensor* bias, int64_t n) {
  if (bias == nullptr) return 0.0f;
  if (bias->dtype() == DType::BF16) return bf16_to_float(bias->data_as<uint16_t>()[n]);
  return bias->data_as<float>()[n];
}

void scale_columns_cpu(Tensor& y, const Tensor& scale, const Tensor* bias) {
  const int64_t M = y.size(0), N = y.size(1);
  auto* out = y.data_as<uint16_t>();
  const float* s = scale.data_as<float>();
#pragma omp parallel for schedule(static)
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t n = 0; n < N; ++n) {
      uint16_t& v = out[m * N + n];
      v = float_to_bf16(std::fma(bf16_to_float(v), s[n], bias_at(bias, n)));
    }
  }
}

}  // namespace

void scale_columns_add_bias(Tensor& y, const Tensor& scale, const Tensor* bias) {
  const char* op = "scale_columns_add_bias";
  detail::check_dtype(y, DType::BF16, op, "y");
  S3D_CHECK(y.ndim() == 2, op, ": y must be 2-D [M, N], got ", y.describe());
  const int64_t N = y.size(1);
  detail::check_dtype(scale, DType::F32, op, "scale");
  detail::check_shape(scale, {N}, op, "scale");
  if (bias != nullptr) {
    detail::check_float(*bias, op, "bias");
    detail::check_shape(*bias, {N}, op, "bias");
    detail::check_same_device(op, {{"y", &y}, {"scale", &scale}, {"bias", bias}});
  } else {
    detail::check_same_device(op, {{"y", &y}, {"scale", &scale}});
  }
  if (y.numel() == 0) return;
  if (y.is_cuda()) {
    cuda::scale_columns_add_bias(y, scale, bias);
  } else {
    scale_columns_cpu(y, scale, bias);
  }
}

}  // namespace s3d::kernels
