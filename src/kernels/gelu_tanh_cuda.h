// CUDA launcher of gelu_tanh_wide (gelu_tanh.cu).
#pragma once

#include "core/tensor.h"

namespace s3d::kernels::cuda {

void gelu_tanh_wide(const Tensor& x, Tensor& out);

}  // namespace s3d::kernels::cuda
