// sparse3d bench and sparse3d profile.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>

#include "apps/commands.h"
#include "apps/engine_flags.h"
#include "apps/sampler_flags.h"
#include "bench/environment.h"
#include "bench/kernel_bandwidth.h"
#include "bench/packing.h"
#include "bench/report.h"
#include "bench/result_io.h"
#include "bench/runner.h"
#include "core/error.h"
#include "io/atomic_file.h"
#include "io/json.h"
#include "payload/payload.h"
#include "sparse3d/diagnostics.h"
#include "sparse3d/engine.h"
#include "sparse3d/flags.h"

namespace s3d::apps {

namespace {

// What `sparse3d bench` reads from its command line.
struct BenchArgs {
  bench::BenchOptions o;
  SamplerFlags sampler{"protocol"};
  std::string out = "bench/results", stem;
  std::string protocol = "both", device = "cuda";
  bool no_torch = false;
  std::string replot, replot_md;  // --replot: re-render a saved result's markdown
};

// How to draw the figure of a result: the bench writes JSON and markdown, and the figure is
// matplotlib's (tools/bench_figure.py, docs/BENCHMARK.md "The figure").
void print_figure_hint(const std::string& json_path) {
  std::printf("figure: python3 tools/bench_figure.py %s  (matplotlib; writes %s)\n",
              json_path.c_str(),
              std::filesystem::path(json_path).replace_extension(".png").string().c_str());
}

// --replot FILE.json: the markdown report of a saved result, rendered again by this build
// from the JSON alone: nothing is measured and no GPU is needed. The JSON itself is left as
// it is.
void add_replot_options(CLI::App* sub, BenchArgs& a) {
  auto* replot = sub->add_option("--replot", a.replot,
                                 "Re-render the markdown report of a saved bench result JSON "
                                 "(no GPU; nothing is measured, the JSON is not rewritten)");
  sub->add_option("--md", a.replot_md, "With --replot: the markdown to write (default: FILE.md)")
      ->needs(replot);
}

int replot(const BenchArgs& a) {
  const bench::BenchResult r = bench::result_from_json(io::read_json_file(a.replot), a.replot);
  std::string md_path = a.replot_md;
  if (md_path.empty()) md_path = std::filesystem::path(a.replot).replace_extension(".md").string();
  io::write_file_atomic(md_path, bench::to_markdown(r));
  std::printf("wrote %s\n", md_path.c_str());
  print_figure_hint(a.replot);
  return 0;
}

// The protocol (service, repeated or both), its warm-up request, the backend.
void add_protocol_options(CLI::App* sub, BenchArgs& a) {
  sub->add_option("--protocol", a.protocol,
                  "service: per path a fresh engine and an empty qualification cache, one "
                  "warm-up request at a token count outside the asset set, then each asset "
                  "once (its first request, whole call); repeated: warm-up loops, then the "
                  "timed repeats; both: service, then repeated on the same engines")
      ->check(CLI::IsMember({"service", "repeated", "both"}))
      ->capture_default_str();
  sub->add_option("--warmup-tokens", a.o.warmup_tokens,
                  "Service protocol: tokens of the warm-up request, no asset's count: the "
                  "largest asset's first ones, or the grid's first voxels for more (0 = 3/4 "
                  "of the smallest asset's)")
      ->transform(integer_in(0, int64_t{1} << 30))
      ->capture_default_str();
  sub->add_option("--device", a.device,
                  "cuda, or cpu: the same protocol on the CPU backend (a check of the bench "
                  "itself; no library peaks)")
      ->check(CLI::IsMember({"cuda", "cpu"}))
      ->capture_default_str();
}

// Leave-one-out over the last path's flags.
void add_ablation_options(CLI::App* sub, BenchArgs& a) {
  sub->add_flag("--ablate", a.o.ablate, "Leave-one-out over the last path's flags");
  sub->add_option("--ablate-flags", a.o.ablate_flags,
                  "Leave out only these flags of the last path (default: all of them)");
  sub->add_option("--ablate-assets", a.o.ablate_assets,
                  "Assets (names or sets) the leave-one-out variants run on (default: all)");
}

// The PyTorch baseline (tools/torch_ref/run.py), eager or compiled.
// --devices and --queue: the GPUs a request may be split over, and the queue served both ways.
void add_device_options(CLI::App* sub, BenchArgs& a) {
  EngineFlags::add_devices(sub, a.o.devices);
  sub->add_flag("--queue", a.o.queue,
                "With --devices: also serve the assets as a queue, by one engine per GPU and by "
                "one engine split over them (throughput against latency)");
}

void add_baseline_options(CLI::App* sub, BenchArgs& a) {
  sub->add_option("--torch", a.o.torch_script,
                  "The PyTorch baseline's run.py (tools/torch_ref/run.py)")
      ->capture_default_str();
  sub->add_flag("--no-torch", a.no_torch, "Skip the PyTorch baseline");
  sub->add_flag("--torch-compile", a.o.torch_compile, "Also time the baseline under torch.compile");
  sub->add_option("--python", a.o.python, "Python with torch for the baseline")->capture_default_str();
}

// The model, the payloads, the assets and the paths. The options that a measurement requires
// are returned, so that the parse callback can check them (they are not required by CLI11
// itself, as a replot needs none of them).
struct InputOptions {
  CLI::Option* checkpoint;
  CLI::Option* manifest;
  CLI::Option* paths;
};

InputOptions add_input_options(CLI::App* sub, BenchArgs& a) {
  auto* checkpoint =
      sub->add_option("--checkpoint", a.o.checkpoint, "NAME.json (required unless --replot)");
  auto* manifest = sub->add_option("--manifest", a.o.manifest,
                                   "Payload manifest.json (required unless --replot)");
  sub->add_option("--assets", a.o.assets,
                  "Asset names or sets (default | long-tail | all)")->capture_default_str();
  auto* paths = sub->add_option(
      "--paths", a.o.paths,
      "Execution paths, each optionally with +flag/-flag edits (the first is the reference; "
      "default: the library's default path, " + std::string(sparse3d::default_path()) +
          ", without cuda_graphs under --device cpu, as `sparse3d run`); paths: " +
          path_names() + "; flags: " + flag_names());
  paths->capture_default_str();
  return {checkpoint, manifest, paths};
}

// The repeated protocol's warm-up loops and timed repeats, and the device memory budget.
void add_loop_options(CLI::App* sub, BenchArgs& a) {
  sub->add_option("--warmup", a.o.warmup,
                  "Repeated protocol: one-step warm-up loops per (path, asset), where no first "
                  "request ran; the PyTorch baseline's warm-up runs")
      ->transform(integer_in(0, 1000000))
      ->capture_default_str();
  sub->add_option("--repeats", a.o.repeats, "Timed loops per (path, asset)")
      ->transform(integer_in(1, 1000000))
      ->capture_default_str();
  sub->add_option("--max-device-memory", a.o.max_device_memory_gib,
                  "GiB of device memory the engine may use (0 = all); a request that would "
                  "not fit drops cond_kv_cache, then batched_cfg (counted fallbacks)")
      ->check(number_in(0, 1 << 20));
}

// The instrumented loop and the null-context qualification ahead of the warm-up.
void add_instrument_options(CLI::App* sub, BenchArgs& a) {
  sub->add_option("--instrument-steps", a.o.instrument_steps,
                  "Steps of the instrumented loop, scaled to the whole loop (0 = all; needs "
                  "CFG on every step)")
      ->transform(integer_in(0, 10000))
      ->capture_default_str();
  sub->add_option("--qualify-tokens", a.o.qualify_tokens,
                  "Null-context qualification: tokens per CFG branch qualified ahead of the "
                  "warm-up (the engine qualifies every asset's own on its first request)")
      ->transform(integer_in(1, int64_t{1} << 30));
  EngineFlags::add_qualify_m(sub, a.o.qualify_m);
}

// Where the report files go, and the extra tables (batching, further comparisons).
void add_output_options(CLI::App* sub, BenchArgs& a) {
  sub->add_option("--out", a.out, "Folder for the report files")
      ->check(kNonEmptyPath)
      ->capture_default_str();
  sub->add_option("--stem", a.stem, "Report file name stem (default bench-<date>)");
  sub->add_option("--batch", a.o.batch_sizes,
                  "Multi-asset batching: K values > 1; K copies of each asset packed into one "
                  "request (throughput table)")
      ->transform(integer_in(1, 64));
  sub->add_option("--also-compare", a.o.also_compare,
                  "Paths to compare every path with, besides the first (reduction and speedup)");
}

// A measurement needs the model and the payloads; a replot needs neither (a usage error
// either way, exit 2, as CLI11's own required options).
void require_inputs_unless_replot(CLI::App* sub, const std::shared_ptr<BenchArgs>& a,
                                  const InputOptions& in) {
  sub->parse_complete_callback([a, checkpoint = in.checkpoint, manifest = in.manifest,
                                paths = in.paths] {
    if (!a->replot.empty()) return;
    if (checkpoint->count() == 0) throw CLI::RequiredError("--checkpoint");
    if (manifest->count() == 0) throw CLI::RequiredError("--manifest");
    // The engine's own default on the CPU backend leaves out cuda_graphs, which it has no
    // use for (EngineOptions::path); so does the default here.
    if (paths->count() == 0 && a->device == "cpu")
      a->o.paths = {sparse3d::ExecutionPlan::parse(sparse3d::default_path())
                        .disable(sparse3d::Flag::cuda_graphs)
                        .label()};
  });
}

// One measurement: the bench options resolved from the command line, the run, and its
// report files.
int run_measurement(const std::shared_ptr<BenchArgs>& a) {
  bench::BenchOptions o = a->o;
  o.sampler = a->sampler.resolve();
  o.protocol = bench::parse_protocol(a->protocol);
  o.device = a->device == "cpu" ? sparse3d::DeviceChoice::CPU : sparse3d::DeviceChoice::CUDA;
  if (a->no_torch) o.torch_script.clear();
  if (!o.torch_script.empty())
    S3D_CHECK(std::filesystem::exists(o.torch_script), "--torch ", o.torch_script,
              " not found (give the path of tools/torch_ref/run.py, or --no-torch)");
  // The engine's figures are written as soon as they exist; a baseline that fails or
  // runs out of time cannot lose them.
  auto stem_of = [a](const bench::BenchResult& r) {
    return a->stem.empty() ? "bench-" + r.date.substr(0, 10) : a->stem;
  };
  o.on_engine_done = [a, stem_of](const bench::BenchResult& r) {
    bench::write_report_files(r, a->out, stem_of(r));
  };
  bench::BenchResult r = bench::run_bench(o, [](const std::string& line) {
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
  });
  const std::string stem = stem_of(r);
  bench::write_report_files(r, a->out, stem);
  std::printf("\n%s\nwrote %s/%s.{json,md}\n", bench::to_markdown(r).c_str(),
              a->out.c_str(), stem.c_str());
  print_figure_hint((std::filesystem::path(a->out) / (stem + ".json")).string());
  return 0;
}

}  // namespace

Command add_bench(CLI::App& app) {
  auto a = std::make_shared<BenchArgs>();
  a->o.torch_script = "tools/torch_ref/run.py";
  auto* sub = app.add_subcommand(
      "bench", "Time whole denoise loops per path and asset (GPU), or --replot a saved result");
  // The options are registered in the order that --help lists them.
  const InputOptions in = add_input_options(sub, *a);
  a->sampler.add_to(sub);
  add_protocol_options(sub, *a);
  add_loop_options(sub, *a);
  add_ablation_options(sub, *a);
  add_instrument_options(sub, *a);
  add_device_options(sub, *a);
  add_baseline_options(sub, *a);
  add_output_options(sub, *a);
  add_replot_options(sub, *a);
  require_inputs_unless_replot(sub, a, in);
  return [a]() {
    if (!a->replot.empty()) return replot(*a);
    return run_measurement(a);
  };
}

namespace {

struct ProfileArgs {
  std::string checkpoint, manifest, asset, path = std::string(sparse3d::default_path());
  double t = 1.0;
  bool uncond = false;
};

// The per-op table of one profiled forward (`sparse3d profile`), slowest op first.
void print_profile(const ProfileArgs& a, const std::string& asset, const sparse3d::Engine& engine,
                   int cond_tokens, const sparse3d::RequestStats& st, uint64_t before) {
  std::vector<std::pair<std::string, sparse3d::OpTime>> rows(st.profile.begin(), st.profile.end());
  rows.erase(std::remove_if(rows.begin(), rows.end(), [](const auto& r) { return r.second.calls == 0; }),
             rows.end());
  std::sort(rows.begin(), rows.end(),
            [](const auto& x, const auto& y) { return x.second.seconds > y.second.seconds; });
  double total = 0;
  for (const auto& [op, v] : rows) total += v.seconds;
  std::printf("one %s forward, %s, %s (%lld tokens, L = %d), t = %g, path %s\n",
              a.uncond ? "unconditional" : "conditional", asset.c_str(),
              engine.model().num_blocks == 30 ? "30 blocks" : "model",
              static_cast<long long>(st.tokens), cond_tokens, a.t, st.plan.c_str());
  std::printf("| op | launches | GPU ms | %% | mean us |\n|---|---:|---:|---:|---:|\n");
  for (const auto& [op, v] : rows)
    std::printf("| %s | %llu | %.3f | %.1f | %.1f |\n", op.c_str(),
                static_cast<unsigned long long>(v.calls), v.seconds * 1e3,
                100.0 * v.seconds / total, 1e6 * v.seconds / v.calls);
  std::printf("| total | %llu | %.3f | 100.0 | |\n", static_cast<unsigned long long>(st.launches),
              total * 1e3);
  auto flops = [&](const char* k) {
    const auto it = st.profile.find(k);
    return it == st.profile.end() ? 0.0 : it->second.flops;
  };
  std::printf("attention %.3f TFLOP, GEMM %.3f TFLOP in this forward\n", flops("attention") / 1e12,
              flops("gemm") / 1e12);
  std::printf("launches in the whole process: %llu (set-up and warm-up %llu + this forward %llu)\n",
              static_cast<unsigned long long>(before + st.launches),
              static_cast<unsigned long long>(before), static_cast<unsigned long long>(st.launches));
}

}  // namespace

Command add_profile(CLI::App& app) {
  auto a = std::make_shared<ProfileArgs>();
  auto* sub = app.add_subcommand(
      "profile", "Every kernel launched by one forward, grouped by op: count and GPU time");
  sub->add_option("--checkpoint", a->checkpoint, "NAME.json")->required();
  sub->add_option("--manifest", a->manifest, "Payload manifest.json")->required();
  sub->add_option("--asset", a->asset, "Asset name (default: the first)");
  sub->add_option("--path", a->path,
                  "Execution path, optionally with +flag/-flag edits: " + path_names())
      ->capture_default_str();
  sub->add_option("--t", a->t, "Timestep in [0, 1]")->check(number_in(0, 1))->capture_default_str();
  sub->add_flag("--uncond", a->uncond, "Profile the unconditional (zero-condition) forward");
  return [a]() {
    const sparse3d::ExecutionPlan plan = sparse3d::ExecutionPlan::parse(a->path);
    payload::Manifest manifest = payload::read_manifest(a->manifest);
    const payload::ManifestEntry* entry = manifest.assets.empty() ? nullptr : &manifest.assets[0];
    for (const auto& e : manifest.assets)
      if (e.name == a->asset) entry = &e;
    S3D_CHECK(entry && (a->asset.empty() || entry->name == a->asset), "--asset ", a->asset,
              ": no such asset in ", a->manifest);
    sparse3d::EngineOptions eo;
    eo.device = sparse3d::DeviceChoice::CUDA;
    eo.path = a->path;
    sparse3d::Engine engine(a->checkpoint, eo);
    payload::Asset asset = payload::read_asset(manifest, *entry);
    const int64_t T = asset.coords.size(0);
    const sparse3d::Array x = sparse3d::draw_noise(asset.noise_seed, T, engine.model().out_channels);
    Tensor t = Tensor::from_floats({static_cast<float>(1000.0 * a->t)}, {1}, DType::F32);
    Tensor cond = asset.cond.reshape({1, asset.cond.size(0), asset.cond.size(1)});
    if (a->uncond) cond = Tensor::zeros(cond.shape(), DType::BF16, Device::CPU);
    sparse3d::ForwardRequest r;
    r.x = x.view;
    r.t = bench::view_of(t);
    r.coords = bench::view_of(asset.coords);
    r.cond = bench::view_of(cond);
    if (asset.concat_cond.defined()) r.concat_cond = bench::view_of(asset.concat_cond);
    r.flags = plan.flags();
    engine.forward(r);  // warm-up: graphs, algorithms, allocator
    sparse3d::RequestStats st;
    r.profile = sparse3d::Profile::Launches;
    r.stats = &st;
    engine.forward(r);
    // Everything else launched (load, both requests' set-up, the warm-up forward): with the
    // measured forward, the number to hold against an external count (ncu, CUPTI) of the
    // whole process.
    const uint64_t before = engine.counters().launches - st.launches;
    print_profile(*a, entry->name, engine, manifest.cond_tokens, st, before);
    return 0;
  };
}

}  // namespace s3d::apps

namespace s3d::apps {

Command add_bench_report(CLI::App& app) {
  struct Args {
    std::string result, torch, torch_compile, out = "bench/results", stem;
    std::vector<std::string> also_compare;
  };
  auto a = std::make_shared<Args>();
  auto* sub = app.add_subcommand(
      "bench-report", "Remake a bench report from its JSON, adding baseline timings (no GPU)");
  sub->add_option("--result", a->result, "A bench result JSON")->required();
  sub->add_option("--torch-timing", a->torch, "tools/torch_ref/run.py --timing-json output (eager)");
  sub->add_option("--torch-compile-timing", a->torch_compile, "The same under --compile");
  sub->add_option("--out", a->out, "Folder for the report files")
      ->check(kNonEmptyPath)
      ->capture_default_str();
  sub->add_option("--stem", a->stem, "File name stem (default: the result's)");
  sub->add_option("--also-compare", a->also_compare,
                  "Engine paths to compare every path with, besides the reference (reduction "
                  "and speedup columns)");
  return [a]() {
    bench::BenchResult r = bench::result_from_json(io::read_json_file(a->result), a->result);
    if (!a->also_compare.empty()) r.settings["also_compare"] = a->also_compare;
    auto drop = [&](const std::string& name) {
      r.cells.erase(std::remove_if(r.cells.begin(), r.cells.end(),
                                   [&](const bench::Cell& c) { return c.path == name; }),
                    r.cells.end());
      r.paths.erase(std::remove(r.paths.begin(), r.paths.end(), name), r.paths.end());
      r.baselines.erase(std::remove_if(r.baselines.begin(), r.baselines.end(),
                                       [&](const auto& b) { return b.name == name; }),
                        r.baselines.end());
    };
    if (!a->torch.empty()) {
      drop("torch_eager");
      bench::add_baseline_timing(r, io::read_json_file(a->torch), "torch_eager", a->torch);
    }
    if (!a->torch_compile.empty()) {
      drop("torch_compile");
      bench::add_baseline_timing(r, io::read_json_file(a->torch_compile), "torch_compile",
                                 a->torch_compile);
    }
    std::string stem = a->stem.empty() ? std::filesystem::path(a->result).stem().string() : a->stem;
    bench::write_report_files(r, a->out, stem);
    std::printf("%s\nwrote %s/%s.{json,md}\n", bench::to_markdown(r).c_str(), a->out.c_str(),
                stem.c_str());
    print_figure_hint((std::filesystem::path(a->out) / (stem + ".json")).string());
    return 0;
  };
}

Command add_bench_kernels(CLI::App& app) {
  struct Args {
    std::string checkpoint, out = "bench/results", stem;
    std::vector<int64_t> tokens = {3664, 30227};
  };
  auto a = std::make_shared<Args>();
  auto* sub = app.add_subcommand(
      "bench-kernels", "Achieved bandwidth of the fused kernels vs the GPU's copy bandwidth (GPU)");
  sub->add_option("--checkpoint", a->checkpoint,
                  "NAME.json whose model's shapes are used (its weights are not: any checkpoint "
                  "of the shape, e.g. from `sparse3d make-checkpoint --preset "
                  "trellis2-shape-1024`)")
      ->required();
  sub->add_option("--tokens", a->tokens, "Token counts")
      ->transform(integer_in(1, int64_t{1} << 30))
      ->capture_default_str();
  sub->add_option("--out", a->out, "Folder for the report files")
      ->check(kNonEmptyPath)
      ->capture_default_str();
  sub->add_option("--stem", a->stem, "File name stem (default kernels-<date>)");
  return [a]() {
    sparse3d::EngineOptions eo;
    eo.device = sparse3d::DeviceChoice::CUDA;
    sparse3d::Engine engine(a->checkpoint, eo);
    bench::KernelBandwidthReport k;
    k.date = bench::utc_now();
    k.fingerprint = bench::fingerprint_json(engine);
    k.measured = bench::measure_kernel_bandwidth(engine.model(), a->tokens);
    const std::string stem = a->stem.empty() ? "kernels-" + k.date.substr(0, 10) : a->stem;
    std::filesystem::create_directories(a->out);
    const std::string md = bench::to_markdown(k);
    io::write_file_atomic(a->out + "/" + stem + ".md", md);
    io::write_file_atomic(a->out + "/" + stem + ".json",
                          io::dump_readable(bench::to_json(k)) + "\n");
    std::printf("%s\nwrote %s/%s.{json,md}\n", md.c_str(), a->out.c_str(), stem.c_str());
    return 0;
  };
}

}  // namespace s3d::apps
