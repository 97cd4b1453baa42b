// CUDA launcher of gated_residual_add (gated_residual_add.cu); called by gated_residual_add.cpp
// after validation (vector path only).
#pragma once

#include "core/tensor.h"

namespace s3d::kernels::cuda {

void gated_residual_add(const Tensor& x, const Tensor& h, const RowView& gate,
                        const Tensor& batch_index, Tensor& out);

}  // namespace s3d::kernels::cuda
