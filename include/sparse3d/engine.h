// sparse3d public API: the Engine (docs/API.md).
//
// An Engine is loaded once from a checkpoint (the released NAME.json + NAME.safetensors) and
// serves requests: sample() runs the whole flow-Euler CFG denoise loop, forward() one
// denoiser call for an external sampler. It owns its CUDA stream, its device allocator, its
// library plans (cuBLASLt, cuDNN), its null-context qualification state and its counters.
//
// Threads: one request at a time per Engine (concurrent calls on one Engine wait for each
// other); several Engines in one process may serve requests from different threads at once.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "sparse3d/flags.h"
#include "sparse3d/sampler_settings.h"
#include "sparse3d/types.h"

namespace sparse3d {

enum class DeviceChoice : uint8_t { Auto, CUDA, CPU };

// A device workspace shared by engines that never run at once, e.g. the flow models of one
// pipeline (EngineOptions::workspace): one caching allocator for their activations, library
// workspaces and CUDA-graph pools on one GPU, so that the blocks one engine's request freed
// serve the next engine's request, and one release_cache() gives them all back. Requests of
// engines sharing a workspace run one at a time (a second waits for the first; one started
// from inside another's callback is refused, as it could never start), and each ends with its
// device work finished, so that its blocks are free for the next whatever its stream. The
// memory counters of each engine (Counters::device_bytes_*) then read the shared allocator.
// Engines hold a reference: the workspace lives while any of them does.
class Workspace {
 public:
  explicit Workspace(int device_index = 0);  // throws without that CUDA device
  ~Workspace();
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;

  int device_index() const;
  // The cached blocks back to the driver, or to the memory source they came from (waits for
  // a request in flight); the bytes released.
  size_t release_cache();
  // New blocks come from `source` instead of the driver (DeviceMemorySource, types.h); an
  // empty `allocate` goes back to the driver. Blocks already taken go back where they came
  // from. Waits for a request in flight.
  void set_memory_source(DeviceMemorySource source);
  // The source's name, "" for the driver.
  std::string memory_source() const;
  size_t bytes_in_use() const;
  size_t bytes_reserved() const;
  size_t peak_bytes() const;  // in use, since the last reset_peak()
  void reset_peak();

  struct Impl;
  Impl& impl() { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

struct EngineOptions {
  // Execution path (a spec such as "beyond-cuda_graphs") and edits. Empty: the fastest
  // path whose contracts hold, default_path() (fast); on the CPU backend without
  // cuda_graphs, which it has no use for.
  std::string path;
  std::vector<Flag> enable, disable;
  DeviceChoice device = DeviceChoice::Auto;  // Auto: the GPU when there is one
  int device_index = 0;
  // Device memory the engine may use, GiB (0: all). A request that would not fit is refused
  // before it runs, with the estimate in the message.
  double max_device_memory_gib = 0;
  // Null-context qualification cache (docs/CONTRACTS.md). Empty: $SPARSE3D_CACHE_DIR, else
  // $XDG_CACHE_HOME/sparse3d, else $HOME/.cache/sparse3d. persist = false: memory only.
  std::string cache_dir;
  bool persist_qualification = true;
  // Candidate canonical M for the null-context cache (empty: 1 64 128 256 512 1024).
  std::vector<int64_t> qualify_m;
  // Start-up lines (qualification reports, cache hits and refusals); empty: silent.
  std::function<void(const std::string&)> log;
  // Sequence parallelism (docs/API.md, "Several GPUs"): the CUDA devices one request may be
  // split over, the engine's own first (it replaces device_index, which must then be 0 or
  // the same). Every listed device holds a copy of the weights; NCCL (libnccl.so.2) is
  // loaded when there are two or more. Empty or one device: one GPU. A request runs on
  // P <= devices.size() of them, P the largest count that divides the heads and leaves each
  // at least parallel_min_tokens tokens (RequestStats::devices says what was chosen and why).
  // A listed device that does not exist, or NCCL missing, is a counted fallback
  // ("sequence_parallel") to the devices that can run.
  std::vector<int> devices;
  int64_t parallel_min_tokens = 8192;
  // A workspace shared with other engines on the same GPU (null: the engine's own allocator).
  // Not with `devices` (several GPUs) or the CPU backend.
  std::shared_ptr<Workspace> workspace;
  // Hold each request's memory-costly flags to what the original PyTorch module would
  // allocate for the same request (its eager forward, one CFG branch at a time; the Python
  // drop-in's default): the condition K/V cache, then batched CFG, are dropped for a request
  // whose estimate is above that reference, each drop a counted fallback naming the sizes.
  // Nothing is refused for it: a request that does not fit the device still is, as always.
  bool fit_to_reference = false;
  // How the linear layers hold their weights (docs/DESIGN.md, "Weight formats"): "" or
  // "plain", the checkpoint's tensors as they are (every path's bits); "row_scaled", the test
  // format (bf16 weights scaled per output channel, f32 scales folded in after each GEMM;
  // tolerance 1e-2, not faster). Converted once at load, on the host; not with a borrowed
  // checkpoint (the weights are then copied). An unknown name is an error naming the known.
  std::string weight_format;
};

struct StepInfo {
  int index = 0;  // 0-based
  int total = 0;
  double t = 0, t_prev = 0;
  bool cfg = false;        // an unconditional forward ran this step
  double elapsed_s = 0;    // since the loop started, after the step finished on the device
  TensorView latent;       // x after this step, f32 [T, out]; valid during the callback only
};
using StepCallback = std::function<void(const StepInfo&)>;

// Instrumentation of one request (`sparse3d bench`): Off costs nothing; Library times every
// GEMM and attention call; Launches charges the time between launches to each op.
enum class Profile : uint8_t { Off, Library, Launches };

struct SampleRequest {
  TensorView coords;       // i32 [T, 4]: (batch, x, y, z), assets packed in batch order
  int batch = 1;           // B assets
  TensorView cond;         // bf16 or f32 [B, L, cond_channels]
  TensorView concat_cond;  // f32 [T, in - out] (texture models), or empty
  TensorView noise;        // f32 [T, out]: x at t = 1; empty: drawn from `seed`
  uint64_t seed = 0;       // the counter-based normal stream (docs/FORMATS.md)
  SamplerSettings sampler;
  std::optional<FlagSet> flags;  // this request's flags; default: the engine's
  TensorView out;          // optional caller-owned f32 [T, out] that receives the latent
  StepCallback on_step;
  // Asked after each step is queued (before the next): true stops the request, which then
  // waits for the work already queued and throws sparse3d::Error ("sample: interrupted after
  // step K of N"); `out` is not written. The Python binding sets it to look for a pending
  // signal (Ctrl-C) when sample() is called on the main thread. While it is set, a GPU request
  // keeps the host at most one step ahead of the device, so a stop waits for two steps at
  // most. Not asked for a request split over several devices (the ranks could not stop
  // together).
  std::function<bool()> stop;
  // Progress that never makes the device wait: called on the calling thread with the number
  // of steps the device has finished (done, out of total). On a GPU, after step k is queued
  // the host waits for step k - 1 (the device runs step k meanwhile) and reports k; the last
  // call, (total, total), follows the loop. While it or `stop` is set, the host stays at most
  // one step ahead of the device. On the CPU it follows each step. A request split over
  // several devices reports once, at its end. Unlike on_step (which synchronises after every
  // step to show the latent), it leaves the loop's speed as it is.
  std::function<void(int done, int total)> on_progress;
  bool keep_first_forward = false;  // also return step 1's v_cond and v_uncond
  Profile profile = Profile::Off;
  // Run on this cudaStream_t; null: the engine's own. cudaStreamLegacy or
  // cudaStreamPerThread (a default stream, e.g. PyTorch's): the engine's own stream, ordered
  // after the work already queued there and before the work queued after the call.
  void* cuda_stream = nullptr;
};

struct OpTime {
  uint64_t calls = 0;
  double seconds = 0;
  double flops = 0;
};

// Work done once per new shape and kept for later requests (RequestStats::first_use).
struct FirstUseCost {
  uint64_t count = 0;
  double seconds = 0;  // host time
};

struct RequestStats {
  std::string plan;             // the request's flags as a path label
  int64_t tokens = 0;
  double setup_seconds = 0;     // layouts, uploads, hoisted per-request work
  double loop_seconds = 0;      // the denoise loop, device-synchronised
  uint64_t launches = 0;        // kernels + library calls + graph replays
  uint64_t launches_before_loop = 0;
  std::map<std::string, uint64_t> launches_by_op;
  std::map<std::string, uint64_t> launches_before_loop_by_op;  // the set-up's part of each
  // Peak device memory during the request: bytes in tensors (as
  // torch.cuda.max_memory_allocated) and bytes held from the driver (as
  // max_memory_reserved: the caching allocator's free blocks and CUDA-graph pools included).
  size_t peak_device_bytes = 0;
  size_t peak_device_reserved_bytes = 0;
  int graphs_captured = 0;
  double graph_capture_seconds = 0;
  size_t graph_nodes = 0;
  std::map<std::string, OpTime> profile;  // by category (Library) or op (Launches)
  double request_seconds() const { return setup_seconds + loop_seconds; }
  // sample() only. The whole call as the caller waits for it (host clock from entry to
  // return; the loop is device-synchronised): request_seconds() plus the input checks, the
  // null-context work and the result's copy.
  double wall_seconds = 0;
  // The null-context probe and qualification this request ran (0 when it needed none, or
  // they were done by an earlier request: the probe once per condition length, a
  // qualification per token count and CFG mode).
  double null_context_seconds = 0;
  // Work done during this request once per new shape and kept for later ones, by kind:
  // "attention_graph" (a cuDNN SDPA graph for a new sequence-length bucket), "gemm_plan" (a
  // cuBLASLt plan for a new row count), "device_allocation" (a new block from the driver),
  // "gemm_plan_search" / "attention_plan_search" (tuned_gemm / tuned_attention). A repeat of
  // a request builds no graph or plan; it may allocate blocks (its CUDA graphs' private
  // pools). docs/CONTRACTS.md, "First requests".
  std::map<std::string, FirstUseCost> first_use;
  // The devices this request's forwards were split over (EngineOptions::devices), and why
  // that many ("2 of 2 devices (30227 tokens: 15113 per device)", "one device").
  int devices = 1;
  std::string devices_reason = "one device";
};

struct SampleResult {
  Array latent;                       // f32 [T, out]: `out` when given, else on the device
  Array first_v_cond, first_v_uncond;  // keep_first_forward only
  std::vector<StepInfo> steps;        // without latents
  RequestStats stats;
};

// One denoiser call v = model(x_t, t, cond) for an external sampler.
struct ForwardRequest {
  TensorView x;            // f32 or bf16 [T, out]: the noisy latent
  TensorView t;            // f32 [B]: 1000 * t per asset, as TRELLIS.2's samplers pass it
  TensorView coords;       // i32 [T, 4]
  int batch = 1;
  TensorView cond;         // bf16 or f32 [B, L, cond_channels]
  TensorView concat_cond;  // f32 [T, in - out] or empty
  std::optional<FlagSet> flags;
  TensorView out;          // optional caller-owned f32 [T, out]
  void* cuda_stream = nullptr;
  // As SampleRequest's; `stats`, when given, receives the forward's launches, profile and
  // time (as loop_seconds; the request's set-up, layouts and uploads, is left out) and the
  // call's peak device memory (`sparse3d profile`).
  Profile profile = Profile::Off;
  RequestStats* stats = nullptr;
};

// A model family the engine runs, as its registry has it (docs/DESIGN.md, "Model families").
struct FamilyInfo {
  std::string name;            // the checkpoint config's "name": "SLatFlowModel", ...
  std::string layout;          // "tokens" or "grid" (ModelInfo::layout)
  std::string sampler_preset;  // the settings a request that names none gets
  bool reads_rope_freq = true;  // false: the config's rope_freq is type-checked and ignored
};
// Every registered family, in registry order.
std::vector<FamilyInfo> model_families();

struct ModelInfo {
  std::string family;      // the checkpoint config's "name": "SLatFlowModel", ...
  // How the family's assets appear at this API: "tokens" (the caller names the voxels with
  // coords [T, 4]; latents [T, C]) or "grid" (an asset is the whole resolution^3 grid: coords
  // may be omitted, and latents are then volumes [B, C, R, R, R]).
  std::string layout;
  // The sampler settings a request gets from a client that names none ("released",
  // "released_sparse_structure": SamplerSettings::preset).
  std::string sampler_preset;
  std::string checkpoint;  // the NAME.json it was loaded from
  std::string content_hash;  // 16 hex digits over every tensor's name and bytes (and the format)
  std::string weight_format;  // EngineOptions::weight_format as loaded: "plain", "row_scaled"
  int resolution = 0, in_channels = 0, out_channels = 0, model_channels = 0;
  int cond_channels = 0, num_blocks = 0, num_heads = 0;
  int mlp_hidden = 0;  // the MLP's hidden width (model_channels * mlp_ratio)
  int64_t parameters = 0;
};

struct Counters {
  uint64_t requests = 0;
  uint64_t launches = 0;
  std::vector<FallbackCount> fallbacks;
  size_t device_bytes_in_use = 0, device_bytes_reserved = 0, peak_device_bytes = 0;
  uint64_t qualifications_run = 0;   // null-context qualifications computed
  uint64_t qualification_cache_hits = 0;
  uint64_t qualification_cache_refusals = 0;  // stale or corrupt entries not trusted
};

// Where an Engine's weights are and what moving them cost (Engine::offload / reload,
// docs/API.md "Residency"). Totals since the engine was made; reset_counters() keeps them.
struct Residency {
  bool resident = true;          // the weights are on the engine's device (false: offloaded)
  size_t weight_bytes = 0;       // the weights, in their run-time dtypes
  size_t host_copy_bytes = 0;    // the host copy kept after the first offload (pinned on a GPU)
  uint64_t offloads = 0, reloads = 0;
  size_t bytes_offloaded = 0;    // device -> host bytes copied (the first offload's alone)
  size_t bytes_reloaded = 0;     // host -> device bytes copied
  size_t device_bytes_released = 0;  // device memory the offloads returned to the driver
  double offload_seconds = 0, reload_seconds = 0;
  // Whose memory the weights are: "own copy", "borrowed in place" (the caller's tensors on
  // the engine's device, or on the host for the CPU backend; an offload makes a copy of the
  // engine's own and lets them go) or "borrowed host home" (InMemoryCheckpoint::borrow).
  std::string weights_source = "own copy";
};

// The null-context state per condition length L (docs/CONTRACTS.md).
struct QualificationState {
  int context_tokens = 0;             // L
  bool tuned_gemm = false;            // taken under searched GEMM plans (flag tuned_gemm)
  bool applicable = false;
  std::string reason;                 // why not, when not applicable
  std::vector<std::string> facts;
  struct Shape {
    int64_t tokens = 0;               // N, tokens per CFG branch
    bool batched = false;             // the batched-CFG checks too
    int64_t m = 0;                    // smallest candidate M that passed; 0 = none
    std::string source;               // "qualified" or "cache"
    std::string summary;
  };
  std::vector<Shape> shapes;
};

// A checkpoint held in memory, e.g. the state dict of the PyTorch module an Engine replaces:
// the NAME.json text and every tensor by its checkpoint name (bf16 or f32, host or device).
// Without `borrow` the views need to stay valid only during the constructor, which copies them.
//
// With `borrow` the engine keeps the caller's tensors as its weights instead of a copy of its
// own (one copy of the weights in the process, docs/API.md "Residency"), when every tensor
// has its run-time dtype (bf16 for the blocks' Linear layers, f32 for the rest): tensors on the
// engine's GPU are used in place (each must start at a 256-byte boundary, as the library plans
// assume); tensors on the host are, for an engine on a GPU, the home its weights are uploaded
// from and that offload() returns to without copying anything (the larger ones page-locked in
// place while the engine lives), and for the CPU backend the weights themselves. `keep_alive`
// is held for as long as the engine uses them; the caller must not change their values. When
// the tensors cannot be borrowed (another dtype, several devices, a tensor on another device
// than the engine's, an unaligned one), the engine copies them as without `borrow` and
// says why in its log; residency().weights_source tells which happened.
struct InMemoryCheckpoint {
  std::string config_json;
  std::vector<std::pair<std::string, TensorView>> tensors;
  std::string name = "in-memory checkpoint";  // how messages and ModelInfo name it
  bool borrow = false;
  std::shared_ptr<void> keep_alive;
};

class Engine {
 public:
  // Loads NAME.json + NAME.safetensors (strict: names, shapes, finite values).
  explicit Engine(const std::string& checkpoint_json, EngineOptions options = {});
  // The same from memory: the same checks, conversions and content hash as the file.
  explicit Engine(const InMemoryCheckpoint& checkpoint, EngineOptions options = {});
  ~Engine();
  Engine(Engine&&) noexcept;
  Engine& operator=(Engine&&) noexcept;
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  const ModelInfo& model() const;
  Device device() const;
  const ExecutionPlan& plan() const;  // the engine's default flags

  SampleResult sample(const SampleRequest& request);
  Array forward(const ForwardRequest& request);

  // Empty when a sample() of `tokens` tokens in `batch` assets with `cond_tokens` condition
  // tokens under `flags` fits the device memory the engine may use; else why not (the
  // message sample() would throw).
  std::string fits(int64_t tokens, int batch, int cond_tokens, const FlagSet& flags) const;

  // Builds, ahead of the first request, what a request at these token counts would build on
  // first use: cuDNN graphs, cuBLASLt plans, the allocator's blocks, and (null-context paths)
  // the qualification of these shapes for condition length `cond_tokens`.
  void warm_up(const std::vector<int64_t>& token_counts, int cond_tokens);

  // Frees the device memory the engine holds between requests, as a PyTorch module's .cpu()
  // does for its parameters: the weights are copied to pinned host memory (the first time;
  // the copy is kept, as the weights never change) and their device buffer freed, then the
  // allocator's cached blocks go back to the driver. Everything else is kept: library plans
  // and graphs, the null-context state and qualifications, the counters. reload() (or the
  // next request) brings the weights back, bit for bit: no result changes. On the CPU
  // backend the same moves run between host buffers. Both are no-ops when already done.
  void offload();
  void reload();
  Residency residency() const;
  // Returns the device memory the engine's allocator keeps cached between requests (the
  // blocks a finished request freed) to the driver, keeping the weights and everything built:
  // what a caller that shares the device with other work (PyTorch's own allocator, other
  // engines) calls after a request, so that its workspace is held only while it runs.
  // Returns the bytes released; a no-op on the CPU backend.
  size_t release_cache();

  Counters counters() const;
  void reset_counters();  // launches, fallbacks and the memory peak
  // The environment the engine's qualifications and measurements are valid for.
  std::vector<std::pair<std::string, std::string>> fingerprint() const;
  std::vector<QualificationState> qualification() const;

 private:
  struct Impl;
  friend struct EngineAccess;  // the library's own diagnostics (diagnostics.h) reach Impl
  std::unique_ptr<Impl> impl_;
};

// The engine's noise for `seed` (what SampleRequest draws when `noise` is empty): standard
// normal f32 [rows, cols] on the host, from element `offset` of the seed's stream on (a
// second asset drawn from one seed, as the bench's packed copies are, starts past the first).
Array draw_noise(uint64_t seed, int64_t rows, int64_t cols, uint64_t offset = 0);

// The sampler's schedule t_0 = 1 > ... > t_steps = 0 (steps + 1 values), e.g. to know ahead
// of a request on which steps CFG applies.
std::vector<double> timesteps(const SamplerSettings& settings);

// The environment fingerprint of this process and its default device, without an Engine
// (what `sparse3d info` prints): the facts Engine::fingerprint() gives, as "key: value" lines
// for people (json = false) or as one JSON object.
std::string environment_report(bool json = false);

}  // namespace sparse3d
