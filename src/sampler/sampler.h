// Flow-matching Euler sampler with classifier-free guidance, as TRELLIS.2's
// FlowEulerGuidanceIntervalSampler: schedule, guidance interval, guidance rescale, and CFG
// run serially (two forwards, as the original) or batched (one forward over 2B assets).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/cuda_util.h"
#include "core/plan_search.h"
#include "core/tensor.h"
#include "model/null_context.h"
#include "model/trunk/sequence_parallel.h"
#include "model/trunk/transformer.h"
#include "sparse3d/flags.h"
#include "sparse3d/sampler_settings.h"

namespace s3d::sampler {

// The public sampler settings (steps, rescale_t, guidance, interval, guidance rescale,
// sigma_min; include/sparse3d/sampler_settings.h) plus what a request's loop needs besides. Default:
// the benchmark protocol.
struct SamplerOptions : sparse3d::SamplerSettings {
  SamplerOptions() : sparse3d::SamplerSettings(sparse3d::SamplerSettings::protocol()) {}
  SamplerOptions(const sparse3d::SamplerSettings& s, const sparse3d::FlagSet& f)
      : sparse3d::SamplerSettings(s), flags(f) {}

  // The request's optimization flags (include/sparse3d/flags.h): batched CFG, the null
  // context (needs `null_context`), the condition K/V cache, step tables, CUDA graphs and
  // the fused kernels, which every forward of the request reads.
  sparse3d::FlagSet flags;
  // Where the searched GEMM and attention plans (tuned_gemm, tuned_attention) are kept: the
  // engine's qualification cache; null: nowhere but this process.
  plan_search::Store* plan_store = nullptr;
  const model::NullContext* null_context = nullptr;
  // Sequence parallelism (model/trunk/sequence_parallel.h): every forward of the request split
  // over the group's ranks, or null for one device. A request with fewer tokens than ranks is
  // refused by it; CUDA graphs are not captured over several ranks (a counted fallback).
  const model::SequenceParallel* parallel = nullptr;
  // Guidance rescale's std (ModelSummary::unbiased_rescale_std): sample() sets it from the
  // model's family (the dense family divides by N - 1, as its original does).
  bool unbiased_rescale_std = false;
  // SampleRequest::stop: asked after each step is queued; true ends the loop with an error.
  std::function<bool()> stop;
  // SampleRequest::on_progress: steps the device has finished, reported without waiting for
  // the one just queued.
  std::function<void(int done, int total)> progress;

  // Sets `flags` from an execution plan.
  void apply(const sparse3d::ExecutionPlan& plan);

  // docs/BENCHMARK.md's protocol: 15 steps, rescale_t 3, g 7.5 on every step.
  static SamplerOptions protocol();
  // The released shape-model defaults: 12 steps, g 7.5, interval [0.6, 1], rescale 0.5.
  static SamplerOptions released();
};

// t_k for k = 0..steps: s = linspace(1, 0, steps + 1), t = r s / (1 + (r - 1) s), in double.
std::vector<double> timesteps(int steps, double rescale_t);

struct Inputs {
  Tensor coords;       // i32 [T, 4] host, B assets packed in batch order
  int batch = 1;
  Tensor cond;         // bf16 or f32 [B, L, cond_channels], host
  Tensor noise;        // f32 [T, out_channels], host: x at t = 1
  Tensor concat_cond;  // f32 [T, in - out] host (texture models) or undefined
};

// Several requests as one (multi-asset batching): assets in order, coordinates' batch
// indices renumbered, conditions, noise and concat_cond stacked. Conditions must share L and
// the channel counts. The latent of asset i is rows [offset_i, offset_i + T_i) of the packed
// result (pack_offsets).
Inputs pack(const std::vector<Inputs>& requests);
std::vector<int64_t> pack_offsets(const std::vector<Inputs>& requests);

struct StepRecord {
  int index = 0;        // 0-based
  int total = 0;
  double t = 0, t_prev = 0;
  bool cfg = false;     // an unconditional forward ran
  double elapsed_s = 0; // since the loop started, after the step finished on the device
};

struct Output {
  Tensor latent;                        // f32 [T, out], on the model's device
  Tensor first_v_cond, first_v_uncond;  // f32 [T, out], on the model's device, when asked for
  std::vector<StepRecord> steps;
  double loop_seconds = 0;              // the whole denoise loop, device-synchronised
  // The request's set-up before the loop, device-synchronised: layouts, the condition's
  // upload, and the per-request work the fast paths hoist out of the loop (condition K/V,
  // step tables). A request's latency is both (request_seconds); `sparse3d bench` times that.
  double setup_seconds = 0;
  double request_seconds() const { return setup_seconds + loop_seconds; }
  // The process's launch counter (core/cuda_util.h) when the loop started: what the
  // request's set-up (layouts, condition K/V cache, ...) had launched by then, for callers
  // that scale a shorter loop's counts to a whole loop.
  LaunchCounts launches_before_loop;
  // cuda_graphs: graphs captured in this loop, their capture + instantiation time (inside
  // loop_seconds) and their nodes.
  int graphs_captured = 0;
  double graph_capture_seconds = 0;
  size_t graph_nodes = 0;
};

// Called after each step with the step and the latent x after it (on the model's device).
using StepCallback = std::function<void(const StepRecord&, const Tensor& x)>;

// Runs the denoise loop on the model's device. `keep_first_forward` returns the first
// step's conditional and unconditional denoiser outputs (for comparisons with the oracle).
Output sample(const model::Transformer& model, const Inputs& inputs,
              const SamplerOptions& options, bool keep_first_forward = false,
              const StepCallback& on_step = nullptr);

}  // namespace s3d::sampler
