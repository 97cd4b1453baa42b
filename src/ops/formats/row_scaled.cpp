// The weight format row_scaled, the test format of the seam (ops/weight_format.h): each bf16
// layer's weight row n is stored divided by its largest magnitude s_n (so every stored value
// lies in [-1, 1], the shape an FP8 format's weights take) and s_n is kept in f32 beside it;
// apply runs the `linear` op without its bias, then folds the scale and the bias into the
// output in one epilogue kernel: y[m, n] = bf16(fma(bf16(x W'^T)[m, n], s_n, b_n)).
// Two roundings more than plain (the stored weight and the product before the epilogue):
// held to a tolerance, never bitwise. It makes nothing faster; it exists so that a format
// with scales (FP8) is one file like this one, its kernels and its row.
#include <algorithm>
#include <cmath>

#include "core/bf16.h"
#include "kernels/column_scale.h"
#include "ops/linear.h"
#include "ops/weight_format.h"

namespace s3d::ops {
namespace {

std::vector<FormatTensor> layout(int64_t out, int64_t in, DType dtype) {
  return {{".weight", {out, in}, DType::BF16, &LinearWeights::weight},
          {".weight_scale", {out}, DType::F32, &LinearWeights::scale},
          {".bias", {out}, dtype, &LinearWeights::bias}};
}

// W' = bf16(W / s) row by row, s the row's largest magnitude (1 for a zero row).
std::vector<Tensor> create(const Tensor& weight, const Tensor& bias) {
  S3D_CHECK(!weight.is_cuda() && weight.dtype() == DType::BF16 && weight.ndim() == 2,
            "row_scaled: a layer's weight must be a bf16 [out, in] host tensor, got ",
            weight.describe());
  const int64_t out = weight.size(0), in = weight.size(1);
  Tensor scaled = Tensor::empty({out, in}, DType::BF16, Device::CPU);
  Tensor scale = Tensor::empty({out}, DType::F32, Device::CPU);
  const auto* w = weight.data_as<uint16_t>();
  auto* q = scaled.data_as<uint16_t>();
  auto* s = scale.data_as<float>();
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < out; ++n) {
    float m = 0.0f;
    for (int64_t k = 0; k < in; ++k) m = std::max(m, std::fabs(bf16_to_float(w[n * in + k])));
    s[n] = m > 0.0f ? m : 1.0f;
    for (int64_t k = 0; k < in; ++k) q[n * in + k] = float_to_bf16(bf16_to_float(w[n * in + k]) / s[n]);
  }
  return {scaled, scale, bias};
}

void apply(const OpPlan& plan, const Tensor& x, const LinearWeights& w, Tensor& y) {
  linear(plan, x, w.weight, nullptr, y, gemm::Epilogue::None);
  kernels::scale_columns_add_bias(y, w.scale, w.bias_or_null());
}

}  // namespace

WeightFormat row_scaled_format() {
  return WeightFormat{
      "row_scaled",
      "test format: bf16 weights divided by each output channel's largest magnitude, the f32 "
      "scale folded in after the GEMM",
      Contract::Tolerance,
      1e-2,
      "kernels::scale_columns_add_bias",
      [](DType dtype) { return dtype == DType::BF16; },
      &layout,
      &create,
      &apply};
}

}  // namespace s3d::ops
