#include "sampler/step_plan.h"

#include <algorithm>
#include <map>

namespace s3d::sampler {

StepPlan plan_steps(const SamplerOptions& o) {
  StepPlan p;
  p.t = timesteps(o.steps, o.rescale_t);
  std::map<int, int> first;  // kind -> first step of that kind
  for (int k = 0; k < o.steps; ++k) {
    const bool in_interval = o.interval_lo <= p.t[k] && p.t[k] <= o.interval_hi;
    StepKind kind;
    kind.uncond = in_interval && o.guidance != 1.0;
    kind.cond = !(in_interval && o.guidance == 0.0);
    kind.batched = kind.uncond && kind.cond && o.flags.on(sparse3d::Flag::batched_cfg);
    p.kinds.push_back(kind);
    p.any_batched |= kind.batched;
    p.any_cond_alone |= kind.cond && !kind.batched;
    first.emplace(kind.code(), k);
  }
  for (const auto& [code, k] : first) p.all_kinds_ran = std::max(p.all_kinds_ran, k);
  return p;
}

bool runs_unconditional(const StepPlan& plan) {
  for (const StepKind& k : plan.kinds)
    if (k.uncond) return true;
  return false;
}

}  // namespace s3d::sampler
