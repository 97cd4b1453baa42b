// The epilogue of a weight format that stores each output channel's weights scaled
// (ops/formats/row_scaled.h): y[m, n] = bf16(fma(float(y[m, n]), scale[n], bias[n])), in place,
// one rounding. The CPU loop is the reference; the CUDA kernel computes the same fma per
// element and so matches it bit for bit.
#pragma once

#include "core/tensor.h"

namespace s3d::kernels {

// y: bf16 [M, N] (M may be 0); scale: f32 [N]; bias: bf16 or f32 [N], or null (0).
void scale_columns_add_bias(Tensor& y, const Tensor& scale, const Tensor* bias);

}  // namespace s3d::kernels
