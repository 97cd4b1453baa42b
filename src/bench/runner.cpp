#include "bench/runner.h"

#include "bench/device_peak.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>

#include "bench/environment.h"
#include "bench/packing.h"
#include "bench/result_io.h"
#include "bench/run_state.h"
#include "core/cuda_util.h"
#include "core/error.h"
#include "core/fallback.h"
#include "io/safetensors.h"
#include "payload/payload.h"
#include "sparse3d/diagnostics.h"
#include "sparse3d/flags.h"

namespace s3d::bench {
namespace {

using sparse3d::ExecutionPlan;
using sparse3d::Flag;

std::vector<const payload::ManifestEntry*> select_assets(const payload::Manifest& m,
                                                         const std::vector<std::string>& sel) {
  std::vector<const payload::ManifestEntry*> out;
  auto add = [&](const payload::ManifestEntry* e) {
    if (std::find(out.begin(), out.end(), e) == out.end()) out.push_back(e);
  };
  for (const std::string& s : sel) {
    bool matched = false;
    for (const auto& e : m.assets) {
      if (s == "all" || s == e.set || s == e.name) {
        add(&e);
        matched = true;
      }
    }
    S3D_CHECK(matched, "bench: '", s, "' names no asset or set in the manifest");
  }
  return out;
}

}  // namespace

sparse3d::SampleRequest Run::request(size_t pi, size_t ai) const {
  const Prepared& a = assets[ai];
  sparse3d::SampleRequest q;
  q.coords = view_of(a.asset.coords);
  q.cond = view_of(a.cond);
  if (a.asset.concat_cond.defined()) q.concat_cond = view_of(a.asset.concat_cond);
  q.seed = a.asset.noise_seed;
  q.sampler = o.sampler;
  q.flags = plans[pi].flags();
  return q;
}

Cell& Run::cell(size_t pi, size_t ai) {
  Cell& c = cells[{pi, ai}];
  if (c.path.empty()) {
    c.path = r.paths[pi];
    c.asset = assets[ai].info.name;
  }
  return c;
}

sparse3d::EngineOptions engine_options(const Run& run, size_t pi) {
  sparse3d::EngineOptions eo;
  eo.device = run.o.device;
  eo.qualify_m = run.o.qualify_m;
  eo.max_device_memory_gib = run.o.max_device_memory_gib;
  eo.devices = run.plan_devices[pi];
  eo.log = run.log;
  return eo;
}

namespace {

// With --devices listing several GPUs: each requested path again, on an engine split over
// them ("PATH@0,1"), measured in the same run as the path on the first device alone.
void add_device_variants(Run& run) {
  if (run.o.devices.size() <= 1) return;
  std::string list;
  for (int d : run.o.devices) list += cat(list.empty() ? "" : ",", d);
  const size_t requested = run.plans.size();
  for (size_t pi = 0; pi < requested; ++pi) {
    run.plans.push_back(run.plans[pi]);
    run.ablation_variant.push_back(false);
    run.plan_devices.push_back(run.o.devices);
    run.r.paths.push_back(cat(run.r.paths[pi], "@", list));
  }
}

// Paths: the given specs (a spec given twice is measured twice, "NAME#2", an A/A check of
// the measurement itself), plus (with --ablate) the last one with each flag turned off.
void make_plans(Run& run) {
  BenchResult& r = run.r;
  auto add_plan = [&](const ExecutionPlan& p, bool duplicate_ok) {
    int seen = 0;
    for (size_t i = 0; i < run.plans.size(); ++i)
      if (run.plans[i].label() == p.label()) {
        if (!duplicate_ok) return r.paths[i];
        ++seen;
      }
    run.plans.push_back(p);
    run.ablation_variant.push_back(false);
    run.plan_devices.push_back(run.o.devices.empty() ? std::vector<int>{}
                                                     : std::vector<int>{run.o.devices[0]});
    r.paths.push_back(seen ? cat(p.label(), "#", seen + 1) : p.label());
    return r.paths.back();
  };
  for (const auto& spec : run.o.paths) add_plan(ExecutionPlan::parse(spec), true);
  add_device_variants(run);
  if (!run.o.ablate) return;
  const ExecutionPlan ref = run.plans.back();
  r.ablation.reference_path = r.paths.back();
  sparse3d::FlagSet chosen = ref.flags();
  if (!run.o.ablate_flags.empty()) {
    chosen = {};
    for (const auto& name : run.o.ablate_flags) {
      const Flag f = sparse3d::parse_flag(name);
      S3D_CHECK(ref.on(f), "bench --ablate-flags: ", name, " is not on in ", ref.label(),
                "; nothing to leave out");
      chosen.set(f);
    }
  }
  for (const Flag flag : chosen.flags()) {
    ExecutionPlan off = ref;
    off.disable(flag);
    r.ablation.flags.push_back(flag);
    const size_t before = run.plans.size();
    r.ablation.variant_path[flag] = add_plan(off, false);
    if (run.plans.size() > before) run.ablation_variant.back() = true;
    r.ablation.calls_per_iteration[flag] = sparse3d::info(flag).calls_per_step;
  }
  S3D_CHECK(!r.ablation.flags.empty(), "bench --ablate: path ", ref.label(),
            " has no optimization flag on; nothing to leave out");
}

// The repeated protocol alone: one engine for every path, its start-up lines in the bench's
// log, no qualification cache (each run qualifies the null context anew, from nothing stale).
// Its default flags are those of the first null-context path, if any, which --qualify-tokens
// qualifies ahead through warm_up().
void load_shared_engine(Run& run) {
  run.engine_of.assign(run.plans.size(), 0);
  std::map<std::vector<int>, size_t> slot_of;  // one engine per devices list
  for (size_t pi = 0; pi < run.plans.size(); ++pi) {
    const auto [it, added] = slot_of.emplace(run.plan_devices[pi], run.slots.size());
    run.engine_of[pi] = it->second;
    if (!added) continue;
    sparse3d::EngineOptions eo = engine_options(run, pi);
    eo.persist_qualification = false;
    for (const auto& p : run.plans)
      if (eo.path.empty() && (p.on(Flag::null_context_exact) || p.on(Flag::null_context_cache)))
        eo.path = p.label();
    run.log(cat("loading ", run.o.checkpoint,
                eo.devices.size() > 1 ? cat(" on devices ", run.r.paths[pi].substr(
                                                               run.r.paths[pi].find('@') + 1))
                                      : std::string()));
    run.slots.push_back(std::make_unique<EngineSlot>());
    run.slots.back()->engine.emplace(run.o.checkpoint, eo);
  }
}

void load_assets(Run& run) {
  run.manifest = payload::read_manifest(run.o.manifest);
  for (const auto* e : select_assets(run.manifest, run.o.assets)) {
    Prepared p;
    p.asset = payload::read_asset(run.manifest, *e);
    p.info = AssetInfo{e->name, p.asset.coords.size(0), e->set};
    p.cond = p.asset.cond.reshape({1, p.asset.cond.size(0), p.asset.cond.size(1)});
    run.r.assets.push_back(p.info);
    run.assets.push_back(std::move(p));
  }
  run.ablated_asset.assign(run.assets.size(), true);
  if (run.o.ablate_assets.empty()) return;
  const auto chosen = select_assets(run.manifest, run.o.ablate_assets);
  for (size_t ai = 0; ai < run.assets.size(); ++ai) {
    run.ablated_asset[ai] = false;
    for (const auto* e : chosen)
      run.ablated_asset[ai] = run.ablated_asset[ai] || e->name == run.assets[ai].info.name;
  }
}

// The instrumented loop's length and the options' checks: before any engine loads.
void check_options(Run& run) {
  const BenchOptions& o = run.o;
  const std::vector<double> schedule = sparse3d::timesteps(o.sampler);
  bool cfg_every_step = o.sampler.guidance != 1.0;
  for (int k = 0; k < o.sampler.steps; ++k)
    cfg_every_step &= o.sampler.interval_lo <= schedule[k] && schedule[k] <= o.sampler.interval_hi;
  S3D_CHECK(o.instrument_steps >= 0, "bench: --instrument-steps must be >= 0");
  run.instrument_steps = o.instrument_steps > 0 && o.instrument_steps < o.sampler.steps
                             ? o.instrument_steps
                             : o.sampler.steps;
  S3D_CHECK(run.instrument_steps == o.sampler.steps || cfg_every_step,
            "bench: --instrument-steps ", o.instrument_steps,
            " needs CFG on every step (the steps differ in work otherwise); use 0");
  run.instrument_scale = double(o.sampler.steps) / run.instrument_steps;
  for (const auto& p : o.also_compare)
    S3D_CHECK(std::find(run.r.paths.begin(), run.r.paths.end(), p) != run.r.paths.end(),
              "bench --also-compare ", p, ": not one of the measured paths");
  S3D_CHECK(!o.queue || o.devices.size() > 1, "bench --queue: needs --devices with two or "
            "more GPUs (it compares one-GPU engines with one engine split over them)");
  if (o.queue) {  // its one-GPU engines need every listed device (a split engine does not)
    const int count = cuda_device_count();
    for (int d : o.devices)
      S3D_CHECK(d < count, "bench --queue: device ", d, " is not on this machine (", count,
                " CUDA device", count == 1 ? "" : "s",
                "); the queue runs a one-GPU engine on "
                "every listed device");
  }
  if (o.protocol != Protocol::Repeated || o.queue) {
    std::vector<int64_t> tokens;
    for (const auto& a : run.assets) tokens.push_back(a.info.tokens);
    const int64_t grid = run.manifest.grid;
    run.warmup_tokens = service_warmup_tokens(tokens, o.warmup_tokens, grid * grid * grid);
  }
}

// Where the weights came from, from the metadata of the checkpoint's NAME.safetensors:
// {"generator": "sparse3d make-checkpoint", "seed": "1"} for synthetic weights (the figure
// says "synthetic weights"), {} when the file records no generator, null when it cannot be read.
io::Json weights_record(const std::string& checkpoint) {
  try {
    const auto st = std::filesystem::path(checkpoint).replace_extension(".safetensors");
    const io::SafetensorsFile f = io::SafetensorsFile::open(st.string());
    io::Json w = io::Json::object();
    for (const char* key : {"generator", "seed"})
      if (const auto it = f.metadata().find(key); it != f.metadata().end()) w[key] = it->second;
    return w;
  } catch (const s3d::Error&) {
    return nullptr;
  }
}

// The settings the result records.
void make_settings(Run& run, const sparse3d::ModelInfo& model, bool cpu) {
  const BenchOptions& o = run.o;
  run.r.settings = io::Json{{"checkpoint", o.checkpoint},
                            {"manifest", o.manifest},
                            {"steps", o.sampler.steps},
                            {"rescale_t", o.sampler.rescale_t},
                            {"guidance", o.sampler.guidance},
                            {"guidance_interval", {o.sampler.interval_lo, o.sampler.interval_hi}},
                            {"guidance_rescale", o.sampler.guidance_rescale},
                            {"warmup", o.warmup},
                            {"repeats", o.repeats},
                            {"instrumented_steps", run.instrument_steps},
                            {"model_parameters", model.parameters},
                            {"cond_tokens", run.manifest.cond_tokens},
                            {"protocol", protocol_name(o.protocol)},
                            {"device", cpu ? "cpu" : "cuda"},
                            {"model",
                             {{"family", model.family},
                              {"content_hash", model.content_hash},
                              {"resolution", model.resolution},
                              {"num_blocks", model.num_blocks},
                              {"model_channels", model.model_channels},
                              {"num_heads", model.num_heads},
                              {"parameters", model.parameters}}}};
  run.r.settings["weights"] = weights_record(o.checkpoint);
  if (o.protocol != Protocol::Repeated) {
    run.r.settings["service_warmup"] = run.warmup_what;
    run.r.settings["service_warmup_tokens"] = run.warmup_tokens;
  }
  if (!o.also_compare.empty()) run.r.settings["also_compare"] = o.also_compare;
}

void measure_peaks(Run& run, sparse3d::Engine& engine) {
  int64_t max_tokens = 0;
  for (const auto& a : run.assets) max_tokens = std::max(max_tokens, a.info.tokens);
  const sparse3d::LibraryPeaks p = sparse3d::measure_library_peaks(engine, max_tokens);
  run.r.peaks = Peaks{p.attention_tflops, p.gemm_tflops, p.attention_shape, p.gemm_shape};
  run.log(cat("peaks: cuBLASLt ", p.gemm_tflops, " TFLOP/s (", p.gemm_shape, "), cuDNN SDPA ",
              p.attention_tflops, " TFLOP/s (", p.attention_shape, ")"));
}

// Warm-up: a one-step loop per (path, asset) and round primes every cache a loop uses
// (cuDNN graphs per bucket, cuBLASLt algorithms per shape, the allocator's blocks) and makes
// the engine qualify the null context at each asset's token count, before any timing; the
// instrumented loop below is a full warm loop as well. A cell whose first request ran (the
// service protocol) is warm already.
void warm_up(Run& run) {
  const BenchOptions& o = run.o;
  for (int w = 0; w < o.warmup; ++w)
    for (size_t ai = 0; ai < run.assets.size(); ++ai)
      for (size_t pi = 0; pi < run.plans.size(); ++pi) {
        if (!run.runs(pi, ai)) continue;
        const auto seen = run.cells.find({pi, ai});
        if (seen != run.cells.end() && seen->second.first_request_seconds) continue;
        sparse3d::SampleRequest q = run.request(pi, ai);
        q.sampler.steps = 1;
        const sparse3d::RequestStats st = run.engine(pi).sample(q).stats;
        run.loop_estimate[{pi, ai}] = st.setup_seconds + st.loop_seconds * o.sampler.steps;
      }
  double estimate = 0;
  for (const auto& [k, s] : run.loop_estimate)
    estimate += s * (o.repeats + 1.0 / run.instrument_scale);
  if (!run.loop_estimate.empty())
    run.log(cat("estimated measurement time: ", std::lround(estimate), " s for ",
                run.plans.size(), " paths x ", run.assets.size(), " assets x (", o.repeats,
                " repeats + 1 instrumented loop)",
                o.torch_script.empty() ? "" : ", plus the PyTorch baseline"));
}

// One instrumented loop of a cell: launches, peak memory, attention/GEMM time and FLOPs.
void instrument_cell(Run& run, size_t pi, size_t ai) {
  sparse3d::Engine& engine = run.engine(pi);
  Cell& c = run.cell(pi, ai);
  sparse3d::SampleRequest q = run.request(pi, ai);
  q.sampler.steps = run.instrument_steps;
  q.profile = sparse3d::Profile::Library;
  // Profiler events cannot be read inside a CUDA graph: the profiled loop runs the same
  // kernels eagerly; a graph path's launches come from one more, unprofiled, whole loop.
  const bool graphs = q.flags->on(Flag::cuda_graphs);
  q.flags->set(Flag::cuda_graphs, false);
  const int device = run.plan_devices[pi].empty() ? 0 : run.plan_devices[pi][0];
  // Device-wide memory of one request from nothing cached: the weights plus what the request
  // made the device hold (the whole loop's when it runs as graphs, below).
  auto device_peak = [&](const sparse3d::SampleRequest& req) {
    engine.release_cache();
    DevicePeak poll(device);
    const sparse3d::RequestStats s = engine.sample(req).stats;
    return std::make_pair(s, poll.stop() + engine.residency().weight_bytes);
  };
  const auto [st, eager_device_peak] = device_peak(q);
  c.device_peak_bytes = eager_device_peak;
  run.log(cat("[instrumented] ", c.asset, " ", c.path, ": ", st.loop_seconds, " s, ",
              st.launches, " launches"));
  // Per whole loop: counts and times of a shorter instrumented loop scaled up (every step
  // does the same work then; checked in make_settings). Attention and GEMM times include the
  // request's set-up (the condition K/V projection, < 0.5% of a loop's GEMM FLOPs) and are
  // scaled whole.
  auto per_loop = [&](double v) { return v * run.instrument_scale; };
  // Launches: the request's set-up once, the loop's scaled.
  auto per_loop_n = [&](uint64_t setup, uint64_t all) {
    return setup + static_cast<uint64_t>(std::llround((all - setup) * run.instrument_scale));
  };
  c.launches = per_loop_n(st.launches_before_loop, st.launches);
  for (const auto& [op, n] : st.launches_by_op) {
    const auto it = st.launches_before_loop_by_op.find(op);
    c.launches_by_op[op] =
        per_loop_n(it == st.launches_before_loop_by_op.end() ? 0 : it->second, n);
  }
  c.peak_bytes = st.peak_device_bytes;
  c.peak_reserved_bytes = st.peak_device_reserved_bytes;
  c.devices = st.devices;
  if (graphs) {
    const auto [whole, graph_device_peak] = device_peak(run.request(pi, ai));
    c.device_peak_bytes = graph_device_peak;
    c.graphs_captured = whole.graphs_captured;
    c.graph_capture_seconds = whole.graph_capture_seconds;
    c.graph_nodes = whole.graph_nodes;
    c.launches = whole.launches;
    c.launches_by_op = whole.launches_by_op;
    c.peak_bytes = whole.peak_device_bytes;
    c.peak_reserved_bytes = whole.peak_device_reserved_bytes;
  }
  auto profiled = [&](const char* category) {
    const auto it = st.profile.find(category);
    return it == st.profile.end() ? sparse3d::OpTime{} : it->second;
  };
  c.attention_seconds = per_loop(profiled("attention").seconds);
  c.attention_flops = per_loop(profiled("attention").flops);
  c.gemm_seconds = per_loop(profiled("gemm").seconds);
  c.gemm_flops = per_loop(profiled("gemm").flops);
}

// Timed repeats, interleaved: the asset order and the path order rotate every repeat.
void timed_repeats(Run& run) {
  const BenchOptions& o = run.o;
  auto started = std::chrono::steady_clock::now();
  for (int rep = 0; rep < o.repeats; ++rep)
    for (size_t i = 0; i < run.assets.size(); ++i) {
      const size_t ai = (i + rep) % run.assets.size();
      for (size_t j = 0; j < run.plans.size(); ++j) {
        const size_t pi = (j + rep + i) % run.plans.size();
        if (!run.runs(pi, ai)) continue;
        const TimedRequest t = timed_request(run.engine(pi), run.request(pi, ai));
        const sparse3d::RequestStats& st = t.stats;
        Cell& c = run.cell(pi, ai);
        c.loop_seconds.push_back(st.request_seconds());
        c.setup_seconds.push_back(st.setup_seconds);
        c.request_wall_seconds.push_back(t.wall_seconds);
        RequestCounters& k = c.repeat_counters ? *c.repeat_counters : c.repeat_counters.emplace();
        k.qualifications_run += t.counters.qualifications_run;
        k.qualification_cache_hits += t.counters.qualification_cache_hits;
        k.fallbacks += t.counters.fallbacks;
        double spent =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
        run.log(cat("[repeat ", rep + 1, "/", o.repeats, "] ", run.assets[ai].info.name, " (",
                    run.assets[ai].info.tokens, " tokens) ", run.r.paths[pi], ": ",
                    st.request_seconds(), " s (set-up ", st.setup_seconds, " s)   [",
                    std::lround(spent), " s elapsed]"));
      }
    }
}

// Multi-asset batching: K copies of one asset in one request, per path; warm-up one step,
// then the repeats with the path order rotating.
void throughput_row(Run& run, int k, size_t ai) {
  const BenchOptions& o = run.o;
  const Prepared& a = run.assets[ai];
  const PackedCopies packed = pack_copies(a.asset, k, run.engine(0).model().out_channels);
  auto request = [&](size_t pi) {
    sparse3d::SampleRequest q;
    q.coords = view_of(packed.coords);
    q.batch = packed.batch;
    q.cond = view_of(packed.cond);
    q.noise = view_of(packed.noise);
    if (packed.concat_cond.defined()) q.concat_cond = view_of(packed.concat_cond);
    q.sampler = o.sampler;
    q.flags = run.plans[pi].flags();
    return q;
  };
  std::vector<ThroughputCell> row(run.plans.size());
  for (size_t pi = 0; pi < run.plans.size(); ++pi) {
    if (run.ablation_variant[pi]) continue;
    row[pi] = ThroughputCell{run.r.paths[pi], a.info.name, k, {}, 0};
    sparse3d::SampleRequest q = request(pi);
    q.sampler.steps = 1;
    run.engine(pi).sample(q);
  }
  for (int rep = 0; rep < o.repeats; ++rep)
    for (size_t j = 0; j < run.plans.size(); ++j) {
      const size_t pi = (j + rep) % run.plans.size();
      if (run.ablation_variant[pi]) continue;
      const sparse3d::RequestStats st = run.engine(pi).sample(request(pi)).stats;
      row[pi].loop_seconds.push_back(st.request_seconds());
      row[pi].peak_bytes = std::max(row[pi].peak_bytes, st.peak_device_bytes);
      run.log(cat("[batch ", k, ", repeat ", rep + 1, "/", o.repeats, "] ", a.info.name, " x ",
                  k, " (", packed.coords.size(0), " tokens) ", run.r.paths[pi], ": ",
                  st.request_seconds(), " s, ", k * 3600.0 / st.request_seconds(),
                  " assets/hour"));
    }
  for (auto& t : row)
    if (!t.loop_seconds.empty()) run.r.throughput.push_back(std::move(t));
}

// The engine's null-context state as readable lines: per condition length, whether it
// applies (and its facts), then each qualified token count.
std::string format_qualification(const std::vector<sparse3d::QualificationState>& states) {
  std::string s;
  for (const auto& q : states) {
    s += cat("null context L=", q.context_tokens, ": ",
             q.applicable ? std::string("applicable") : "refused: " + q.reason, "\n");
    for (const auto& f : q.facts) s += "  " + f + "\n";
    for (const auto& n : q.shapes)
      s += cat("  N=", n.tokens, n.batched ? " (batched CFG slices checked)" : "", ": ",
               n.summary, " (", n.source, ")\n");
  }
  return s;
}

// Fallbacks of several engines as one list: counts of the same (flag, reason) added.
void merge_fallbacks(std::vector<sparse3d::FallbackCount>& into,
                     const std::vector<sparse3d::FallbackCount>& add) {
  for (const auto& f : add) {
    auto it = std::find_if(into.begin(), into.end(), [&](const sparse3d::FallbackCount& g) {
      return g.optimization == f.optimization && g.reason == f.reason;
    });
    if (it == into.end())
      into.push_back(f);
    else
      it->count += f.count;
  }
}

// The repeated protocol on the engines the run has: peaks, warm-up, the instrumented loops,
// the timed repeats.
void repeated_protocol(Run& run) {
  const BenchOptions& o = run.o;
  sparse3d::Engine& first = *run.slots.front()->engine;
  if (o.measure_peaks && first.device() == Device::CUDA) measure_peaks(run, first);
  if (!o.qualify_tokens.empty())
    for (auto& slot : run.slots) slot->engine->warm_up(o.qualify_tokens, run.manifest.cond_tokens);
  // Fallbacks from here on; the service protocol's engines count from their first requests.
  if (o.protocol == Protocol::Repeated) first.reset_counters();
  warm_up(run);
  // The instrumented loop times library calls with CUDA events: a GPU measurement only.
  for (size_t ai = 0; ai < run.assets.size(); ++ai)
    for (size_t pi = 0; pi < run.plans.size(); ++pi)
      if (run.runs(pi, ai) && run.engine(pi).device() == Device::CUDA) instrument_cell(run, pi, ai);
  timed_repeats(run);
}

// What the engines report at the end: fallbacks, null-context state, searched plans; each
// engine's state under its path's name when there is more than one.
void engine_reports(Run& run) {
  std::vector<std::string> slot_path(run.slots.size());
  for (size_t pi = 0; pi < run.plans.size(); ++pi)
    if (slot_path[run.engine_of[pi]].empty()) slot_path[run.engine_of[pi]] = run.r.paths[pi];
  run.r.fallbacks.clear();
  run.r.null_context.clear();
  run.r.searched_plans.clear();
  for (size_t i = 0; i < run.slots.size(); ++i) {
    sparse3d::Engine& e = *run.slots[i]->engine;
    merge_fallbacks(run.r.fallbacks, e.counters().fallbacks);
    const std::string q = format_qualification(e.qualification());
    if (!q.empty())
      run.r.null_context += run.slots.size() > 1 ? cat("engine of ", slot_path[i], ":\n", q) : q;
    for (auto& p : sparse3d::searched_plans(e)) run.r.searched_plans.push_back(std::move(p));
  }
  run.log(cat("fallbacks:\n", format_fallbacks(run.r.fallbacks)));
  if (!run.r.null_context.empty()) run.log(run.r.null_context);
  if (!run.r.searched_plans.empty())
    run.log(cat("searched plans: ", run.r.searched_plans.size(),
                " shapes (report: Searched plans)"));
}

// The engine's part of a run: the service protocol's first requests, every cell timed and
// instrumented, the throughput rows; the engines (and their cache folders) are gone after it,
// before the baseline runs.
void measure_engine(Run& run) {
  const BenchOptions& o = run.o;
  load_assets(run);
  check_options(run);
  if (o.protocol == Protocol::Repeated)
    load_shared_engine(run);
  else
    first_requests(run);
  const sparse3d::Engine& first = *run.slots.front()->engine;
  run.r.fingerprint = fingerprint_json(first);
  make_settings(run, first.model(), first.device() != Device::CUDA);
  if (o.protocol != Protocol::Service) repeated_protocol(run);
  for (auto& [key, c] : run.cells) run.r.cells.push_back(std::move(c));
  for (int k : o.batch_sizes)
    if (k > 1)
      for (size_t ai = 0; ai < run.assets.size(); ++ai) throughput_row(run, k, ai);
  engine_reports(run);
  run.slots.clear();
  if (o.queue) serve_queue(run);
}

}  // namespace

BenchResult run_bench(const BenchOptions& o, const Log& log) {
  S3D_CHECK(o.repeats >= 1 && o.warmup >= 0, "bench: repeats must be >= 1 and warm-up >= 0");
  S3D_CHECK(!o.paths.empty(), "bench: no execution path given");
  S3D_CHECK(!o.ablate || o.protocol != Protocol::Service,
            "bench --ablate: the leave-one-out variants are timed by the repeated protocol; "
            "use --protocol both or repeated");
  for (int k : o.batch_sizes)
    S3D_CHECK(k >= 1 && k <= 64, "bench --batch: K must be in [1, 64], got ", k);
  BenchResult r;
  r.date = utc_now();
  Run run(o, log, r);
  make_plans(run);
  measure_engine(run);
  if (o.on_engine_done) o.on_engine_done(r);
  if (!o.torch_script.empty()) {
    run_torch_baseline(o, run.assets, run.warmup_tokens, false, r, log);
    if (o.torch_compile) run_torch_baseline(o, run.assets, run.warmup_tokens, true, r, log);
  }
  return r;
}

}  // namespace s3d::bench
