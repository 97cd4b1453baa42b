// CUDA launchers of the volume <-> token transposes (volume_layout.cu); called by
// volume_layout.cpp after validation.
#pragma once

#include "core/tensor.h"

namespace s3d::kernels::cuda {

// Both directions: out[b, q, p] = in[b, p, q] for in f32 [B, P, Q].
void transpose_batched(const Tensor& in, int64_t B, int64_t P, int64_t Q, Tensor& out);

}  // namespace s3d::kernels::cuda
