// CUDA launcher of layer_norm (layernorm.cu); called by layernorm.cpp after validation.
#pragma once

#include "core/tensor.h"

namespace s3d::kernels::cuda {

// weight, bias: f32 [C] or null.
void layer_norm(const Tensor& x, const Tensor* weight, const Tensor* bias, float eps,
                Tensor& out);

}  // namespace s3d::kernels::cuda
