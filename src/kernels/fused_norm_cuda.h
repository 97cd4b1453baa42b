// CUDA launcher of modulated_layer_norm (fused_norm.cu); called by fused_norm.cpp after
// validation (vector path only: the support rule guarantees 16-byte rows).
#pragma once

#include "core/tensor.h"

namespace s3d::kernels::cuda {

void modulated_layer_norm(const Tensor& x, const RowView& shift, const RowView& scale,
                          const Tensor& batch_index, float eps, Tensor& out);

}  // namespace s3d::kernels::cuda
