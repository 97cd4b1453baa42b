// CUDA launcher of the fused q/k ops (qk_rmsnorm.cu); called by qk_rmsnorm.cpp after validation.
#pragma once

#include "core/tensor.h"

namespace s3d::kernels::cuda {

// `slots` C-wide slots (C = heads * head_dim) at the start of each row of x (row_stride
// elements apart) are normalised (gamma[s] non-null) and/or rotated (cos non-null) in place.
void qk_inplace(Tensor& x, int64_t row_stride, int slots, int heads, int head_dim,
                const float* gamma0, const float* gamma1, float scale, const float* cos,
                const float* sin);

}  // namespace s3d::kernels::cuda
