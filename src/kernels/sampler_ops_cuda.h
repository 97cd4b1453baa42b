// CUDA launchers of the sampler ops (sampler_ops.cu); called by sampler_ops.cpp after
// validation. All tensors f32 except the i32 offsets and batch indices.
#pragma once

#include "core/tensor.h"

namespace s3d::kernels::cuda {

void cfg_combine(const Tensor& v_cond, const Tensor& v_uncond, float g, float one_minus_g,
                 Tensor& out);
void euler_step(const Tensor& x, const Tensor& v, float dt, Tensor& out);
void axpby_sub(const Tensor& x, float a, const Tensor& v, float b, Tensor& out);
void xstart_to_pred(const Tensor& x, float a, const Tensor& x0, float b, Tensor& out);
void asset_std(const Tensor& x, const Tensor& offsets, Tensor& out, bool unbiased);
void guidance_rescale(const Tensor& x0_cfg, const Tensor& std_pos, const Tensor& std_cfg,
                      const Tensor& batch_index, float rho, float one_minus_rho, Tensor& out);

}  // namespace s3d::kernels::cuda
