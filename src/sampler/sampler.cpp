#include "sampler/sampler.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <cmath>

#include "contract/fallback.h"
#include "core/allocator.h"
#include "core/cuda_graph.h"
#include "core/cuda_util.h"
#include "core/profiler.h"
#include "core/error.h"
#include "kernels/elementwise.h"
#include "kernels/sampler_ops.h"

namespace s3d::sampler {

using sparse3d::Flag;

namespace {

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

Tensor doubled_rows(const Tensor& host) {
  if (!host.defined()) return host;
  Shape s = host.shape();
  s[0] *= 2;
  Tensor out = Tensor::empty(s, host.dtype(), Device::CPU);
  out.rows(0, host.size(0)).copy_from(host);
  out.rows(host.size(0), s[0]).copy_from(host);
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

Inputs pack(const std::vector<Inputs>& requests) {
  S3D_CHECK(!requests.empty(), "pack: no request to pack");
  const Inputs& first = requests[0];
  int64_t T = 0;
  int B = 0;
  for (const Inputs& r : requests) {
    S3D_CHECK(r.coords.defined() && r.coords.ndim() == 2 && r.coords.size(1) == 4 &&
                  r.coords.dtype() == DType::I32 && r.coords.device() == Device::CPU,
              "pack: coordinates must be host i32 [T, 4], got ", r.coords.describe());
    S3D_CHECK(r.cond.defined() && r.cond.ndim() == 3 && r.cond.size(0) == r.batch &&
                  r.cond.size(1) == first.cond.size(1) && r.cond.size(2) == first.cond.size(2) &&
                  r.cond.dtype() == first.cond.dtype(),
              "pack: every condition must be [B, ", first.cond.size(1), ", ",
              first.cond.size(2), "] of one dtype, got ", r.cond.describe());
    S3D_CHECK(r.noise.defined() && r.noise.size(0) == r.coords.size(0) &&
                  r.noise.shape() == Shape({r.coords.size(0), first.noise.size(1)}),
              "pack: noise must be [T, ", first.noise.size(1), "], got ", r.noise.describe());
    S3D_CHECK(r.concat_cond.defined() == first.concat_cond.defined(),
              "pack: either every request has concat_cond or none");
    T += r.coords.size(0);
    B += r.batch;
  }
  Inputs out;
  out.batch = B;
  out.coords = Tensor::empty({T, 4}, DType::I32, Device::CPU);
  out.noise = Tensor::empty({T, first.noise.size(1)}, DType::F32, Device::CPU);
  out.cond = Tensor::empty({B, first.cond.size(1), first.cond.size(2)}, first.cond.dtype(),
                           Device::CPU);
  if (first.concat_cond.defined())
    out.concat_cond = Tensor::empty({T, first.concat_cond.size(1)}, DType::F32, Device::CPU);
  int64_t row = 0;
  int asset = 0;
  int32_t* dst = out.coords.data_as<int32_t>();
  for (const Inputs& r : requests) {
    const int64_t n = r.coords.size(0);
    const int32_t* src = r.coords.data_as<int32_t>();
    for (int64_t t = 0; t < n; ++t) {
      S3D_CHECK(src[4 * t] >= 0 && src[4 * t] < r.batch, "pack: batch index ", src[4 * t],
                " of token ", t, " is outside [0, ", r.batch, ")");
      dst[4 * (row + t)] = src[4 * t] + asset;
      for (int k = 1; k < 4; ++k) dst[4 * (row + t) + k] = src[4 * t + k];
    }
    out.noise.rows(row, row + n).copy_from(r.noise);
    if (out.concat_cond.defined()) out.concat_cond.rows(row, row + n).copy_from(r.concat_cond);
    out.cond.rows(asset, asset + r.batch).copy_from(r.cond);
    row += n;
    asset += r.batch;
  }
  return out;
}

std::vector<int64_t> pack_offsets(const std::vector<Inputs>& requests) {
  std::vector<int64_t> off = {0};
  for (const Inputs& r : requests) off.push_back(off.back() + r.coords.size(0));
  return off;
}

SamplerOptions SamplerOptions::protocol() { return SamplerOptions{}; }

void SamplerOptions::apply(const sparse3d::ExecutionPlan& plan) { flags = plan.flags(); }

SamplerOptions SamplerOptions::released() {
  SamplerOptions o;
  o.steps = 12;
  o.guidance = 7.5;
  o.interval_lo = 0.6;
  o.interval_hi = 1.0;
  o.guidance_rescale = 0.5;
  o.rescale_t = 3.0;
  return o;
}

void SamplerOptions::validate() const {
  S3D_CHECK(steps >= 1 && steps <= 10000, "sampler: steps must be in [1, 10000], got ", steps);
  S3D_CHECK(std::isfinite(rescale_t) && rescale_t > 0, "sampler: rescale_t must be > 0, got ",
            rescale_t);
  S3D_CHECK(std::isfinite(guidance), "sampler: guidance strength must be finite, got ", guidance);
  S3D_CHECK(std::isfinite(interval_lo) && std::isfinite(interval_hi) && interval_lo <= interval_hi,
            "sampler: guidance interval [", interval_lo, ", ", interval_hi, "] is not an interval");
  S3D_CHECK(std::isfinite(guidance_rescale) && guidance_rescale >= 0 && guidance_rescale <= 1,
            "sampler: guidance rescale must be in [0, 1], got ", guidance_rescale);
  S3D_CHECK(sigma_min >= 0 && sigma_min < 1, "sampler: sigma_min must be in [0, 1), got ",
            sigma_min);
}

std::vector<double> timesteps(int steps, double rescale_t) {
  std::vector<double> t(static_cast<size_t>(steps) + 1);
  for (int k = 0; k <= steps; ++k) {
    // numpy.linspace(1, 0, steps + 1): start + k * step, the last value exactly 0.
    double s = k == steps ? 0.0 : 1.0 + k * (-1.0 / steps);
    t[k] = rescale_t * s / (1.0 + (rescale_t - 1.0) * s);
  }
  return t;
}

Output sample(const model::SLatFlowModel& model, const Inputs& in, const SamplerOptions& o,
              bool keep_first_forward, const StepCallback& on_step) {
  o.validate();
  // The loop-level flags this function branches on (the forwards read the fused-kernel ones).
  const bool batched_cfg = o.flags.on(Flag::batched_cfg);
  const bool cond_kv_cache = o.flags.on(Flag::cond_kv_cache);
  const bool step_tables = o.flags.on(Flag::step_tables);
  const auto& cfg = model.config();
  const Device dev = model.device();
  const int B = in.batch;
  check_tensor(in.noise, "sampler noise", DType::F32, {in.coords.size(0), cfg.out_channels});
  S3D_CHECK(in.cond.defined() && in.cond.ndim() == 3 && in.cond.size(0) == B &&
                in.cond.size(2) == cfg.cond_channels,
            "sampler: condition must be [", B, ", L, ", cfg.cond_channels, "], got ",
            in.cond.describe());
  const int L = static_cast<int>(in.cond.size(1));
  const int64_t T = in.coords.size(0);
  // The request's clock: from here to the loop's start is its set-up (Output::setup_seconds).
  if (dev == Device::CUDA) synchronize();
  const auto request_start = std::chrono::steady_clock::now();

  // Once per request: the layout, the conditions on the device, the whole t schedule.
  model::Request req = model.prepare(in.coords, B, L, in.concat_cond);
  req.flags = o.flags;
  Tensor cond = Tensor::empty(in.cond.shape(), DType::BF16, dev);
  if (in.cond.dtype() == DType::BF16) {
    cond.copy_from(in.cond);
  } else {
    kernels::cast(in.cond.to(dev), cond);
  }
  // The null-context path, decided once per request (refusals are counted fallbacks).
  model::NullPath null_path;
  if (o.flags.on(Flag::null_context_exact) || o.flags.on(Flag::null_context_cache)) {
    S3D_CHECK(o.null_context, "sampler: ", sparse3d::name(Flag::null_context_exact), "/",
              sparse3d::name(Flag::null_context_cache),
              " need a NullContext built at start-up (SamplerOptions::null_context)");
    null_path =
        o.null_context->path_for(model, o.flags.on(Flag::null_context_cache), batched_cfg, L);
  }
  const bool symbolic_null = null_path.mode != model::NullContextMode::Reference;
  // The unconditional branch's condition: a real zero tensor, as the original, unless the
  // null-context path marks it symbolically.
  Tensor null_cond;
  if (!symbolic_null) null_cond = Tensor::zeros(in.cond.shape(), DType::BF16, dev);
  model::Request req2;
  Tensor cond2;
  if (batched_cfg) {
    req2 = model.prepare(doubled_coords(in.coords, B), 2 * B, L, doubled_rows(in.concat_cond),
                         symbolic_null ? B : 0);
    req2.flags = o.flags;
    if (!symbolic_null) {
      cond2 = Tensor::empty({2 * B, L, cfg.cond_channels}, DType::BF16, dev);
      stack_rows(cond, null_cond, cond2);
    }
  }
  const std::vector<double> ts = timesteps(o.steps, o.rescale_t);
  // What step k runs: which branches, and whether both as one batch.
  struct StepKind {
    bool cond, uncond, batched;
    int code() const { return (cond ? 1 : 0) + (uncond ? 2 : 0) + (batched ? 4 : 0); }
  };
  auto kind_of = [&](int k) {
    const bool in_interval = o.interval_lo <= ts[k] && ts[k] <= o.interval_hi;
    const bool need_uncond = in_interval && o.guidance != 1.0;
    const bool need_cond = !(in_interval && o.guidance == 0.0);
    return StepKind{need_cond, need_uncond, need_uncond && need_cond && batched_cfg};
  };
  // Which forwards the schedule runs: both branches batched, or the conditional one alone.
  bool any_batched = false, any_cond_alone = false;
  for (int k = 0; k < o.steps; ++k) {
    const StepKind kind = kind_of(k);
    any_batched |= kind.batched;
    any_cond_alone |= kind.cond && !kind.batched;
  }
  // cond_kv_cache: the conditional forwards' condition projected once per request. The
  // batched reference forward's condition includes the zero half, so it has its own.
  const bool batched_ref = batched_cfg && !symbolic_null;
  model::CondKV kv_cond, kv_batched;
  if (cond_kv_cache) {
    if (any_cond_alone || (any_batched && symbolic_null)) kv_cond = model.precompute_cond_kv(cond);
    if (any_batched && batched_ref) kv_batched = model.precompute_cond_kv(cond2);
  }
  const model::CondKV* kv1 = cond_kv_cache ? &kv_cond : nullptr;
  const model::CondKV* kv2 = cond_kv_cache ? (batched_ref ? &kv_batched : &kv_cond) : nullptr;
  const model::Condition cond_c{cond, 0, kv1};
  const model::Condition cond_u = symbolic_null ? model::Condition{Tensor(), B, nullptr}
                                                : model::Condition{null_cond, 0, nullptr};
  const model::Condition cond_2 = symbolic_null ? model::Condition{cond, B, kv2}
                                                : model::Condition{cond2, 0, kv2};
  std::vector<float> t_table;
  for (int k = 0; k < o.steps; ++k)
    for (int r = 0; r < 2 * B; ++r) t_table.push_back(static_cast<float>(1000.0 * ts[k]));
  Tensor t_all = Tensor::from_floats(t_table, {o.steps, 2 * B}, DType::F32).to(dev);

  // step_tables: the t-only part of every forward, for the whole schedule in one call before
  // the loop ([steps, 2B] rows; serial CFG's forwards read a step's first B rows).
  model::ModulationTable tables;
  if (step_tables) tables = model.modulation_table(t_all);

  // The forwards of step k and the CFG combination (not the guidance rescale, whose scalars
  // depend on t): v is the guided prediction or the one branch that ran.
  struct StepOut {
    Tensor v_cond, v_uncond, v;
  };
  // x: [T, out]; t2: [2B] (the step's t per asset, both halves); mod_buffer: the step's
  // modulation (a ModulationTable step buffer) with step_tables, else undefined.
  auto forwards = [&](int k, const Tensor& x, const Tensor& t2, const Tensor& mod_buffer) {
    const StepKind kind = kind_of(k);
    StepOut r;
    model::Modulation mod;
    if (mod_buffer.defined())
      mod = model::Modulation::view(mod_buffer, tables.num_blocks, tables.rows,
                                    kind.batched ? 2 * B : B);
    const model::Modulation* mk = mod_buffer.defined() ? &mod : nullptr;
    if (kind.batched) {
      Tensor x2 = Tensor::empty({2 * T, cfg.out_channels}, DType::F32, dev);
      stack_rows(x, x, x2);
      Tensor v2 = model.forward(req2, x2, t2, cond_2, &null_path, mk);
      r.v_cond = v2.rows(0, T);
      r.v_uncond = v2.rows(T, 2 * T);
    } else {
      Tensor t_b = t2.rows(0, B);
      if (kind.cond) r.v_cond = model.forward(req, x, t_b, cond_c, nullptr, mk);
      if (kind.uncond) r.v_uncond = model.forward(req, x, t_b, cond_u, &null_path, mk);
    }
    if (!kind.uncond) {
      r.v = r.v_cond;
    } else if (!kind.cond) {
      r.v = r.v_uncond;
    } else {
      r.v = Tensor::empty(x.shape(), DType::F32, dev);
      kernels::cfg_combine(r.v_cond, r.v_uncond, static_cast<float>(o.guidance),
                           static_cast<float>(1.0 - o.guidance), r.v);
    }
    return r;
  };

  // cuda_graphs: per step kind, the first occurrence runs eagerly (it primes the library
  // caches and workspaces, inside the kind's private pool); once every kind of the schedule
  // has run once (so no later first run can grow a workspace a graph points to), the next
  // occurrence is captured and every later one replays it, reading x and t from fixed
  // buffers (with step_tables, the step's modulation too). Refusals are counted fallbacks
  // and run eagerly.
  bool graphs = o.flags.on(Flag::cuda_graphs);
  auto refuse_graphs = [&](const std::string& why) {
    if (graphs) contract::record_fallback(Flag::cuda_graphs, why);
    graphs = false;
  };
  if (graphs && dev != Device::CUDA) refuse_graphs("the CPU backend has no CUDA graphs");
  if (graphs && profiler::mode() != profiler::Mode::Off)
    refuse_graphs("the profiler is on (its events cannot be read inside a graph)");
  if (graphs && !DeviceAllocator::instance().caching())
    refuse_graphs("the caching allocator is off (SPARSE3D_NO_CACHING)");
  struct KindGraph {
    uint64_t pool = 0;
    bool ran = false;
    std::unique_ptr<CapturedGraph> graph;
    StepOut out;  // the graph's outputs (its pool's blocks)
  };
  std::map<int, KindGraph> kinds;
  int all_kinds_ran = 0;  // the step after which every kind of the schedule has run once
  {
    std::map<int, int> first;
    for (int k = 0; k < o.steps; ++k) first.emplace(kind_of(k).code(), k);
    for (const auto& [code, k] : first) all_kinds_ran = std::max(all_kinds_ran, k);
  }
  Tensor x_in, t_in, mod_in;  // the graphs' fixed inputs
  if (graphs) {
    x_in = Tensor::empty({T, cfg.out_channels}, DType::F32, dev);
    t_in = Tensor::empty({2 * B}, DType::F32, dev);
    if (step_tables) mod_in = Tensor::empty(tables.step_buffer(0).shape(), DType::BF16, dev);
  }
  auto step_mod = [&](int k) { return step_tables ? tables.step_buffer(k) : Tensor(); };
  auto copy_into = [&](const Tensor& src, Tensor& dst) {
    S3D_CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), src.nbytes(),
                                   cudaMemcpyDeviceToDevice, current_stream()));
    count_library_call("memcpy");
  };

  Tensor x = in.noise.to(dev);
  Output out;
  if (dev == Device::CUDA) synchronize();
  out.launches_before_loop = launch_counts();
  auto start = std::chrono::steady_clock::now();
  out.setup_seconds = std::chrono::duration<double>(start - request_start).count();
  for (int k = 0; k < o.steps; ++k) {
    const double t = ts[k], t_prev = ts[k + 1];
    const StepKind kind = kind_of(k);
    const bool need_uncond = kind.uncond, need_cond = kind.cond;
    Tensor t_row = t_all.rows(k, k + 1).reshape({2 * B});

    StepOut so;
    if (!graphs) {
      so = forwards(k, x, t_row, step_mod(k));
    } else {
      KindGraph& g = kinds[kind.code()];
      if (g.pool == 0) g.pool = DeviceAllocator::instance().create_pool();
      if (!g.graph && g.ran && k > all_kinds_ran) {
        try {
          g.graph = CapturedGraph::capture(g.pool, [&] { g.out = forwards(k, x_in, t_in, mod_in); });
          out.graphs_captured++;
          out.graph_capture_seconds += g.graph->capture_seconds();
          out.graph_nodes += g.graph->nodes();
        } catch (const Error& e) {
          g.out = StepOut{};
          refuse_graphs(e.what());
        }
      }
      if (graphs && g.graph) {
        copy_into(x, x_in);
        copy_into(t_row, t_in);
        if (step_tables) copy_into(step_mod(k), mod_in);
        g.graph->launch();
        so = g.out;
      } else {
        PoolScope scope(g.pool);
        so = forwards(k, x, t_row, step_mod(k));
        g.ran = true;
      }
    }
    const Tensor& v_cond = so.v_cond;
    Tensor v = so.v;
    if (k == 0 && keep_first_forward) {
      if (so.v_cond.defined()) out.first_v_cond = so.v_cond.to(Device::CPU);
      if (so.v_uncond.defined()) out.first_v_uncond = so.v_uncond.to(Device::CPU);
    }

    if (need_uncond && need_cond && o.guidance_rescale > 0) {
      // x_0 of the conditional and the guided prediction, std-matched per asset.
      const float a = static_cast<float>(1.0 - o.sigma_min);
      const float b = static_cast<float>(o.sigma_min + (1.0 - o.sigma_min) * t);
      Tensor x0_pos = Tensor::empty(x.shape(), DType::F32, dev);
      Tensor x0_cfg = Tensor::empty(x.shape(), DType::F32, dev);
      kernels::axpby_sub(x, a, v_cond, b, x0_pos);
      kernels::axpby_sub(x, a, v, b, x0_cfg);
      Tensor std_pos = Tensor::empty({B}, DType::F32, dev);
      Tensor std_cfg = Tensor::empty({B}, DType::F32, dev);
      kernels::asset_std(x0_pos, req.token_offsets, std_pos);
      kernels::asset_std(x0_cfg, req.token_offsets, std_cfg);
      Tensor x0 = Tensor::empty(x.shape(), DType::F32, dev);
      kernels::guidance_rescale(x0_cfg, std_pos, std_cfg, req.batch_index,
                                static_cast<float>(o.guidance_rescale),
                                static_cast<float>(1.0 - o.guidance_rescale), x0);
      // A new tensor: a graph's output must stay as the graph wrote it.
      Tensor rescaled = Tensor::empty(x.shape(), DType::F32, dev);
      kernels::xstart_to_pred(x, a, x0, b, rescaled);
      v = rescaled;
    }
    Tensor next = Tensor::empty(x.shape(), DType::F32, dev);
    kernels::euler_step(x, v, static_cast<float>(t - t_prev), next);
    x = next;

    StepRecord rec{k, o.steps, t, t_prev, need_uncond, 0.0};
    // A progress line needs the step finished; without one the loop runs unsynchronised.
    if (on_step && dev == Device::CUDA) synchronize();
    rec.elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    out.steps.push_back(rec);
    if (on_step) on_step(rec);
  }
  if (dev == Device::CUDA) synchronize();
  out.loop_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  out.latent = x.to(Device::CPU);
  // The graphs, then their outputs, then their pools (the device is idle: synchronised above).
  for (auto& [code, g] : kinds) {
    g.graph.reset();
    g.out = StepOut{};
    DeviceAllocator::instance().release_pool(g.pool);
  }
  return out;
}

}  // namespace s3d::sampler
