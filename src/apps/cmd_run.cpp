// sparse3d run: the full denoise loop for assets of a payload manifest, or for a user's own
// inputs files (--inputs), through the public Engine API (include/sparse3d/engine.h) like any
// other client.
#include <CLI/CLI.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>

#include "apps/commands.h"
#include "apps/engine_flags.h"
#include "apps/inputs_file.h"
#include "apps/sampler_flags.h"
#include "bench/flag_choice.h"
#include "bench/packing.h"
#include "bench/result_io.h"
#include "core/error.h"
#include "core/tensor.h"
#include "io/atomic_file.h"
#include "io/json.h"
#include "io/safetensors.h"
#include "payload/generate.h"
#include "payload/payload.h"
#include "sparse3d/engine.h"

namespace s3d::apps {
namespace {

using bench::view_of;

double gib(size_t bytes) { return bytes / (1024.0 * 1024.0 * 1024.0); }

struct RunArgs {
  std::string manifest, out = "out/latents";
  std::vector<std::string> assets, inputs;
  int64_t tokens = 0;  // --tokens: one synthetic request of this many voxels
  int cond_tokens = 64;
  uint64_t seed = 0;  // --inputs files without noise; --tokens
  EngineFlags engine;
  SamplerFlags sampler{""};  // the model family's preset unless --sampler names one
  bool dump_first = false;
  std::string cfg_choice, graph_choice;
};

// --cfg-choice, --graph-choice: this path's timings with the flag off and on from one bench
// run; the flag is then chosen per asset by token count.
struct AutoFlag {
  sparse3d::Flag flag;
  std::string file;
  std::vector<bench::FlagTimingPoint> points;
};

std::vector<AutoFlag> auto_flags(const RunArgs& a, const sparse3d::ExecutionPlan& plan) {
  std::vector<AutoFlag> out;
  if (!a.cfg_choice.empty()) out.push_back({sparse3d::Flag::batched_cfg, a.cfg_choice, {}});
  if (!a.graph_choice.empty()) out.push_back({sparse3d::Flag::cuda_graphs, a.graph_choice, {}});
  for (auto& f : out) {
    sparse3d::ExecutionPlan off = plan, on = plan;
    off.disable(f.flag);
    on.enable(f.flag);
    f.points = bench::flag_timing_points(
        bench::result_from_json(io::read_json_file(f.file), f.file), off.label(), on.label(),
        f.file);
  }
  return out;
}

// The request's flags: the engine's, with the per-asset choices applied (batched CFG only
// where it fits in memory).
sparse3d::FlagSet asset_flags(const sparse3d::Engine& engine, const std::vector<AutoFlag>& autos,
                              const std::string& asset, int64_t tokens, int batch,
                              int cond_tokens) {
  sparse3d::FlagSet flags = engine.plan().flags();
  for (const auto& f : autos) {
    bench::FlagChoice choice = bench::choose_flag(f.flag, f.points, tokens);
    if (f.flag == sparse3d::Flag::batched_cfg && choice.on) {
      sparse3d::FlagSet batched = flags;
      batched.set(sparse3d::Flag::batched_cfg);
      if (!engine.fits(tokens, batch, cond_tokens, batched).empty()) {
        choice.on = false;
        choice.reason += "; batched CFG would not fit in device memory: off";
      }
    }
    flags.set(f.flag, choice.on);
    std::printf("[%s] %s\n", asset.c_str(), choice.reason.c_str());
  }
  return flags;
}

std::vector<const payload::ManifestEntry*> selected(const payload::Manifest& m,
                                                    const RunArgs& a) {
  std::vector<const payload::ManifestEntry*> todo;
  for (const auto& name : a.assets) {
    const payload::ManifestEntry* found = nullptr;
    for (const auto& e : m.assets)
      if (e.name == name) found = &e;
    S3D_CHECK(found, "--asset ", name, ": no such asset in ", a.manifest);
    todo.push_back(found);
  }
  if (a.assets.empty())
    for (const auto& e : m.assets) todo.push_back(&e);
  return todo;
}

Tensor host_tensor(const sparse3d::Array& a) {
  Tensor t = Tensor::from_floats(a.to_floats(), a.view.shape, DType::F32);
  return t;
}

// The engine's noise for an asset of T tokens, [T, channels]: the seed's stream in token order,
// or for a grid-layout model in the volume's order [channels, T] transposed (docs/FORMATS.md).
Tensor initial_noise(const sparse3d::Engine& engine, uint64_t seed, int64_t T, int64_t channels) {
  if (engine.model().layout != "grid")
    return host_tensor(sparse3d::draw_noise(seed, T, channels));
  const std::vector<float> v = sparse3d::draw_noise(seed, channels, T).to_floats();
  std::vector<float> tokens(v.size());
  for (int64_t c = 0; c < channels; ++c)
    for (int64_t n = 0; n < T; ++n) tokens[n * channels + c] = v[c * T + n];
  return Tensor::from_floats(tokens, {T, channels}, DType::F32);
}

// One request and where its result goes: an asset of the manifest or an inputs file.
struct Job {
  std::string name;                 // [name] in the log; the output is OUT/<name>.safetensors
  sparse3d::SampleRequest request;  // views into `keep`
  std::vector<Tensor> keep;         // the request's tensors
  Tensor coords;                    // written beside the latent; undefined for a volume
  int64_t tokens = 0;
  int cond_tokens = 0;
  Tensor x_T;                       // the initial noise, for --dump-first-forward
  std::map<std::string, std::string> metadata;  // what the inputs were
};

std::string output_path(const RunArgs& a, const std::string& name) {
  return (std::filesystem::path(a.out) / (name + ".safetensors")).string();
}

// An output must never replace the file it was computed from.
void check_not_overwritten(const std::string& output, const std::string& input) {
  std::error_code ec;
  S3D_CHECK(!std::filesystem::equivalent(output, input, ec), "--out: the output ", output,
            " would overwrite its own input ", input, "; choose another --out folder");
}

Job asset_job(const sparse3d::Engine& engine, const RunArgs& a, const payload::Manifest& manifest,
              const payload::ManifestEntry& e) {
  payload::Asset asset = payload::read_asset(manifest, e);
  Job job;
  job.name = e.name;
  job.tokens = asset.coords.size(0);
  job.cond_tokens = manifest.cond_tokens;
  job.coords = asset.coords;
  Tensor cond = asset.cond.reshape({1, asset.cond.size(0), asset.cond.size(1)});
  job.keep = {asset.coords, cond, asset.concat_cond};
  job.request.coords = view_of(asset.coords);
  job.request.cond = view_of(cond);
  if (asset.concat_cond.defined()) job.request.concat_cond = view_of(asset.concat_cond);
  job.request.seed = asset.noise_seed;
  if (a.dump_first)
    job.x_T = initial_noise(engine, e.noise_seed, job.tokens, engine.model().out_channels);
  job.metadata = {{"asset", e.name}};
  return job;
}

Job inputs_job(const sparse3d::Engine& engine, const RunArgs& a, const InputsFile& in) {
  const sparse3d::ModelInfo& m = engine.model();
  Job job;
  job.name = in.name;
  const int64_t R = m.resolution;
  job.tokens = in.coords.defined() ? in.coords.size(0) : in.batch * R * R * R;
  job.cond_tokens = static_cast<int>(in.cond.size(1));
  job.coords = in.coords;
  job.keep = {in.coords, in.cond, in.concat_cond, in.noise};
  job.request.batch = in.batch;
  if (in.coords.defined()) job.request.coords = view_of(in.coords);  // else the volume layout
  job.request.cond = view_of(in.cond);
  if (in.concat_cond.defined()) job.request.concat_cond = view_of(in.concat_cond);
  job.request.seed = a.seed;
  if (in.noise.defined()) {
    job.request.noise = view_of(in.noise);
    job.x_T = in.noise;
  } else if (a.dump_first) {
    // What the engine draws from the seed, in the request's layout.
    job.x_T = in.coords.defined()
                  ? host_tensor(sparse3d::draw_noise(a.seed, job.tokens, m.out_channels))
                  : host_tensor(sparse3d::draw_noise(a.seed, int64_t(in.batch) * m.out_channels,
                                                     R * R * R))
                        .reshape({in.batch, m.out_channels, R, R, R});
  }
  job.metadata = {{"inputs", in.path}};
  if (!in.noise.defined()) job.metadata["seed"] = std::to_string(a.seed);
  return job;
}

// --tokens: one request drawn from --seed (payload::make_asset, as make-payloads draws its
// assets): the voxels of a procedural surface on the model's grid, or the whole grid for a
// grid-layout model, a layer-normalised condition of --cond-tokens tokens and, for a texture
// model, a normal concat_cond. The noise comes from the same seed.
Job synthetic_job(const sparse3d::Engine& engine, const RunArgs& a) {
  const sparse3d::ModelInfo& m = engine.model();
  const bool grid = m.layout == "grid";
  const int64_t R = m.resolution, cells = R * R * R;
  if (grid)
    S3D_CHECK(a.tokens == cells, "--tokens ", a.tokens, ": a ", m.family, " denoises its whole ",
              R, "^3 grid, --tokens ", cells);
  else
    S3D_CHECK(a.tokens <= cells, "--tokens ", a.tokens, ": the model's grid has ", R, "^3 = ",
              cells, " voxels");
  payload::GenerateOptions o;
  o.grid = static_cast<int>(R);
  o.dense = grid;
  o.cond_tokens = a.cond_tokens;
  o.cond_channels = m.cond_channels;
  o.concat_channels = m.in_channels - m.out_channels;
  const payload::Asset asset = payload::make_asset(0, a.tokens, a.seed, o);
  Job job;
  job.name = "synthetic";
  job.tokens = a.tokens;
  job.cond_tokens = a.cond_tokens;
  const Tensor cond = asset.cond.reshape({1, asset.cond.size(0), asset.cond.size(1)});
  job.keep = {asset.coords, cond, asset.concat_cond};
  if (!grid) {
    job.coords = asset.coords;
    job.request.coords = view_of(asset.coords);
  }
  job.request.cond = view_of(cond);
  if (asset.concat_cond.defined()) job.request.concat_cond = view_of(asset.concat_cond);
  job.request.seed = a.seed;
  if (a.dump_first)
    job.x_T = grid ? host_tensor(sparse3d::draw_noise(a.seed, m.out_channels, cells))
                         .reshape({1, m.out_channels, R, R, R})
                   : host_tensor(sparse3d::draw_noise(a.seed, a.tokens, m.out_channels));
  job.metadata = {{"tokens", std::to_string(a.tokens)},
                  {"cond_tokens", std::to_string(a.cond_tokens)},
                  {"seed", std::to_string(a.seed)}};
  return job;
}

// Runs one request and writes OUT/<name>.safetensors; returns its non-finite output count.
// The outputs a run has written: removed again when the run fails (a failed command leaves
// nothing new behind), and by the signal handler when it is interrupted, until keep().
class Outputs {
 public:
  ~Outputs() {
    if (!keep_)
      for (const auto& p : paths_) std::remove(p.c_str());
  }
  void add(const std::string& path) {
    paths_.push_back(path);
    guards_.emplace_back(path, io::RemoveOnSignal::Kind::File);
  }
  void keep() {
    keep_ = true;
    for (auto& g : guards_) g.release();
  }

 private:
  std::vector<std::string> paths_;
  std::vector<io::RemoveOnSignal> guards_;
  bool keep_ = false;
};

// `folders` makes the output folder when the first output is written: a run that fails
// before it has a result leaves no empty folder behind.
int64_t run_job(sparse3d::Engine& engine, const RunArgs& a, Job& job,
                const std::vector<AutoFlag>& autos, io::NewFolders& folders, Outputs& outputs) {
  const std::string& name = job.name;
  sparse3d::SampleRequest& r = job.request;
  r.sampler = a.sampler.resolve(engine.model().sampler_preset);
  r.flags = asset_flags(engine, autos, name, job.tokens, r.batch, job.cond_tokens);
  r.keep_first_forward = a.dump_first;
  r.on_step = [&](const sparse3d::StepInfo& s) {
    std::printf("[%s] step %2d/%d  t=%.4f -> %.4f  %s  elapsed %.3f s\n", name.c_str(),
                s.index + 1, s.total, s.t, s.t_prev, s.cfg ? "cfg " : "cond", s.elapsed_s);
    std::fflush(stdout);
  };
  engine.reset_counters();
  sparse3d::SampleResult out = engine.sample(r);
  Tensor latent = host_tensor(out.latent);
  int64_t non_finite = 0;
  for (float v : latent.to_floats()) non_finite += std::isfinite(v) ? 0 : 1;
  std::vector<std::pair<std::string, Tensor>> tensors = {{"latent", latent}};
  if (job.coords.defined()) tensors.emplace_back("coords", job.coords);
  if (a.dump_first) {
    tensors.emplace_back("x_T", job.x_T);
    if (out.first_v_cond.defined()) tensors.emplace_back("v_cond", host_tensor(out.first_v_cond));
    if (out.first_v_uncond.defined())
      tensors.emplace_back("v_uncond", host_tensor(out.first_v_uncond));
  }
  // What ran: the engine may have dropped memory-costly flags under --max-device-memory.
  const sparse3d::ExecutionPlan ran = sparse3d::ExecutionPlan::parse(out.stats.plan);
  const bool batched = ran.on(sparse3d::Flag::batched_cfg);
  const std::string path = output_path(a, name);
  if (non_finite > 0) {
    std::printf("[%s] %lld non-finite outputs: %s not written\n", name.c_str(),
                static_cast<long long>(non_finite), path.c_str());
    return non_finite;
  }
  std::map<std::string, std::string> metadata = job.metadata;
  metadata.insert({{"steps", std::to_string(r.sampler.steps)},
                   {"path", out.stats.plan},
                   {"cfg", batched ? "batched" : "serial"},
                   {"cuda_graphs", ran.on(sparse3d::Flag::cuda_graphs) ? "on" : "off"}});
  folders.make(a.out, "--out " + a.out);
  io::write_safetensors(path, tensors, metadata);
  outputs.add(path);
  std::printf("[%s] %lld tokens, path %s: set-up %.3f s + denoise loop %.3f s, %llu launches, "
              "peak device memory %.2f GiB in use / %.2f GiB reserved, %lld non-finite outputs "
              "-> %s\n",
              name.c_str(), static_cast<long long>(job.tokens), out.stats.plan.c_str(),
              out.stats.setup_seconds, out.stats.loop_seconds,
              static_cast<unsigned long long>(out.stats.launches),
              gib(out.stats.peak_device_bytes), gib(out.stats.peak_device_reserved_bytes),
              static_cast<long long>(non_finite), path.c_str());
  if (out.stats.devices > 1 || out.stats.devices_reason != "one device")
    std::printf("[%s] sequence parallel: %s\n", name.c_str(), out.stats.devices_reason.c_str());
  // What the request cost beyond its set-up and loop: the null-context work and the work done
  // once per new shape (a repeat of the asset shows none of it).
  std::string first_use;
  for (const auto& [kind, c] : out.stats.first_use)
    first_use += cat(first_use.empty() ? "" : ", ", kind, " ", c.count, " x ",
                     std::to_string(c.seconds).substr(0, 6), " s");
  std::printf("[%s] whole call %.3f s: null context %.3f s; first use: %s\n", name.c_str(),
              out.stats.wall_seconds, out.stats.null_context_seconds,
              first_use.empty() ? "none" : first_use.c_str());
  // For start-up measurements: when the latent reached its file (process start to first latent).
  std::printf("[%s] written at unix time %.3f\n", name.c_str(),
              std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count());
  return non_finite;
}

// A run's inputs: the manifest's selected assets, or the --inputs files.
struct RunInputs {
  payload::Manifest manifest;
  std::vector<const payload::ManifestEntry*> todo;
  std::vector<InputsFile> inputs;
};

// Every input read and checked, and every output path, before the engine loads: a bad asset
// or a path that cannot be written is refused before the checkpoint loads and before any
// output is written.
RunInputs read_run_inputs(const RunArgs& a) {
  RunInputs r;
  if (a.tokens > 0) {
    io::check_output_file(output_path(a, "synthetic"), "--out " + a.out);
  } else if (a.inputs.empty()) {
    r.manifest = payload::read_manifest(a.manifest);
    r.todo = selected(r.manifest, a);
    // Each asset is read and checked once now, so that a bad one is refused before the
    // checkpoint loads and before any output is written; it is read again when it runs
    // (only one asset's tensors are held at a time).
    for (const auto* e : r.todo) (void)payload::read_asset(r.manifest, *e);
  } else {
    std::map<std::string, std::string> names;
    for (const auto& path : a.inputs) {
      r.inputs.push_back(read_inputs(path));
      const auto [seen, fresh] = names.emplace(r.inputs.back().name, path);
      S3D_CHECK(fresh, "--inputs ", path, " and ", seen->second, " would both be written to ",
                output_path(a, seen->first), " (output names come from the file names)");
    }
  }
  // The output folder and every output's name are checked before anything is loaded; the
  // folder itself is made only when the first output is written.
  a.engine.check_output_folder(a.out);
  for (const auto* e : r.todo) {
    io::check_output_file(output_path(a, e->name), "--out " + a.out);
    check_not_overwritten(output_path(a, e->name),
                          (std::filesystem::path(r.manifest.dir) / e->file).string());
  }
  for (const auto& in : r.inputs) {
    io::check_output_file(output_path(a, in.name), "--out " + a.out);
    check_not_overwritten(output_path(a, in.name), in.path);
  }
  return r;
}

}  // namespace

// The --inputs layout, for --help (docs/CLI.md has it in full).
const char* const kInputsHelp =
    "A safetensors file of one request's inputs, instead of --manifest (repeatable; the output "
    "is OUT/<file name>.safetensors). Tensors by name: coords i32 [N, 4] rows (batch, x, y, z) "
    "(SLat models; leave out for the dense sparse-structure model), cond f32 or bf16 [L, C] or "
    "[B, L, C], concat_cond f32 or bf16 [N, Cc] (texture models only), noise f32 or bf16 "
    "(optional: [N, C_out], or [B, C_out, R, R, R] for the dense model; absent: drawn from "
    "--seed)";

namespace {

// The request sources, exactly one of them (--manifest with --asset, --inputs, --tokens with
// --cond-tokens), and --seed, which goes with the last two. (Not a CLI11 option group: an
// empty argument matches a group's empty name as a subcommand, and CLI11 2.1 then never ends
// the parse.)
void add_sources(CLI::App* sub, RunArgs& a) {
  CLI::Option* manifest = sub->add_option("--manifest", a.manifest,
                                          "Payload manifest.json (or --inputs)");
  CLI::Option* inputs = sub->add_option("--inputs", a.inputs, kInputsHelp);
  CLI::Option* tokens =
      sub->add_option("--tokens", a.tokens,
                      "One synthetic request of this many voxels (a procedural surface on the "
                      "model's grid, a normal condition, noise: all drawn from --seed), "
                      "instead of --manifest; written as OUT/synthetic.safetensors")
          ->transform(integer_in(1, int64_t{1} << 24));
  sub->add_option("--cond-tokens", a.cond_tokens,
                  "--tokens: condition tokens L of the synthetic request")
      ->needs(tokens)
      ->transform(integer_in(1, 1 << 16))
      ->capture_default_str();
  sub->add_option("--asset", a.assets,
                  "Asset name of the manifest (repeatable; default: every asset)")
      ->needs(manifest);
  CLI::Option* seed =
      sub->add_option("--seed", a.seed,
                      "--inputs: the noise seed of a file that holds no noise (the engine's "
                      "generator, docs/FORMATS.md); --tokens: the synthetic request's seed")
          ->transform(unsigned_64())
          ->capture_default_str();
  sub->final_callback([manifest, inputs, tokens, seed] {
    const int sources = (manifest->count() > 0) + (inputs->count() > 0) + (tokens->count() > 0);
    if (sources > 1)
      throw UsageError("--manifest, --inputs and --tokens exclude each other: give one of them");
    if (sources == 0)
      throw UsageError("run needs one of --manifest, --inputs or --tokens");
    if (seed->count() > 0 && manifest->count() > 0)
      throw UsageError("--seed goes with --inputs or --tokens (a manifest's assets carry their "
                       "own noise seeds)");
  });
}

}  // namespace

Command add_run(CLI::App& app) {
  auto a = std::make_shared<RunArgs>();
  auto* sub = app.add_subcommand(
      "run", "Denoise assets of a payload manifest, your own inputs files (--inputs), or a "
             "synthetic request (--tokens)");
  a->engine.add_to(sub);
  add_sources(sub, *a);
  sub->add_option("--out", a->out, "Folder for the <asset>.safetensors outputs")
      ->check(kNonEmptyPath)
      ->capture_default_str();
  a->sampler.add_to(sub);
  sub->add_flag("--dump-first-forward", a->dump_first,
                "Also write x_T, v_cond, v_uncond of the first step");
  sub->add_option("--cfg-choice", a->cfg_choice,
                  "A bench result JSON that timed the path with and without batched_cfg: "
                  "serial or batched CFG per asset, whichever it measured faster at the "
                  "asset's token count");
  sub->add_option("--graph-choice", a->graph_choice,
                  "A bench result JSON that timed the path with and without cuda_graphs: "
                  "capture CUDA graphs per asset where it measured that faster at the asset's "
                  "token count");

  return [a]() {
    sparse3d::EngineOptions eo = a->engine.resolve();
    // Checked now (a bad value is refused before anything loads); the preset a run without
    // --sampler uses is the model family's, known once the checkpoint is loaded.
    (void)a->sampler.resolve();
    // Every input is read and checked before the engine loads.
    const RunInputs given = read_run_inputs(*a);
    const payload::Manifest& manifest = given.manifest;
    const std::vector<const payload::ManifestEntry*>& todo = given.todo;
    const std::vector<InputsFile>& inputs = given.inputs;
    eo.log = [](const std::string& line) { std::printf("%s\n", line.c_str()); };
    const auto t0 = std::chrono::steady_clock::now();
    sparse3d::Engine engine(a->engine.checkpoint, eo);
    std::printf("loaded %s (%lld parameters) on %s in %.3f s\n", a->engine.checkpoint.c_str(),
                static_cast<long long>(engine.model().parameters),
                engine.device() == sparse3d::Device::CUDA ? "cuda" : "cpu",
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    if (inputs.empty() && a->tokens == 0) a->engine.check_manifest(engine, manifest, a->manifest);
    for (const auto& in : inputs) check_inputs(in, engine.model());
    const std::vector<AutoFlag> autos = auto_flags(*a, engine.plan());
    const sparse3d::SamplerSettings settings = a->sampler.resolve(engine.model().sampler_preset);
    std::printf("path %s; sampler: %d steps, rescale_t %g, cfg %g on t in [%g, %g], "
                "rescale %g, %s CFG\n",
                engine.plan().label().c_str(), settings.steps, settings.rescale_t, settings.guidance, settings.interval_lo,
                settings.interval_hi, settings.guidance_rescale,
                !a->cfg_choice.empty() ? "per-asset (--cfg-choice)"
                : engine.plan().on(sparse3d::Flag::batched_cfg) ? "batched" : "serial");
    int failures = 0;
    uint64_t fallbacks = 0;
    std::string fallback_lines;
    // When the run fails: the outputs it wrote are removed, then the folders it made (in
    // this order: the members go in reverse).
    io::NewFolders folders;
    Outputs outputs;
    auto run_one = [&](Job job) {
      failures += run_job(engine, *a, job, autos, folders, outputs) > 0 ? 1 : 0;
      for (const auto& f : engine.counters().fallbacks) {
        fallbacks += f.count;
        fallback_lines += cat("  [", job.name, "] ", f.optimization, ": ", f.reason, " (", f.count, "x)\n");
      }
    };
    for (const auto* e : todo) run_one(asset_job(engine, *a, manifest, *e));
    for (const auto& in : inputs) run_one(inputs_job(engine, *a, in));
    if (a->tokens > 0) run_one(synthetic_job(engine, *a));
    std::printf("fallbacks:\n%s", fallbacks ? fallback_lines.c_str() : "  none\n");
    S3D_CHECK(failures == 0, failures, " asset(s) produced non-finite latents");
    outputs.keep();
    folders.keep();
    return 0;
  };
}

}  // namespace s3d::apps
