// One bench run's state, shared by the runner's two halves: runner.cpp (plans, settings, the
// repeated protocol, the baseline) and service_protocol.cpp (the per-path engines and each
// asset's first request). Internal to the bench.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bench/result.h"
#include "bench/runner.h"
#include "core/tensor.h"
#include "payload/payload.h"
#include "sparse3d/engine.h"

namespace s3d::bench {

struct Prepared {
  AssetInfo info;
  payload::Asset asset;
  Tensor cond;  // [1, L, C]
};

// A folder made empty for one engine's qualification cache and removed, with whatever the
// engine wrote into it, when this goes (after the engine, which is declared after it).
class ScratchFolder {
 public:
  explicit ScratchFolder(const std::filesystem::path& parent);
  ~ScratchFolder();
  ScratchFolder(const ScratchFolder&) = delete;
  ScratchFolder& operator=(const ScratchFolder&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// An engine of the run: the repeated protocol's one shared engine (no cache folder), or a
// path's own engine in the service protocol (its cache folder, emptied first).
struct EngineSlot {
  std::unique_ptr<ScratchFolder> cache;
  std::optional<sparse3d::Engine> engine;  // destroyed before its cache folder
};

struct Run {
  const BenchOptions& o;
  const Log& log;
  BenchResult& r;
  std::vector<sparse3d::ExecutionPlan> plans;
  std::vector<bool> ablation_variant;  // per plan: a leave-one-out variant
  // Per plan: EngineOptions::devices of its engine (empty: the default device). With
  // --devices 0,1 every requested path is measured twice: "PATH" on the first device alone
  // and "PATH@0,1" split over the listed ones.
  std::vector<std::vector<int>> plan_devices;
  payload::Manifest manifest;
  std::vector<Prepared> assets;
  std::vector<bool> ablated_asset;     // per asset: the leave-one-out variants run on it
  int instrument_steps = 0;
  double instrument_scale = 1;
  std::map<std::pair<size_t, size_t>, Cell> cells;  // (path, asset)
  // One slot (repeated protocol only) or one per requested path (service): engine_of[pi]
  // is plan pi's slot; a leave-one-out variant runs on its reference path's engine.
  std::vector<std::unique_ptr<EngineSlot>> slots;
  std::vector<size_t> engine_of;
  // Whole-loop seconds per cell known so far (first requests, warm-up loops): the estimate
  // of the measurement's length.
  std::map<std::pair<size_t, size_t>, double> loop_estimate;
  int64_t warmup_tokens = 0;  // the service protocol's warm-up (0: a dense model's copies)
  std::string warmup_what;    // the warm-up request in words, for the settings

  Run(const BenchOptions& options, const Log& l, BenchResult& result)
      : o(options), log(l), r(result) {}

  sparse3d::Engine& engine(size_t pi) { return *slots[engine_of[pi]]->engine; }

  // Which (path, asset) cells run: the leave-one-out variants only on --ablate-assets.
  bool runs(size_t pi, size_t ai) const { return !ablation_variant[pi] || ablated_asset[ai]; }

  // The request of asset `ai` under plan `pi`: the asset's own noise (drawn from its seed).
  sparse3d::SampleRequest request(size_t pi, size_t ai) const;
  // The cell of (pi, ai), named on first use.
  Cell& cell(size_t pi, size_t ai);
};

// The whole public call as a caller waits for it, and what the engine counted meanwhile.
struct TimedRequest {
  sparse3d::RequestStats stats;
  double wall_seconds = 0;
  RequestCounters counters;
};
TimedRequest timed_request(sparse3d::Engine& engine, const sparse3d::SampleRequest& q);

// The engine options of plan pi's engine: what every engine of the run shares (device,
// memory limit, candidate M, the log) and the plan's devices.
sparse3d::EngineOptions engine_options(const Run& run, size_t pi);

// The PyTorch implementation under tools/, eager or compiled, timed by its own loop with
// the same rules (warm-up, CUDA-synchronised whole-loop wall time, repeats) and, under the
// service protocol, its warm-up at `warmup_tokens` (0: a dense model's two copies) and each
// asset's first call first (torch_baseline.cpp). Adds its cells, or why it did not run.
void run_torch_baseline(const BenchOptions& o, const std::vector<Prepared>& assets,
                        int64_t warmup_tokens, bool compile, BenchResult& r, const Log& log);

// The service protocol for every requested path, in order: a fresh engine with an empty
// cache folder, the warm-up request, then each asset's first request into its cell. Fills
// run.slots and run.engine_of (a leave-one-out variant on its reference path's engine).
void first_requests(Run& run);
// bench --devices ... --queue: the queue served by independent one-GPU engines and by one
// split engine (QueueRun), the first requested path.
void serve_queue(Run& run);

}  // namespace s3d::bench
