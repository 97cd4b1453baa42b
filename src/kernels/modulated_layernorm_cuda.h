// CUDA launcher of modulated_layernorm (modulated_layernorm.cu); called by modulated_layernorm.cpp after
// validation (vector path only: the support rule guarantees 16-byte rows).
#pragma once

#include "core/tensor.h"

namespace s3d::kernels::cuda {

void modulated_layernorm(const Tensor& x, const RowView& shift, const RowView& scale,
                          const Tensor& batch_index, float eps, Tensor& out);

}  // namespace s3d::kernels::cuda
