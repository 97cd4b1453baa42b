#include "sampler/euler_cfg.h"

#include "kernels/sampler_ops.h"

namespace s3d::sampler {
namespace {

// x_0 of the conditional and the guided prediction, std-matched per asset; returns the
// velocity that gives the rescaled x_0.
Tensor rescaled_velocity(const Tensor& x, const StepOut& so, double t, const SamplerOptions& o,
                         const model::Request& req) {
  const Device dev = x.device();
  const int B = req.batch;
  const float a = static_cast<float>(1.0 - o.sigma_min);
  const float b = static_cast<float>(o.sigma_min + (1.0 - o.sigma_min) * t);
  Tensor x0_pos = Tensor::empty(x.shape(), DType::F32, dev);
  Tensor x0_cfg = Tensor::empty(x.shape(), DType::F32, dev);
  kernels::axpby_sub(x, a, so.v_cond, b, x0_pos);
  kernels::axpby_sub(x, a, so.v, b, x0_cfg);
  Tensor std_pos = Tensor::empty({B}, DType::F32, dev);
  Tensor std_cfg = Tensor::empty({B}, DType::F32, dev);
  kernels::asset_std(x0_pos, req.token_offsets, std_pos, o.unbiased_rescale_std);
  kernels::asset_std(x0_cfg, req.token_offsets, std_cfg, o.unbiased_rescale_std);
  Tensor x0 = Tensor::empty(x.shape(), DType::F32, dev);
  kernels::guidance_rescale(x0_cfg, std_pos, std_cfg, req.batch_index,
                            static_cast<float>(o.guidance_rescale),
                            static_cast<float>(1.0 - o.guidance_rescale), x0);
  Tensor rescaled = Tensor::empty(x.shape(), DType::F32, dev);
  kernels::xstart_to_pred(x, a, x0, b, rescaled);
  return rescaled;
}

}  // namespace

Tensor euler_cfg_step(const Tensor& x, const StepOut& so, const StepKind& kind, double t,
                      double t_prev, const SamplerOptions& o, const model::Request& req) {
  Tensor v = so.v;
  if (kind.uncond && kind.cond && o.guidance_rescale > 0)
    v = rescaled_velocity(x, so, t, o, req);
  Tensor next = Tensor::empty(x.shape(), DType::F32, x.device());
  kernels::euler_step(x, v, static_cast<float>(t - t_prev), next);
  return next;
}

}  // namespace s3d::sampler
