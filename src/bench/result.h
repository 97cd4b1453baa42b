// What `sparse3d bench` measured: every number of one run, from which stats.h derives the
// figures and report.h writes the JSON, the markdown report and the SVG plot.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "io/json.h"
#include "sparse3d/diagnostics.h"
#include "sparse3d/flags.h"

namespace s3d::bench {

struct AssetInfo {
  std::string name;
  int64_t tokens = 0;
  std::string set;  // "default" or "long-tail"
};

// What the engine counted during one request, or summed over the timed repeats
// (Engine::counters() before and after): null-context qualifications computed and restored
// from the qualification cache, and fast paths refused (the fallbacks' counts summed).
struct RequestCounters {
  uint64_t qualifications_run = 0;
  uint64_t qualification_cache_hits = 0;
  uint64_t fallbacks = 0;
};

// One (path, asset) cell: every timed repeat of the whole request, and what one extra,
// instrumented loop counted.
struct Cell {
  std::string path;   // execution path or baseline name ("pure_eager", "torch_eager", ...)
  std::string asset;
  // One per repeat, CUDA-synchronised wall time of the whole request: the sampler's set-up
  // (with the work a path hoists out of the loop) + the denoise loop. (Named for the loop;
  // results before 2026-11-29's third session timed the loop alone.)
  std::vector<double> loop_seconds;
  std::vector<double> setup_seconds;  // the set-up part of each repeat (empty: not recorded)
  uint64_t launches = 0;       // kernel launches + library calls per denoise loop (0 = not counted)
  std::map<std::string, uint64_t> launches_by_op;
  // Peak device memory during the request (0 = not measured): bytes in tensors (as
  // torch.cuda.max_memory_allocated) and bytes held from the driver (max_memory_reserved).
  size_t peak_bytes = 0;
  size_t peak_reserved_bytes = 0;
  // Device-wide (cudaMemGetInfo, read every 2 ms: every allocation on the device, library
  // workspaces and CUDA-graph memory included): the weights plus the highest reading during
  // the request above the reading before it, the request starting with nothing cached (an
  // engine path's cache released; PyTorch's emptied). 0 = not measured.
  size_t device_peak_bytes = 0;
  double attention_seconds = 0;  // GPU time inside attention calls (instrumented loop)
  double gemm_seconds = 0;       // GPU time inside GEMM calls (instrumented loop)
  double attention_flops = 0;    // per denoise loop
  double gemm_flops = 0;
  // cuda_graphs, from the unprofiled whole loop: graphs captured, their capture +
  // instantiation time (part of the request's time) and their nodes.
  int graphs_captured = 0;
  double graph_capture_seconds = 0;
  size_t graph_nodes = 0;
  // The devices the request was split over (RequestStats::devices; 1 before 2026-12-01).
  int devices = 1;
  // The service protocol (bench --protocol service|both; docs/BENCHMARK.md): this asset's
  // first request on the path's fresh engine, after one warm-up request at a token count
  // outside the asset set: host wall time of the whole public call (qualification, plan
  // builds and graph captures included), and the engine's own split of it (RequestStats:
  // the sampler's set-up and loop; the rest of the call is outside both). A baseline's
  // first call after its own warm-up. nullopt: not measured (repeated protocol only, or a
  // result written before the service protocol).
  std::optional<double> first_request_seconds;
  double first_request_setup_seconds = 0, first_request_loop_seconds = 0;
  std::optional<RequestCounters> first_request_counters;
  // Per timed repeat, the whole call's host wall time as for first_request_seconds, so that
  // the two compare like with like (empty: not recorded); and the engine's counters summed
  // over the repeats (all 0 on a warm engine).
  std::vector<double> request_wall_seconds;
  std::optional<RequestCounters> repeat_counters;
};

// The measured library peaks that define the ideal time.
struct Peaks {
  double attention_tflops = 0;  // cuDNN SDPA, bf16, the model's head shape
  double gemm_tflops = 0;       // cuBLASLt bf16 at the MLP shape
  std::string attention_shape, gemm_shape;
};

// Leave-one-out: the reference configuration has every flag in `flags` on; each row
// disables one. The JSON spells the flags by name (sparse3d::name / parse_flag).
struct Ablation {
  std::string reference_path;                 // e.g. "beyond" with all its flags
  std::vector<sparse3d::Flag> flags;
  std::map<sparse3d::Flag, int64_t> calls_per_iteration;  // flag -> calls it affects per step
  std::map<sparse3d::Flag, std::string> variant_path;     // flag -> path measured with it off
};

// A baseline that could not run (torch.compile failing, say) is kept with the reason.
struct BaselineStatus {
  std::string name;
  bool ran = false;
  std::string reason;
};

// Multi-asset batching (bench --batch K): K copies of one asset (each with its own noise)
// packed into one request, timed as whole denoise loops. All K finish together, so the
// latency of each asset is the loop time and the throughput K / loop time.
struct ThroughputCell {
  std::string path;
  std::string asset;
  int batch = 1;                     // K
  std::vector<double> loop_seconds;  // one per repeat
  size_t peak_bytes = 0;
};

// bench --devices 0,1 --queue: the assets, each once in manifest order, served as a queue by
// P engines of one GPU each (each takes the next asset as soon as it is free: "independent")
// or by one engine split over the P GPUs (one asset at a time: "split"), each engine fresh
// after one warm-up request, as a service meets them.
struct QueueRun {
  std::string path;
  std::string mode;                      // "independent" or "split"
  int engines = 1;
  int devices_per_engine = 1;
  double wall_seconds = 0;               // the queue's first request to its last result
  std::vector<double> latency_seconds;   // per asset in manifest order: its whole call
};

struct BenchResult {
  io::Json fingerprint;
  io::Json settings;               // sampler, warm-up, repeats, checkpoint, manifest
  std::string date;                // ISO 8601, UTC
  std::vector<AssetInfo> assets;   // in manifest order
  // In report order; the first is the reference. Each is an execution plan's label
  // (sparse3d::ExecutionPlan::label, "#N" appended to a plan measured again) or the name of
  // a baseline in `baselines`.
  std::vector<std::string> paths;
  std::vector<Cell> cells;
  Peaks peaks;
  Ablation ablation;               // empty flags = no ablation run
  std::vector<BaselineStatus> baselines;
  // Fast paths refused during the run (Engine::counters()), and the null-context start-up
  // report (applicability, which M qualified and which failed); empty when not used.
  std::vector<sparse3d::FallbackCount> fallbacks;
  std::string null_context;
  std::vector<ThroughputCell> throughput;  // empty unless bench --batch
  std::vector<QueueRun> queue;             // empty unless bench --devices ... --queue
  // Every cuBLASLt/cuDNN shape a searched plan was chosen for (tuned_gemm, tuned_attention),
  // searched or restored from the cache; empty when neither flag ran.
  std::vector<sparse3d::SearchedPlan> searched_plans;
};

}  // namespace s3d::bench
