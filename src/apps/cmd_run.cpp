// sparse3d run: the full denoise loop for assets of a payload manifest.
#include <CLI/CLI.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "apps/commands.h"
#include "apps/sampler_flags.h"
#include "bench/result_io.h"
#include "contract/fallback.h"
#include "core/allocator.h"
#include "core/cuda_util.h"
#include "core/error.h"
#include "core/rng.h"
#include "io/json.h"
#include "io/safetensors.h"
#include "model/checkpoint.h"
#include "model/null_context.h"
#include "model/params.h"
#include "model/slat_flow.h"
#include "payload/payload.h"
#include "sampler/flag_choice.h"
#include "sampler/sampler.h"
#include "sparse3d/flags.h"

namespace s3d::apps {
namespace {

using sparse3d::Flag;

// The CPU backend is a correctness oracle, not a product path: beyond this size a run
// would take hours, so it is refused with a pointer to what works.
constexpr int64_t kCpuParameterLimit = 50'000'000;

double gib(size_t bytes) { return bytes / (1024.0 * 1024.0 * 1024.0); }

Device choose_device(const std::string& wanted) {
  bool gpu = cuda_available();
  if (wanted == "cuda") {
    S3D_CHECK(gpu, "--device cuda: no usable CUDA device found");
    return Device::CUDA;
  }
  if (wanted == "cpu") return Device::CPU;
  if (!gpu) std::printf("no CUDA device found: running the CPU backend (a reference, slow)\n");
  return gpu ? Device::CUDA : Device::CPU;
}

// Refuses, before the loop starts, a request whose activations cannot fit.
void check_memory(const model::SLatFlowModel& m, const std::string& asset, int64_t tokens,
                  int batch, int cond_tokens, bool batched_cfg, bool cond_kv_cache,
                  double cap_gib) {
  if (m.device() != Device::CUDA) return;
  const int64_t t_eff = batched_cfg ? 2 * tokens : tokens;
  const int b_eff = batched_cfg ? 2 * batch : batch;
  size_t need = m.activation_bytes(t_eff, b_eff, cond_tokens);
  if (cond_kv_cache) {
    // Per block: to_kv's [BL, 2C] and the normalised K [BL, C], bf16, for every row the
    // conditional forwards attend to (both halves in the batched reference forward).
    const auto& c = m.config();
    need += static_cast<size_t>(c.num_blocks) * b_eff * cond_tokens * 3 * c.model_channels * 2;
  }
  size_t free_b = 0, total_b = 0;
  S3D_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  // Blocks the caching allocator holds count as free for this purpose.
  AllocatorStats st = DeviceAllocator::instance().stats();
  size_t available = free_b + (st.reserved_bytes - st.allocated_bytes);
  if (cap_gib > 0) {
    size_t cap = static_cast<size_t>(cap_gib * 1024 * 1024 * 1024);
    size_t used = st.allocated_bytes;
    available = std::min(available, cap > used ? cap - used : 0);
  }
  S3D_CHECK(need <= available, "asset ", asset, ": ", t_eff, " tokens",
            batched_cfg ? " (both CFG branches batched)" : "", " need an estimated ", gib(need),
            " GiB of device memory for activations, but only ", gib(available),
            " GiB are available (weights hold ", gib(m.weight_bytes()),
            " GiB); use fewer tokens", batched_cfg ? " or serial CFG" : "",
            " (nothing was run)");
}

}  // namespace

Command add_run(CLI::App& app) {
  struct Args {
    std::string checkpoint, manifest, out = "out/latents", device = "auto", path = "pure_eager";
    std::vector<std::string> assets, enable, disable;
    std::vector<int64_t> qualify_tokens, qualify_m;
    SamplerFlags sampler;
    double max_mem_gib = 0;
    bool dump_first = false;
    std::string cfg_choice, graph_choice;
  };
  auto a = std::make_shared<Args>();
  auto* sub = app.add_subcommand("run", "Denoise assets of a payload manifest");
  sub->add_option("--checkpoint", a->checkpoint, "NAME.json (NAME.safetensors beside it)")
      ->required();
  sub->add_option("--manifest", a->manifest, "Payload manifest.json")->required();
  sub->add_option("--asset", a->assets, "Asset name (repeatable; default: every asset)");
  sub->add_option("--out", a->out, "Folder for <asset>.safetensors outputs")
      ->capture_default_str();
  sub->add_option("--device", a->device, "auto | cuda | cpu")
      ->check(CLI::IsMember({"auto", "cuda", "cpu"}))
      ->capture_default_str();
  sub->add_option("--path", a->path,
                  "Execution path (DESIGN.md), optionally with +flag/-flag edits: " +
                      path_names())
      ->capture_default_str();
  sub->add_option("--enable", a->enable, "Turn an optimization flag on: " + flag_names());
  sub->add_option("--disable", a->disable, "Turn an optimization flag off");
  sub->add_option("--qualify-tokens", a->qualify_tokens,
                  "Null-context qualification: tokens per CFG branch to check (default: the "
                  "token counts of the assets to run)");
  sub->add_option("--qualify-m", a->qualify_m,
                  "Null-context qualification: candidate canonical M (default 1 64 128 256 512 "
                  "1024)");
  a->sampler.add_to(sub);
  sub->add_flag("--dump-first-forward", a->dump_first,
                "Also write x_T, v_cond, v_uncond of the first step");
  sub->add_option("--cfg-choice", a->cfg_choice,
                  cat("A bench result JSON that timed the path with and without ",
                      sparse3d::name(Flag::batched_cfg),
                      ": serial or batched CFG per asset, whichever it measured faster at the "
                      "asset's token count"));
  sub->add_option("--graph-choice", a->graph_choice,
                  cat("A bench result JSON that timed the path with and without ",
                      sparse3d::name(Flag::cuda_graphs),
                      ": capture CUDA graphs per asset where it measured that faster at the "
                      "asset's token count"));
  sub->add_option("--max-device-memory", a->max_mem_gib,
                  "Use at most this many GiB of device memory (0 = all)");

  return [a]() {
    sampler::SamplerOptions o = a->sampler.resolve();
    const sparse3d::ExecutionPlan plan = resolve_plan(a->path, a->enable, a->disable);
    o.apply(plan);
    S3D_CHECK(a->max_mem_gib >= 0, "--max-device-memory must be >= 0");
    // --cfg-choice, --graph-choice: this path's timings with the flag off and on, each from
    // one bench run; the flag is then chosen per asset.
    struct AutoFlag {
      Flag flag;
      std::string file;
      std::vector<sampler::FlagTimingPoint> points;
    };
    std::vector<AutoFlag> auto_flags;
    if (!a->cfg_choice.empty()) auto_flags.push_back({Flag::batched_cfg, a->cfg_choice, {}});
    if (!a->graph_choice.empty()) auto_flags.push_back({Flag::cuda_graphs, a->graph_choice, {}});
    for (auto& f : auto_flags) {
      sparse3d::ExecutionPlan off = plan, on = plan;
      off.disable(f.flag);
      on.enable(f.flag);
      f.points = bench::flag_timing_points(
          bench::result_from_json(io::read_json_file(f.file), f.file), off.label(), on.label(),
          f.file);
    }
    const bool cfg_auto = !a->cfg_choice.empty();

    const Device device = choose_device(a->device);
    cudaStream_t stream = nullptr;
    if (device == Device::CUDA) {
      S3D_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
      set_current_stream(stream);
    }
    model::ModelConfig cfg = model::read_config_file(a->checkpoint);
    const int64_t params = model::parameter_count(cfg);
    S3D_CHECK(device == Device::CUDA || params <= kCpuParameterLimit, "checkpoint ",
              a->checkpoint, " has ", params,
              " parameters: the CPU backend is a reference for small models (the tiny "
              "preset); run this checkpoint on a GPU");
    payload::Manifest manifest = payload::read_manifest(a->manifest);
    S3D_CHECK(manifest.cond_channels == cfg.cond_channels, "manifest ", a->manifest,
              " has conditions of ", manifest.cond_channels, " channels, but checkpoint ",
              a->checkpoint, " expects ", cfg.cond_channels);
    S3D_CHECK(manifest.concat_channels == cfg.in_channels - cfg.out_channels, "manifest ",
              a->manifest, " has ", manifest.concat_channels,
              " concat channels per token, but the checkpoint takes ", cfg.in_channels,
              " input channels for ", cfg.out_channels, " latent channels");
    std::vector<const payload::ManifestEntry*> todo;
    for (const auto& name : a->assets) {
      const payload::ManifestEntry* found = nullptr;
      for (const auto& e : manifest.assets)
        if (e.name == name) found = &e;
      S3D_CHECK(found, "--asset ", name, ": no such asset in ", a->manifest);
      todo.push_back(found);
    }
    if (a->assets.empty())
      for (const auto& e : manifest.assets) todo.push_back(&e);

    std::printf("loading %s (%lld parameters) on %s\n", a->checkpoint.c_str(),
                static_cast<long long>(params), device_name(device));
    model::SLatFlowModel m(model::load_checkpoint(a->checkpoint, device));
    std::filesystem::create_directories(a->out);
    std::printf("path %s; sampler: %d steps, rescale_t %g, cfg %g on t in [%g, %g], rescale %g, "
                "%s CFG\n",
                plan.label().c_str(), o.steps, o.rescale_t, o.guidance, o.interval_lo,
                o.interval_hi, o.guidance_rescale,
                cfg_auto ? "per-asset (--cfg-choice)"
                         : (o.flags.on(Flag::batched_cfg) ? "batched" : "serial"));
    if (device == Device::CUDA && !plan.unvalidated().empty()) {
      std::string flags;
      for (const Flag f : plan.unvalidated())
        flags += std::string(flags.empty() ? "" : ", ") + std::string(sparse3d::name(f));
      std::fprintf(stderr,
                   "warning: path %s uses flags whose GPU kernels have not been validated on a "
                   "GPU yet (%s); their contracts are tested on the CPU backend only\n",
                   plan.label().c_str(), flags.c_str());
    }

    // Null-context elimination: probe, check applicability and qualify once, at start-up.
    std::unique_ptr<model::NullContext> null_context;
    if (o.flags.on(Flag::null_context_exact) || o.flags.on(Flag::null_context_cache)) {
      model::NullContextOptions nco;
      nco.context_tokens = manifest.cond_tokens;
      nco.qualify_cache = o.flags.on(Flag::null_context_cache);
      nco.qualify_slices = o.flags.on(Flag::batched_cfg) || cfg_auto;
      nco.qualification.context_rows = {manifest.cond_tokens};
      nco.qualification.token_counts = a->qualify_tokens;
      if (a->qualify_tokens.empty())
        for (const auto* e : todo) nco.qualification.token_counts.push_back(e->tokens);
      if (!a->qualify_m.empty()) nco.qualification.candidate_m = a->qualify_m;
      auto t0 = std::chrono::steady_clock::now();
      null_context = std::make_unique<model::NullContext>(model::NullContext::build(m, nco));
      std::printf("%s  (start-up %.2f s)\n", null_context->report().c_str(),
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      o.null_context = null_context.get();
    }

    int failures = 0;
    for (const auto* e : todo) {
      payload::Asset asset = payload::read_asset(manifest, *e);
      const int64_t T = asset.coords.size(0);
      sampler::SamplerOptions oa = o;
      for (const auto& f : auto_flags) {
        sampler::FlagChoice choice = sampler::choose_flag(f.flag, f.points, T);
        if (f.flag == Flag::batched_cfg && choice.on) {
          try {
            check_memory(m, e->name, T, 1, manifest.cond_tokens, true,
                         o.flags.on(Flag::cond_kv_cache), a->max_mem_gib);
          } catch (const Error&) {
            choice.on = false;
            choice.reason += "; batched CFG would not fit in device memory: off";
          }
        }
        oa.flags.set(f.flag, choice.on);
        std::printf("[%s] %s\n", e->name.c_str(), choice.reason.c_str());
      }
      check_memory(m, e->name, T, 1, manifest.cond_tokens, oa.flags.on(Flag::batched_cfg),
                   o.flags.on(Flag::cond_kv_cache), a->max_mem_gib);
      sampler::Inputs in;
      in.coords = asset.coords;
      in.batch = 1;
      in.cond = asset.cond.reshape({1, asset.cond.size(0), asset.cond.size(1)});
      in.noise = Tensor::empty({T, cfg.out_channels}, DType::F32, Device::CPU);
      normal_fill(asset.noise_seed, 0, static_cast<uint64_t>(in.noise.numel()),
                  in.noise.data_as<float>());
      in.concat_cond = asset.concat_cond;
      if (device == Device::CUDA) DeviceAllocator::instance().reset_peak();
      reset_launch_counts();
      sampler::Output out = sampler::sample(
          m, in, oa, a->dump_first, [&](const sampler::StepRecord& r) {
            std::printf("[%s] step %2d/%d  t=%.4f -> %.4f  %s  elapsed %.3f s\n", e->name.c_str(),
                        r.index + 1, r.total, r.t, r.t_prev, r.cfg ? "cfg " : "cond",
                        r.elapsed_s);
            std::fflush(stdout);
          });
      int64_t non_finite = 0;
      for (float v : out.latent.to_floats()) non_finite += std::isfinite(v) ? 0 : 1;
      std::vector<std::pair<std::string, Tensor>> tensors = {{"latent", out.latent},
                                                             {"coords", asset.coords}};
      if (a->dump_first) {
        tensors.emplace_back("x_T", in.noise);
        if (out.first_v_cond.defined()) tensors.emplace_back("v_cond", out.first_v_cond);
        if (out.first_v_uncond.defined()) tensors.emplace_back("v_uncond", out.first_v_uncond);
      }
      const std::string path = (std::filesystem::path(a->out) / (e->name + ".safetensors")).string();
      io::write_safetensors(path, tensors,
                            {{"asset", e->name}, {"steps", std::to_string(o.steps)},
                             {"path", plan.label()},
                             {"cfg", oa.flags.on(Flag::batched_cfg) ? "batched" : "serial"},
                             {std::string(sparse3d::name(Flag::cuda_graphs)),
                              oa.flags.on(Flag::cuda_graphs) ? "on" : "off"}});
      LaunchCounts lc = launch_counts();
      std::printf("[%s] %lld tokens: set-up %.3f s + denoise loop %.3f s, %llu launches, peak "
                  "device memory %.2f GiB, %lld non-finite outputs -> %s\n",
                  e->name.c_str(), static_cast<long long>(T), out.setup_seconds, out.loop_seconds,
                  static_cast<unsigned long long>(lc.total),
                  device == Device::CUDA
                      ? gib(DeviceAllocator::instance().stats().peak_allocated_bytes)
                      : 0.0,
                  static_cast<long long>(non_finite), path.c_str());
      if (non_finite) ++failures;
    }
    std::printf("fallbacks:\n%s", contract::format_fallbacks(contract::fallback_counts()).c_str());
    S3D_CHECK(failures == 0, failures, " asset(s) produced non-finite latents");
    return 0;
  };
}

}  // namespace s3d::apps
