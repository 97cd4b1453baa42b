// What each step of a denoise loop runs, decided once per request from the sampler's
// settings: the t schedule and, per step, which CFG branches run and whether both run as one
// batch. The K/V cache, the graph runner and the loop all read this one rule.
#pragma once

#include <vector>

#include "sampler/sampler.h"

namespace s3d::sampler {

struct StepKind {
  bool cond = false, uncond = false, batched = false;
  int code() const { return (cond ? 1 : 0) + (uncond ? 2 : 0) + (batched ? 4 : 0); }
};

struct StepPlan {
  std::vector<double> t;        // t_k for k = 0..steps (timesteps())
  std::vector<StepKind> kinds;  // per step
  bool any_batched = false;     // some step runs both branches as one batch
  bool any_cond_alone = false;  // some step runs the conditional branch alone
  int all_kinds_ran = 0;        // the step by which every kind of the schedule has run once
  int steps() const { return static_cast<int>(kinds.size()); }
};

StepPlan plan_steps(const SamplerOptions& o);

// True when some step runs the unconditional branch (the only user of the null context).
bool runs_unconditional(const StepPlan& plan);

}  // namespace s3d::sampler
