// fp32 elementwise and per-asset reductions of the flow-Euler CFG sampler. Scalars are
// passed as float, as PyTorch converts a Python float when it multiplies an fp32 tensor;
// every product and sum rounds in fp32, in the order written (no FMA).
#pragma once

#include "core/tensor.h"

namespace s3d::kernels {

// out = g * v_cond + (1 - g) * v_uncond, with one_minus_g passed in (Python computes it
// in double).
void cfg_combine(const Tensor& v_cond, const Tensor& v_uncond, float g, float one_minus_g,
                 Tensor& out);

// out = x - dt * v
void euler_step(const Tensor& x, const Tensor& v, float dt, Tensor& out);

// out = a * x - b * v   (x_0 from a velocity: a = 1 - sigma_min, b = sigma_min + (1-sigma_min) t)
void axpby_sub(const Tensor& x, float a, const Tensor& v, float b, Tensor& out);

// out = (a * x - x0) / b   (velocity from x_0)
void xstart_to_pred(const Tensor& x, float a, const Tensor& x0, float b, Tensor& out);

// out[i] = standard deviation of all elements of asset i, i.e. of rows
// [offsets[i], offsets[i+1]) of x (f32 [T, C]); accumulated in double. Population (divide by
// n) or, with `unbiased`, Bessel-corrected (n - 1: torch's Tensor.std, the dense sampler's).
// offsets: i32 [B+1] on x's device; out: f32 [B].
void asset_std(const Tensor& x, const Tensor& offsets, Tensor& out, bool unbiased = false);

// Guidance rescale: out = rho * (x0_cfg * (std_pos[b] / std_cfg[b])) + (1 - rho) * x0_cfg for
// each row's asset b. batch_index: i32 [T]; std_pos, std_cfg: f32 [B].
void guidance_rescale(const Tensor& x0_cfg, const Tensor& std_pos, const Tensor& std_cfg,
                      const Tensor& batch_index, float rho, float one_minus_rho, Tensor& out);

}  // namespace s3d::kernels
