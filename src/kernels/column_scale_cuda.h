// CUDA launcher of scale_columns_add_bias (column_scale.cu).
#pragma once

#include "core/tensor.h"

namespace s3d::kernels::cuda {

void scale_columns_add_bias(Tensor& y, const Tensor& scale, const Tensor* bias);

}  // namespace s3d::kernels::cuda
