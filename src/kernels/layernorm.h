// LayerNorm over the last dimension, fp32 math, any float dtype in and out:
// y = (x - mean) / sqrt(var + eps) * w + b, var the biased variance, one rounding at the
// store. weight and bias (f32 [C]) are optional (LayerNorm32 without affine).
#pragma once

#include "core/tensor.h"

namespace s3d::kernels {

void layer_norm(const Tensor& x, const Tensor* weight, const Tensor* bias, float eps,
                Tensor& out);

}  // namespace s3d::kernels
