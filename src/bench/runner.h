// The measurement behind `sparse3d bench` (docs/BENCHMARK.md), a client of the
// public Engine API (include/sparse3d/) like any other: the service protocol (each path on a
// fresh engine with an empty qualification cache: one warm-up request at a token count
// outside the asset set, then each asset's first request), then the repeated protocol (whole
// denoise loops per (path, asset), repeats interleaved across paths and assets so that drift
// hits all paths alike, one extra instrumented loop per cell for launches, peak memory and
// the attention/GEMM split), the libraries' measured peaks for the ideal time, leave-one-out
// ablation, and the PyTorch baseline run by the same rules in the same order.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "bench/result.h"
#include "sparse3d/engine.h"

namespace s3d::bench {

// docs/BENCHMARK.md, "Protocols". Both: the service protocol, then the repeated one on the
// same engines.
enum class Protocol : uint8_t { Repeated, Service, Both };
Protocol parse_protocol(const std::string& name);  // "repeated" | "service" | "both"
const char* protocol_name(Protocol p);

// The service protocol's warm-up token count: `requested` when > 0 (an error when an asset
// has that many tokens or the grid has fewer cells), else 3/4 of the smallest asset's count,
// moved up past any asset's count when that is 0 or taken.
int64_t service_warmup_tokens(const std::vector<int64_t>& asset_tokens, int64_t requested,
                              int64_t grid_cells);

struct BenchOptions {
  std::string checkpoint;
  std::string manifest;
  std::vector<std::string> assets = {"default"};  // names, or a set: default | long-tail | all
  // Execution plan specs (sparse3d::ExecutionPlan::parse): a path, then +flag/-flag edits.
  // Default: the library's default path (sparse3d::default_path(), as `sparse3d run`).
  std::vector<std::string> paths = {std::string(sparse3d::default_path())};
  sparse3d::SamplerSettings sampler;  // the flags come from each path's plan
  int warmup = 1;                   // one-step warm-up loops per (path, asset)
  int repeats = 3;
  bool ablate = false;              // leave-one-out over the last path's flags
  // Assets the leave-one-out variants run on (names or sets; empty: every asset).
  std::vector<std::string> ablate_assets;
  // Leave out only these flags (empty: every flag of the last path); each must be on in it.
  std::vector<std::string> ablate_flags;
  // Steps of the instrumented loop (0: all). Fewer steps need CFG on every step (the
  // protocol), so that every step does the same work; its counts and times are then scaled
  // by steps / instrument_steps.
  int instrument_steps = 0;
  // Multi-asset batching: for each K > 1, K copies of every asset (own noise
  // each) packed into one request and timed per path, after the regular cells.
  std::vector<int> batch_sizes;
  // Measured paths (labels) that the report also compares every path with.
  std::vector<std::string> also_compare;
  bool measure_peaks = true;
  // Null-context qualification: the engine qualifies every token count a request uses on
  // its first use (the warm-up loops); `qualify_tokens` adds shapes qualified ahead of them
  // (Engine::warm_up). Candidate M: EngineOptions::qualify_m (empty: the engine's default).
  std::vector<int64_t> qualify_tokens;
  std::vector<int64_t> qualify_m;
  // EngineOptions::max_device_memory_gib (0: all): under a limit the engine drops the
  // memory-costly flags a request would not fit with (counted, and the cell's path label
  // says which).
  double max_device_memory_gib = 0;
  // EngineOptions::devices: the GPUs a request may be split over (empty: one).
  std::vector<int> devices;
  // With devices: also serve the assets as a queue, by one-GPU engines and by one split
  // engine (BenchResult::queue).
  bool queue = false;
  Protocol protocol = Protocol::Both;
  // The service protocol's warm-up request (0: service_warmup_tokens' choice) with the first
  // asset's condition: the first `warmup_tokens` tokens of the largest asset, or, for more
  // tokens than it has, the first voxels of the grid in raster order. A dense model's
  // requests are whole grids: its warm-up is two copies of the first asset in one request.
  int64_t warmup_tokens = 0;
  // CUDA for timing; CPU runs the same protocol on the CPU backend (a check of the bench
  // itself: no library peaks, and its times say nothing about the GPU).
  sparse3d::DeviceChoice device = sparse3d::DeviceChoice::CUDA;
  std::string torch_script;         // tools/torch_ref/run.py; empty: no external baseline
  bool torch_compile = false;       // also run the baseline under torch.compile
  std::string python = "python3";
  // Scratch for the baseline's timing files and the service protocol's qualification cache
  // folders (each made empty, and removed at the end).
  std::string work_dir = "/tmp";
  // Called with the engine's results before the baseline runs (to save them early).
  std::function<void(const BenchResult&)> on_engine_done;
};

using Log = std::function<void(const std::string&)>;

BenchResult run_bench(const BenchOptions& options, const Log& log);

}  // namespace s3d::bench
