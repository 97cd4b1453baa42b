// CUDA launchers of the per-head RMSNorm and RoPE ops (qk_norm_rope.cu); called by
// qk_norm_rope.cpp after validation.
#pragma once

#include "core/tensor.h"
#include "kernels/reference_math.h"

namespace s3d::kernels::cuda {

void head_rmsnorm(const RowView& x, const Tensor& gamma, int heads, int head_dim, float scale,
                  Tensor& out);
// freqs: the freq_dim frequencies omega_j, computed on the host.
void rope_phases(const Tensor& coords, int half, const math::FreqTable& freqs, Tensor& cos_out,
                 Tensor& sin_out);
void rope_apply(const Tensor& x, const Tensor& cos, const Tensor& sin, Tensor& out);

}  // namespace s3d::kernels::cuda
