// CUDA launchers of the tolerance kernels (fast_norm.cu); called by fast_norm.cpp after
// validation and the support rule (16-byte rows, C <= 4096, head_dim <= 256).
#pragma once

#include "core/tensor.h"

namespace s3d::kernels::cuda {

void fast_modulated_layernorm(const Tensor& x, const RowView& shift, const RowView& scale,
                               const Tensor& batch_index, float eps, Tensor& out);

// `slots` C-wide slots (C = heads * head_dim) at the start of each row of x (row_stride
// elements apart) are normalised (gamma0 non-null; gamma1 for slot 1) and/or rotated (cos
// non-null) in place.
void fast_qk_inplace(Tensor& x, int64_t row_stride, int slots, int heads, int head_dim,
                     const float* gamma0, const float* gamma1, float scale, const float* cos,
                     const float* sin);

}  // namespace s3d::kernels::cuda
