#include "sampler/step_forwards.h"

#include "core/error.h"
#include "kernels/elementwise.h"
#include "kernels/sampler_ops.h"

namespace s3d::sampler {
namespace {

using sparse3d::Flag;

// Both CFG branches as one batch: assets 0..B-1 with their condition, then B..2B-1, the
// same assets with the zero condition.
Tensor doubled_coords(const Tensor& coords, int batch) {
  const int64_t T = coords.size(0);
  Tensor out = Tensor::empty({2 * T, 4}, DType::I32, Device::CPU);
  const int32_t* src = coords.data_as<int32_t>();
  int32_t* dst = out.data_as<int32_t>();
  for (int64_t i = 0; i < 4 * T; ++i) dst[i] = src[i];
  for (int64_t t = 0; t < T; ++t) {
    dst[4 * (T + t)] = src[4 * t] + batch;
    for (int k = 1; k < 4; ++k) dst[4 * (T + t) + k] = src[4 * t + k];
  }
  return out;
}

Tensor doubled_rows(const Tensor& rows) {
  if (!rows.defined()) return rows;
  Shape s = rows.shape();
  s[0] *= 2;
  Tensor out = Tensor::empty(s, rows.dtype(), Device::CPU);
  out.rows(0, rows.size(0)).copy_from(rows);
  out.rows(rows.size(0), s[0]).copy_from(rows);
  return out;
}

// Concatenates two same-shaped device tensors along rows.
void stack_rows(const Tensor& a, const Tensor& b, Tensor& out) {
  RowView top = RowView::of(out.rows(0, a.size(0)));
  RowView bottom = RowView::of(out.rows(a.size(0), out.size(0)));
  kernels::copy_rows(RowView::of(a), top);
  kernels::copy_rows(RowView::of(b), bottom);
}

}  // namespace

StepForwards::StepForwards(const model::Transformer& model, const Inputs& in,
                           const SamplerOptions& o, const StepPlan& plan)
    : model_(model), o_(o), plan_(plan), batch_(in.batch), tokens_(in.coords.size(0)) {
  const int B = batch_;
  const int L = static_cast<int>(in.cond.size(1));
  req_ = model.prepare(in.coords, B, L, in.concat_cond);
  req_.use_flags(o.flags, o.plan_store);
  // The null-context path, decided once per request (refusals are counted fallbacks).
  if (o.flags.on(Flag::null_context_exact) || o.flags.on(Flag::null_context_cache)) {
    S3D_CHECK(o.null_context, "sampler: null_context_exact/null_context_cache need a "
              "NullContext built at start-up (SamplerOptions::null_context)");
    null_path_ = o.null_context->path_for(model, o.flags.on(Flag::null_context_cache),
                                          o.flags.on(Flag::batched_cfg), L, tokens_);
  }
  symbolic_null_ = null_path_.mode != model::NullContextMode::Reference;
  if (o.flags.on(Flag::batched_cfg)) {
    req2_ = model.prepare(doubled_coords(in.coords, B), 2 * B, L, doubled_rows(in.concat_cond),
                          symbolic_null_ ? B : 0);
    req2_.use_flags(o.flags, o.plan_store);
  }
  set_up_conditions(in);
  set_up_kv_cache();
  if (o.parallel) set_up_shards();
  std::vector<float> t_table;
  for (int k = 0; k < o.steps; ++k)
    for (int r = 0; r < 2 * B; ++r) t_table.push_back(static_cast<float>(1000.0 * plan.t[k]));
  t_all_ = Tensor::from_floats(t_table, {o.steps, 2 * B}, DType::F32).to(model.device());
  // step_tables: the t-only part of every forward, for the whole schedule in one call before
  // the loop ([steps, 2B] rows; serial CFG's forwards read a step's first B rows).
  if (o.flags.on(Flag::step_tables)) tables_ = model.modulation_table(req_.ops, t_all_);
}

// The conditions on the device, once per request: the real one, and the unconditional
// branch's (a real zero tensor, as the original, unless the null-context path marks it
// symbolically), both stacked for the batched reference forward.
void StepForwards::set_up_conditions(const Inputs& in) {
  const Device dev = model_.device();
  cond_ = Tensor::empty(in.cond.shape(), DType::BF16, dev);
  if (in.cond.dtype() == DType::BF16) {
    cond_.copy_from(in.cond);
  } else {
    kernels::cast(in.cond.to(dev), cond_);
  }
  if (!symbolic_null_) null_cond_ = Tensor::zeros(in.cond.shape(), DType::BF16, dev);
  if (o_.flags.on(Flag::batched_cfg) && !symbolic_null_) {
    cond2_ = Tensor::empty({2 * batch_, in.cond.size(1), in.cond.size(2)}, DType::BF16, dev);
    stack_rows(cond_, null_cond_, cond2_);
  }
}

// cond_kv_cache: the conditional forwards' condition projected once per request. The
// batched reference forward's condition includes the zero half, so it has its own.
void StepForwards::set_up_kv_cache() {
  const bool cache = o_.flags.on(Flag::cond_kv_cache);
  const bool batched_ref = o_.flags.on(Flag::batched_cfg) && !symbolic_null_;
  if (cache) {
    if (plan_.any_cond_alone || (plan_.any_batched && symbolic_null_))
      kv_cond_ = model_.precompute_cond_kv(req_.ops, cond_);
    if (plan_.any_batched && batched_ref)
      kv_batched_ = model_.precompute_cond_kv(req_.ops, cond2_);
  }
  const model::CondKV* kv1 = cache ? &kv_cond_ : nullptr;
  const model::CondKV* kv2 = cache ? (batched_ref ? &kv_batched_ : &kv_cond_) : nullptr;
  cond_c_ = model::Condition{cond_, 0, kv1};
  cond_u_ = symbolic_null_ ? model::Condition{Tensor(), batch_, nullptr}
                           : model::Condition{null_cond_, 0, nullptr};
  cond_2_ = symbolic_null_ ? model::Condition{cond_, batch_, kv2}
                           : model::Condition{cond2_, 0, kv2};
}

void StepForwards::set_up_shards() {
  const model::SequenceParallel& sp = *o_.parallel;
  bool cond_alone = false, uncond_alone = false, batched = false;
  for (const StepKind& kind : plan_.kinds) {
    batched = batched || kind.batched;
    cond_alone = cond_alone || (!kind.batched && kind.cond);
    uncond_alone = uncond_alone || (!kind.batched && kind.uncond);
  }
  if (cond_alone || uncond_alone) sr_ = sp.shard(req_);
  if (cond_alone) shared_c_ = sp.share(sr_, cond_c_, nullptr);
  if (uncond_alone) shared_u_ = sp.share(sr_, cond_u_, &null_path_);
  if (batched) {
    // CFG parallelism on an even number of ranks: the conditional half on one half of them,
    // the unconditional half on the other, each split over its ranks (on two ranks the blocks
    // exchange nothing); on an odd number the token split over all.
    sr2_ = sp.shard(req2_, sp.parts() % 2 == 0 ? 2 : 1);
    shared_2_ = sp.share(sr2_, cond_2_, &null_path_);
  }
}

Tensor StepForwards::forward(const model::Request& req, const model::ShardedRequest& sr,
                             const model::ShardedCondition& shared, const Tensor& x,
                             const Tensor& t, const model::Condition& cond,
                             const model::NullPath* null, const model::Modulation* mod) const {
  if (o_.parallel) return o_.parallel->forward(sr, x, t, shared, mod);
  return model_.forward(req, x, t, cond, null, mod);
}

Tensor StepForwards::t_row(int k) const { return t_all_.rows(k, k + 1).reshape({2 * batch_}); }

Tensor StepForwards::step_mod(int k) const {
  return o_.flags.on(Flag::step_tables) ? tables_.step_buffer(k) : Tensor();
}

StepOut StepForwards::run(int k, const Tensor& x, const Tensor& t2,
                          const Tensor& mod_buffer) const {
  const StepKind kind = plan_.kinds[static_cast<size_t>(k)];
  const int B = batch_;
  const int64_t T = tokens_;
  const Device dev = model_.device();
  StepOut r;
  model::Modulation mod;
  if (mod_buffer.defined())
    mod = model::Modulation::view(mod_buffer, tables_.num_blocks, tables_.rows,
                                  kind.batched ? 2 * B : B);
  const model::Modulation* mk = mod_buffer.defined() ? &mod : nullptr;
  if (kind.batched) {
    Tensor x2 = Tensor::empty({2 * T, x.size(1)}, DType::F32, dev);
    stack_rows(x, x, x2);
    Tensor v2 = forward(req2_, sr2_, shared_2_, x2, t2, cond_2_, &null_path_, mk);
    r.v_cond = v2.rows(0, T);
    r.v_uncond = v2.rows(T, 2 * T);
  } else {
    Tensor t_b = t2.rows(0, B);
    if (kind.cond) r.v_cond = forward(req_, sr_, shared_c_, x, t_b, cond_c_, nullptr, mk);
    if (kind.uncond) r.v_uncond = forward(req_, sr_, shared_u_, x, t_b, cond_u_, &null_path_, mk);
  }
  if (!kind.uncond) {
    r.v = r.v_cond;
  } else if (!kind.cond) {
    r.v = r.v_uncond;
  } else {
    r.v = Tensor::empty(x.shape(), DType::F32, dev);
    kernels::cfg_combine(r.v_cond, r.v_uncond, static_cast<float>(o_.guidance),
                         static_cast<float>(1.0 - o_.guidance), r.v);
  }
  return r;
}

}  // namespace s3d::sampler
