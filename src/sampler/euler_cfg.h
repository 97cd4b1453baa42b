// The per-step update after the forwards: TRELLIS.2's guidance rescale (when both branches
// ran and rho > 0: x_0 of the guided prediction std-matched per asset to the conditional
// one's) and the flow Euler step x_{t_prev} = x_t - (t - t_prev) v.
#pragma once

#include "model/trunk/transformer.h"
#include "sampler/sampler.h"
#include "sampler/step_forwards.h"
#include "sampler/step_plan.h"

namespace s3d::sampler {

// x after step k (a new tensor: a graph's outputs stay as the graph wrote them).
Tensor euler_cfg_step(const Tensor& x, const StepOut& so, const StepKind& kind, double t,
                      double t_prev, const SamplerOptions& o, const model::Request& req);

}  // namespace s3d::sampler
