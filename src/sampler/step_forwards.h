// The forwards of one request's steps: everything set up once per request before its loop
// (the layouts, the conditions on the device, the null-context path, the condition K/V cache,
// the t table and the step tables), and the step's forwards with the CFG combination.
#pragma once

#include "model/null_context.h"
#include "model/trunk/transformer.h"
#include "sampler/sampler.h"
#include "sampler/step_plan.h"

namespace s3d::sampler {

// What the forwards of step k give: the branches that ran and the guided prediction v (or
// the one branch that ran). The guidance rescale is not in here: its scalars depend on t.
struct StepOut {
  Tensor v_cond, v_uncond, v;
};

class StepForwards {
 public:
  StepForwards(const model::Transformer& model, const Inputs& in, const SamplerOptions& o,
               const StepPlan& plan);

  // x: [T, out]; t2: [2B] (the step's t per asset, both halves); mod_buffer: the step's
  // modulation (a ModulationTable step buffer) with step_tables, else undefined.
  StepOut run(int k, const Tensor& x, const Tensor& t2, const Tensor& mod_buffer) const;

  const model::Request& request() const { return req_; }
  // Step k's row of the t table, [2B] on the device.
  Tensor t_row(int k) const;
  // Step k's modulation buffer with step_tables, else undefined.
  Tensor step_mod(int k) const;

 private:
  void set_up_conditions(const Inputs& in);
  void set_up_kv_cache();
  // With sequence parallelism: the requests sharded and the conditions the plan's forwards
  // use moved to every rank, once per request.
  void set_up_shards();
  // model_.forward, or the sharded forward of the same operands.
  Tensor forward(const model::Request& req, const model::ShardedRequest& sr,
                 const model::ShardedCondition& shared, const Tensor& x, const Tensor& t,
                 const model::Condition& cond, const model::NullPath* null,
                 const model::Modulation* mod) const;

  const model::Transformer& model_;
  const SamplerOptions& o_;
  const StepPlan& plan_;
  int batch_ = 0;
  int64_t tokens_ = 0;
  model::Request req_, req2_;  // the request; both CFG halves as one batch (batched_cfg)
  Tensor cond_, null_cond_, cond2_;
  model::NullPath null_path_;
  bool symbolic_null_ = false;
  model::CondKV kv_cond_, kv_batched_;
  model::Condition cond_c_, cond_u_, cond_2_;
  model::ShardedRequest sr_, sr2_;
  model::ShardedCondition shared_c_, shared_u_, shared_2_;
  Tensor t_all_;  // f32 [steps, 2B]
  model::ModulationTable tables_;
};

}  // namespace s3d::sampler
