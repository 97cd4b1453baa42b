#include "bench/runner.h"

#include <cuda_runtime.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <map>
#include <memory>

#include "attention/attention.h"
#include "bench/result_io.h"
#include "bench/measure.h"
#include "contract/fallback.h"
#include "contract/fingerprint.h"
#include "core/allocator.h"
#include "core/cuda_util.h"
#include "core/error.h"
#include "core/profiler.h"
#include "core/rng.h"
#include "gemm/linear.h"
#include "model/checkpoint.h"
#include "model/null_context.h"
#include "model/slat_flow.h"
#include "payload/payload.h"
#include "sparse3d/flags.h"

namespace s3d::bench {
namespace {

std::string utc_now() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

// The libraries' rates at the model's shapes, measured in this run: cuBLASLt bf16 at the
// two MLP GEMMs and cuDNN SDPA self-attention at the model's head shape; the best of each.
Peaks measure_peaks(const model::ModelConfig& c, int64_t tokens, const Log& log) {
  Peaks p;
  const int64_t C = c.model_channels, hidden = c.mlp_hidden();
  const int64_t M = std::max<int64_t>(tokens, 4096);
  for (auto [K, N] : {std::pair<int64_t, int64_t>{C, hidden}, {hidden, C}}) {
    Tensor x = random_device({M, K}, DType::BF16, 1), w = random_device({N, K}, DType::BF16, 2);
    Tensor b = random_device({N}, DType::BF16, 3);
    Tensor y = Tensor::empty({M, N}, DType::BF16, Device::CUDA);
    double s = time_calls([&](int) { gemm::linear(x, w, &b, y); }, 3, 20);
    double tflops = 2.0 * M * N * K / s / 1e12;
    if (tflops > p.gemm_tflops) {
      p.gemm_tflops = tflops;
      p.gemm_shape = cat("bf16 M=", M, " K=", K, " N=", N, " +bias");
    }
  }
  const int H = c.num_heads, D = c.head_dim();
  const int64_t T = M;
  Tensor qkv = random_device({T, 3 * H * D}, DType::BF16, 4);
  Tensor out = Tensor::empty({T, int64_t(H) * D}, DType::BF16, Device::CUDA);
  attention::SeqLayout layout = attention::make_seq_layout({static_cast<int32_t>(T)}, Device::CUDA);
  const int64_t HD = int64_t(H) * D;
  double s = time_calls([&](int) {
    attention::sdpa_varlen(RowView{qkv, 0, T, HD, 3 * HD}, layout, RowView{qkv, HD, T, HD, 3 * HD},
                           RowView{qkv, 2 * HD, T, HD, 3 * HD}, layout, H, D,
                           static_cast<float>(1.0 / std::sqrt(double(D))), out);
  }, 3, 10);
  p.attention_tflops = 4.0 * double(T) * T * H * D / s / 1e12;
  p.attention_shape = cat("bf16 self-attention T=", T, " H=", H, " D=", D);
  log(cat("peaks: cuBLASLt ", p.gemm_tflops, " TFLOP/s (", p.gemm_shape, "), cuDNN SDPA ",
          p.attention_tflops, " TFLOP/s (", p.attention_shape, ")"));
  return p;
}

struct Prepared {
  AssetInfo info;
  sampler::Inputs inputs;
  uint64_t noise_seed = 0;
};

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

int run_process(const std::string& cmd) {
  int status = std::system(cmd.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// The PyTorch implementation under tools/, eager or compiled, timed by its own loop with
// the same rules (warm-up, CUDA-synchronised whole-loop wall time, repeats).
void run_torch_baseline(const BenchOptions& o, const std::vector<Prepared>& assets, bool compile,
                        BenchResult& r, const Log& log) {
  const std::string name = compile ? "torch_compile" : "torch_eager";
  const std::string json = (std::filesystem::path(o.work_dir) / ("sparse3d_" + name + ".json")).string();
  std::filesystem::remove(json);
  std::string cmd = o.python + " " + shell_quote(o.torch_script) + " --checkpoint " +
                    shell_quote(o.checkpoint) + " --manifest " + shell_quote(o.manifest);
  for (const auto& a : assets) cmd += " --asset " + shell_quote(a.info.name);
  const auto& s = o.sampler;
  cmd += cat(" --steps ", s.steps, " --rescale-t ", s.rescale_t, " --cfg ", s.guidance,
             " --interval ", s.interval_lo, " ", s.interval_hi, " --guidance-rescale ",
             s.guidance_rescale, " --cfg-mode serial --device cuda --time --quiet --warmup ",
             std::max(1, o.warmup), " --repeat ", o.repeats, " --timing-json ", shell_quote(json));
  if (compile) cmd += " --compile blocks";
  const std::string logfile = json + ".log";
  log(cat("baseline ", name, ": ", cmd));
  int code = run_process(cmd + " > " + shell_quote(logfile) + " 2>&1");
  // Exit code 3 is run.py's "torch.compile failed", with the reason in the timing file.
  std::string failure;
  if (!std::filesystem::exists(json)) {
    failure = cat("exit code ", code, ", no timing file (log: ", logfile, ")");
  } else if (code != 0 && code != 3) {
    failure = cat("exit code ", code, " (log: ", logfile, ")");
  } else {
    try {
      add_baseline_timing(r, io::read_json_file(json), name, json);
    } catch (const Error& e) {
      failure = e.what();
    }
  }
  if (!failure.empty()) r.baselines.push_back(BaselineStatus{name, false, failure});
  if (!r.baselines.back().ran)
    log(cat("baseline ", name, " did not run: ", r.baselines.back().reason));
}

}  // namespace

BenchResult run_bench(const BenchOptions& o, const Log& log) {
  S3D_CHECK(cuda_available(), "sparse3d bench needs a CUDA GPU (none found)");
  S3D_CHECK(o.repeats >= 1 && o.warmup >= 0, "bench: repeats must be >= 1 and warm-up >= 0");
  S3D_CHECK(!o.paths.empty(), "bench: no execution path given");
  for (int k : o.batch_sizes)
    S3D_CHECK(k >= 1 && k <= 64, "bench --batch: K must be in [1, 64], got ", k);
  cudaStream_t stream;
  S3D_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  set_current_stream(stream);

  BenchResult r;
  r.date = utc_now();
  r.fingerprint = contract::environment_fingerprint().to_json();

  // Paths: the given specs (a spec given twice is measured twice, "NAME#2", an A/A check of
  // the measurement itself), plus (with --ablate) the last one with each flag turned off.
  std::vector<sparse3d::ExecutionPlan> plans;
  std::vector<bool> ablation_variant;  // per plan: a leave-one-out variant
  auto add_plan = [&](const sparse3d::ExecutionPlan& p, bool duplicate_ok) {
    int seen = 0;
    for (size_t i = 0; i < plans.size(); ++i)
      if (plans[i].label() == p.label()) {
        if (!duplicate_ok) return r.paths[i];
        ++seen;
      }
    plans.push_back(p);
    ablation_variant.push_back(false);
    r.paths.push_back(seen ? cat(p.label(), "#", seen + 1) : p.label());
    return r.paths.back();
  };
  for (const auto& spec : o.paths) add_plan(sparse3d::ExecutionPlan::parse(spec), true);
  for (const auto& p : plans)
    if (!p.unvalidated().empty())
      log(cat("warning: path ", p.label(), " uses flags not yet validated on a GPU: ",
              p.unvalidated().size(), " of them (", sparse3d::name(p.unvalidated().front()),
              ", ...)"));
  if (o.ablate) {
    const sparse3d::ExecutionPlan ref = plans.back();
    r.ablation.reference_path = r.paths.back();
    for (const sparse3d::Flag flag : ref.flags().flags()) {
      sparse3d::ExecutionPlan off = ref;
      off.disable(flag);
      r.ablation.flags.push_back(flag);
      const size_t before = plans.size();
      r.ablation.variant_path[flag] = add_plan(off, false);
      if (plans.size() > before) ablation_variant.back() = true;
      r.ablation.calls_per_iteration[flag] = sparse3d::info(flag).calls_per_step;
    }
    S3D_CHECK(!r.ablation.flags.empty(), "bench --ablate: path ", ref.label(),
              " has no optimization flag on; nothing to leave out");
  }

  log(cat("loading ", o.checkpoint));
  model::SLatFlowModel m(model::load_checkpoint(o.checkpoint, Device::CUDA));
  payload::Manifest manifest = payload::read_manifest(o.manifest);
  std::vector<Prepared> assets;
  for (const auto* e : select_assets(manifest, o.assets)) {
    payload::Asset a = payload::read_asset(manifest, *e);
    Prepared p;
    p.info = AssetInfo{e->name, a.coords.size(0), e->set};
    p.inputs.coords = a.coords;
    p.inputs.batch = 1;
    p.inputs.cond = a.cond.reshape({1, a.cond.size(0), a.cond.size(1)});
    p.inputs.noise = Tensor::empty({a.coords.size(0), m.config().out_channels}, DType::F32, Device::CPU);
    p.noise_seed = a.noise_seed;
    normal_fill(a.noise_seed, 0, static_cast<uint64_t>(p.inputs.noise.numel()),
                p.inputs.noise.data_as<float>());
    p.inputs.concat_cond = a.concat_cond;
    r.assets.push_back(p.info);
    assets.push_back(std::move(p));
  }
  // Which (path, asset) cells run: the leave-one-out variants only on --ablate-assets.
  std::vector<bool> ablated_asset(assets.size(), true);
  if (!o.ablate_assets.empty()) {
    const auto chosen = select_assets(manifest, o.ablate_assets);
    for (size_t ai = 0; ai < assets.size(); ++ai) {
      ablated_asset[ai] = false;
      for (const auto* e : chosen) ablated_asset[ai] = ablated_asset[ai] || e->name == assets[ai].info.name;
    }
  }
  auto runs = [&](size_t pi, size_t ai) { return !ablation_variant[pi] || ablated_asset[ai]; };
  const std::vector<double> schedule = sampler::timesteps(o.sampler.steps, o.sampler.rescale_t);
  bool cfg_every_step = o.sampler.guidance != 1.0;
  for (int k = 0; k < o.sampler.steps; ++k)
    cfg_every_step &= o.sampler.interval_lo <= schedule[k] && schedule[k] <= o.sampler.interval_hi;
  S3D_CHECK(o.instrument_steps >= 0, "bench: --instrument-steps must be >= 0");
  const int instrument_steps =
      o.instrument_steps > 0 && o.instrument_steps < o.sampler.steps ? o.instrument_steps : o.sampler.steps;
  S3D_CHECK(instrument_steps == o.sampler.steps || cfg_every_step,
            "bench: --instrument-steps ", o.instrument_steps,
            " needs CFG on every step (the steps differ in work otherwise); use 0");
  const double instrument_scale = double(o.sampler.steps) / instrument_steps;
  r.settings = io::Json{{"checkpoint", o.checkpoint},
                        {"manifest", o.manifest},
                        {"steps", o.sampler.steps},
                        {"rescale_t", o.sampler.rescale_t},
                        {"guidance", o.sampler.guidance},
                        {"guidance_interval", {o.sampler.interval_lo, o.sampler.interval_hi}},
                        {"guidance_rescale", o.sampler.guidance_rescale},
                        {"warmup", o.warmup},
                        {"repeats", o.repeats},
                        {"instrumented_steps", instrument_steps},
                        {"model_parameters", m.weight_bytes()},
                        {"cond_tokens", manifest.cond_tokens}};
  if (!o.also_compare.empty()) {
    for (const auto& p : o.also_compare)
      S3D_CHECK(std::find(r.paths.begin(), r.paths.end(), p) != r.paths.end(), "bench --also-compare ",
                p, ": not one of the measured paths");
    r.settings["also_compare"] = o.also_compare;
  }

  int64_t max_tokens = 0;
  for (const auto& a : assets) max_tokens = std::max(max_tokens, a.info.tokens);
  if (o.measure_peaks) r.peaks = measure_peaks(m.config(), max_tokens, log);

  // Null-context elimination: probed and qualified once, before any timing, at the
  // assets' token counts (both CFG modes), if any path asks for it.
  bool want_null = false, want_cache = false, want_batched = false;
  for (const auto& p : plans) {
    using sparse3d::Flag;
    const bool null = p.on(Flag::null_context_exact) || p.on(Flag::null_context_cache);
    want_null |= null;
    want_cache |= p.on(Flag::null_context_cache);
    want_batched |= null && p.on(Flag::batched_cfg);
  }
  std::unique_ptr<model::NullContext> null_context;
  if (want_null) {
    model::NullContextOptions nco;
    nco.context_tokens = manifest.cond_tokens;
    nco.qualify_cache = want_cache;
    nco.qualify_slices = want_batched;
    nco.qualification.context_rows = {manifest.cond_tokens};
    nco.qualification.token_counts.clear();
    for (const auto& a : assets) {
      nco.qualification.token_counts.push_back(a.info.tokens);
      for (int k : o.batch_sizes)
        if (k > 1) nco.qualification.token_counts.push_back(k * a.info.tokens);
    }
    if (!o.qualify_tokens.empty()) nco.qualification.token_counts = o.qualify_tokens;
    if (!o.qualify_m.empty()) nco.qualification.candidate_m = o.qualify_m;
    auto t0 = std::chrono::steady_clock::now();
    null_context = std::make_unique<model::NullContext>(model::NullContext::build(m, nco));
    r.null_context = null_context->report();
    log(cat(r.null_context, "(null-context start-up ",
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), " s)"));
  }
  contract::reset_fallbacks();

  auto options_for = [&](const sparse3d::ExecutionPlan& p) {
    sampler::SamplerOptions s = o.sampler;
    s.apply(p);
    s.null_context = null_context.get();
    return s;
  };
  std::map<std::pair<size_t, size_t>, Cell> cells;  // (path, asset)

  // Warm-up: a one-step loop per (path, asset) and round primes every cache a loop uses
  // (cuDNN graphs per bucket, cuBLASLt algorithms per shape, the allocator's blocks); the
  // instrumented loop below is a full warm loop as well.
  std::map<std::pair<size_t, size_t>, double> warm_seconds;
  for (int w = 0; w < o.warmup; ++w)
    for (size_t ai = 0; ai < assets.size(); ++ai)
      for (size_t pi = 0; pi < plans.size(); ++pi) {
        if (!runs(pi, ai)) continue;
        sampler::SamplerOptions s = options_for(plans[pi]);
        s.steps = 1;
        auto out = sampler::sample(m, assets[ai].inputs, s);
        warm_seconds[{pi, ai}] = out.setup_seconds + out.loop_seconds * o.sampler.steps;
      }
  double estimate = 0;
  for (const auto& [k, s] : warm_seconds) estimate += s * (o.repeats + 1.0 / instrument_scale);
  if (!warm_seconds.empty())
    log(cat("estimated measurement time: ", std::lround(estimate), " s for ", plans.size(),
            " paths x ", assets.size(), " assets x (", o.repeats,
            " repeats + 1 instrumented loop)",
            o.torch_script.empty() ? "" : ", plus the PyTorch baseline"));

  // One instrumented loop per cell: launches, peak memory, attention/GEMM time and FLOPs.
  for (size_t ai = 0; ai < assets.size(); ++ai)
    for (size_t pi = 0; pi < plans.size(); ++pi) {
      if (!runs(pi, ai)) continue;
      Cell& c = cells[{pi, ai}];
      c.path = r.paths[pi];
      c.asset = assets[ai].info.name;
      synchronize();
      DeviceAllocator::current().reset_peak();
      reset_launch_counts();
      profiler::start(profiler::Mode::Library);
      sampler::SamplerOptions s = options_for(plans[pi]);
      s.steps = instrument_steps;
      // Profiler events cannot be read inside a CUDA graph: the profiled loop runs the same
      // kernels eagerly; a graph path's launches come from one more, unprofiled, whole loop.
      const bool graphs = s.flags.on(sparse3d::Flag::cuda_graphs);
      s.flags.set(sparse3d::Flag::cuda_graphs, false);
      auto out = sampler::sample(m, assets[ai].inputs, s);
      auto totals = profiler::stop_and_collect();
      log(cat("[instrumented] ", c.asset, " ", c.path, ": ", out.loop_seconds, " s, ",
              launch_counts().total, " launches"));
      // Per whole loop: counts and times of a shorter instrumented loop scaled up (every
      // step does the same work then; checked above). Attention and GEMM times include the
      // request's set-up (the condition K/V projection, < 0.5% of a loop's GEMM FLOPs) and
      // are scaled whole.
      auto per_loop = [&](double v) { return v * instrument_scale; };
      // Launches: the request's set-up once, the loop's scaled.
      auto per_loop_n = [&](uint64_t setup, uint64_t all) {
        return setup + static_cast<uint64_t>(std::llround((all - setup) * instrument_scale));
      };
      LaunchCounts lc = launch_counts();
      const LaunchCounts& setup = out.launches_before_loop;
      c.launches = per_loop_n(setup.total, lc.total);
      for (const auto& [op, n] : lc.by_op) {
        const auto it = setup.by_op.find(op);
        c.launches_by_op[op] = per_loop_n(it == setup.by_op.end() ? 0 : it->second, n);
      }
      c.peak_bytes = DeviceAllocator::current().stats().peak_allocated_bytes;
      if (graphs) {
        synchronize();
        DeviceAllocator::current().reset_peak();
        reset_launch_counts();
        const auto whole = sampler::sample(m, assets[ai].inputs, options_for(plans[pi]));
        c.graphs_captured = whole.graphs_captured;
        c.graph_capture_seconds = whole.graph_capture_seconds;
        c.graph_nodes = whole.graph_nodes;
        const LaunchCounts g = launch_counts();
        c.launches = g.total;
        c.launches_by_op = g.by_op;
        c.peak_bytes = DeviceAllocator::current().stats().peak_allocated_bytes;
      }
      c.attention_seconds = per_loop(totals["attention"].seconds);
      c.attention_flops = per_loop(totals["attention"].flops);
      c.gemm_seconds = per_loop(totals["gemm"].seconds);
      c.gemm_flops = per_loop(totals["gemm"].flops);
    }

  // Timed repeats, interleaved: the asset order and the path order rotate every repeat.
  auto started = std::chrono::steady_clock::now();
  for (int rep = 0; rep < o.repeats; ++rep)
    for (size_t i = 0; i < assets.size(); ++i) {
      const size_t ai = (i + rep) % assets.size();
      for (size_t j = 0; j < plans.size(); ++j) {
        const size_t pi = (j + rep + i) % plans.size();
        if (!runs(pi, ai)) continue;
        auto out = sampler::sample(m, assets[ai].inputs, options_for(plans[pi]));
        cells[{pi, ai}].loop_seconds.push_back(out.request_seconds());
        cells[{pi, ai}].setup_seconds.push_back(out.setup_seconds);
        double spent =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
        log(cat("[repeat ", rep + 1, "/", o.repeats, "] ", assets[ai].info.name, " (",
                assets[ai].info.tokens, " tokens) ", r.paths[pi], ": ", out.request_seconds(),
                " s (set-up ", out.setup_seconds, " s)   [", std::lround(spent), " s elapsed]"));
      }
    }
  for (auto& [key, c] : cells) r.cells.push_back(std::move(c));

  // Multi-asset batching: K copies of each asset in one request, per path; warm-up one step,
  // then the repeats with the path order rotating.
  for (int k : o.batch_sizes) {
    if (k <= 1) continue;
    for (size_t ai = 0; ai < assets.size(); ++ai) {
      std::vector<sampler::Inputs> copies(static_cast<size_t>(k), assets[ai].inputs);
      for (int c = 1; c < k; ++c) {
        Tensor& noise = copies[static_cast<size_t>(c)].noise;
        noise = Tensor::empty(noise.shape(), DType::F32, Device::CPU);
        normal_fill(assets[ai].noise_seed, static_cast<uint64_t>(c) * noise.numel(),
                    static_cast<uint64_t>(noise.numel()), noise.data_as<float>());
      }
      const sampler::Inputs packed = sampler::pack(copies);
      std::vector<ThroughputCell> row(plans.size());
      for (size_t pi = 0; pi < plans.size(); ++pi) {
        if (ablation_variant[pi]) continue;
        row[pi] = ThroughputCell{r.paths[pi], assets[ai].info.name, k, {}, 0};
        sampler::SamplerOptions s = options_for(plans[pi]);
        s.steps = 1;
        sampler::sample(m, packed, s);
      }
      for (int rep = 0; rep < o.repeats; ++rep)
        for (size_t j = 0; j < plans.size(); ++j) {
          const size_t pi = (j + rep) % plans.size();
          if (ablation_variant[pi]) continue;
          synchronize();
          DeviceAllocator::current().reset_peak();
          auto out = sampler::sample(m, packed, options_for(plans[pi]));
          row[pi].loop_seconds.push_back(out.request_seconds());
          row[pi].peak_bytes = std::max(row[pi].peak_bytes,
                                        DeviceAllocator::current().stats().peak_allocated_bytes);
          log(cat("[batch ", k, ", repeat ", rep + 1, "/", o.repeats, "] ", assets[ai].info.name,
                  " x ", k, " (", packed.coords.size(0), " tokens) ", r.paths[pi], ": ",
                  out.request_seconds(), " s, ", k * 3600.0 / out.request_seconds(),
                  " assets/hour"));
        }
      for (auto& t : row)
        if (!t.loop_seconds.empty()) r.throughput.push_back(std::move(t));
    }
  }
  r.fallbacks = contract::fallback_counts();
  log(cat("fallbacks:\n", contract::format_fallbacks(r.fallbacks)));
  set_current_stream(nullptr);
  if (o.on_engine_done) o.on_engine_done(r);

  if (!o.torch_script.empty()) {
    run_torch_baseline(o, assets, false, r, log);
    if (o.torch_compile) run_torch_baseline(o, assets, true, r, log);
  }
  return r;
}

}  // namespace s3d::bench
