// Engine::Impl: what one Engine owns (include/sparse3d/engine.h). Internal to src/engine.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <tuple>

#include "core/allocator.h"
#include "core/context.h"
#include "core/tensor.h"
#include "engine/qualification_cache.h"
#include "model/checkpoint.h"
#include "model/null_context.h"
#include "model/trunk/sequence_parallel.h"
#include "model/trunk/transformer.h"
#include "parallel/group.h"
#include "sampler/sampler.h"
#include "sparse3d/engine.h"

namespace sparse3d {

// A Workspace's state (include/sparse3d/engine.h): the shared allocator, and the lock that
// lets one request of its engines run at a time (with the thread holding it, as Impl::holder).
struct Workspace::Impl {
  int device = 0;
  std::shared_ptr<s3d::DeviceAllocator> allocator;
  std::mutex run;
  std::atomic<std::thread::id> holder{};
};

// Holds a workspace's run lock for a scope (null: nothing): refuses at once on a thread that
// holds it already (a callback of a request of an engine sharing it, which could never end);
// on release waits for the device's work, so that the blocks the holder freed are free.
class WorkspaceHold {
 public:
  WorkspaceHold(Workspace::Impl* workspace, const char* call);
  ~WorkspaceHold();
  WorkspaceHold(const WorkspaceHold&) = delete;
  WorkspaceHold& operator=(const WorkspaceHold&) = delete;

 private:
  Workspace::Impl* workspace_;
};

struct Engine::Impl {
  EngineOptions options;
  // EngineOptions::workspace's state (null: the engine's own allocator, no shared lock).
  Workspace::Impl* workspace = nullptr;
  Device device = Device::CPU;
  ExecutionPlan plan;
  std::unique_ptr<s3d::Context> context;  // stream, allocator, counters, library state
  cudaStream_t own_stream = nullptr;
  std::unique_ptr<s3d::model::Transformer> model;
  ModelInfo info;
  s3d::engine::QualificationCache cache;
  // Null-context state per condition length L: the probe once, a qualification per token count.
  // Null-context state per (L, tuned_gemm): with searched GEMM plans the projections that
  // make v0 and the cached rows, and the reference rows they are qualified against, may run
  // other algorithms, so a qualification holds only under the plan policy it was taken with.
  std::map<std::pair<int, bool>, std::unique_ptr<s3d::model::NullContext>> null_contexts;
  std::mutex mu;  // one request at a time
  // The thread holding `mu` (a default id when none), set by EngineLock: a call made on that
  // thread comes from inside the engine's own running request (a callback).
  std::atomic<std::thread::id> holder{};
  uint64_t requests = 0;
  uint64_t qualifications_run = 0;
  size_t peak_device_bytes = 0;

  // Sequence parallelism (parallel.cpp; EngineOptions::devices). Rank 0 is the engine's own
  // context and model; ranks holds one context (own stream) and model replica per further
  // device that exists. The groups (NCCL over the first P ranks) are made at first use.
  struct Rank {
    int device = 0;
    std::unique_ptr<s3d::Context> context;
    cudaStream_t stream = nullptr;
    std::unique_ptr<s3d::model::Transformer> model;
  };
  std::vector<Rank> ranks;
  std::string ranks_missing;  // why fewer devices than listed can run ("" when all can)
  struct Split {
    std::unique_ptr<s3d::parallel::Group> group;
    std::unique_ptr<s3d::model::SequenceParallel> forward;
  };
  std::map<int, Split> splits;  // by P
  // Checks EngineOptions::devices and loads a replica of `host` on every further device.
  void set_up_ranks(const s3d::model::Checkpoint& host);
  // The split a request of `tokens` tokens runs with (null: one device), recorded in `stats`;
  // devices it cannot use are counted fallbacks.
  const s3d::model::SequenceParallel* split_for(int64_t tokens, RequestStats& stats);
  void release_ranks();
  // Moves what the further devices' contexts counted (fallbacks of their ops) into the
  // engine's own counters, so that Engine::counters() shows every device's.
  void gather_rank_fallbacks();

  // Reads the checkpoint (`read`, on the host, while CUDA starts on another thread) and
  // uploads it; `checkpoint` names it (a NAME.json path, or what an in-memory one is called).
  Impl(const std::string& checkpoint, const std::function<s3d::model::Checkpoint()>& read,
       EngineOptions opts);
  ~Impl();
  // What the destructor frees (every device's model, streams and cached memory); also run when
  // construction fails part way. Leaves the Impl empty.
  void release();

  void log(const std::string& line) const;
  // The request's flags: its own or the engine's, checked against the backend.
  FlagSet flags_for(const std::optional<FlagSet>& requested) const;
  // The NullContext for condition length L (its probe verdict from the cache when it holds a
  // trusted entry), with what a request of N tokens per branch in this CFG mode needs
  // qualified: the cached row (want_cache) and, in batched CFG, the slices.
  const s3d::model::NullContext& null_context(int cond_tokens, int64_t tokens, bool tuned_gemm,
                                              bool batched, bool want_cache);
  // The op plan the null context is probed and qualified under: the requests' GEMM algorithm
  // (searched with tuned_gemm, kept in the cache), the reference elsewhere.
  s3d::ops::OpPlan null_context_plan(bool tuned_gemm);
  // Refuses, before anything runs, a request whose activations cannot fit, and on the CPU
  // backend one of more than kCpuMaxTokens tokens.
  void check_memory(int64_t tokens, int batch, int cond_tokens, const FlagSet& flags) const;
  static constexpr int64_t kCpuMaxTokens = int64_t{1} << 17;
  // Estimated activation bytes of a request with these flags, and what the device (or the
  // EngineOptions::max_device_memory_gib cap) has left for them.
  size_t memory_need(int64_t tokens, int batch, int cond_tokens, const FlagSet& flags) const;
  size_t memory_available() const;
  // The request's flags with the memory-costly ones dropped, in order, until the estimate
  // fits: cond_kv_cache (bitwise, so dropping it changes no value), then batched_cfg (serial
  // CFG, the reference's mode). Each drop is a counted fallback naming the sizes. What still
  // does not fit is refused by check_memory.
  FlagSet fit_to_memory(int64_t tokens, int batch, int cond_tokens, FlagSet flags) const;

  SampleResult sample(const SampleRequest& r);
  Array forward(const ForwardRequest& r);
  void warm_up(const std::vector<int64_t>& token_counts, int cond_tokens);

  // Residency (residency.cpp; Engine::offload, reload). reload() returns at once when the
  // weights are on the device: every request calls it first.
  Residency moves;  // the totals; `resident` and the sizes are read from the model
  void offload();
  void reload();

 private:
  // sample()'s steps (requests.cpp).
  // The request's inputs, every check done in the order they fire (the settings and the
  // shapes, then the memory the shapes need, then the values) before any work on its behalf.
  struct SampleInputs;
  SampleInputs check_sample(const SampleRequest& r) const;
  // Sets the null context `o` runs with (probed and qualified as needed), or drops the null
  // flags when no step runs the unconditional branch. Returns the seconds a probe or a
  // qualification took, 0 when none ran.
  double use_null_context(s3d::sampler::SamplerOptions& o, const FlagSet& flags,
                          int cond_tokens, int64_t tokens);
  // Runs the sampler on `s.in`, profiled, and puts its steps and stats in `result`.
  s3d::sampler::Output run_sampler(const SampleRequest& r, const SampleInputs& s,
                                   const s3d::sampler::SamplerOptions& o, const FlagSet& flags,
                                   SampleResult& result);
};

// Engine::impl_ for the diagnostics (diagnostics.cpp), which are free functions.
struct EngineAccess {
  using Impl = Engine::Impl;
  static Impl& of(Engine& e) { return *e.impl_; }
};

// What a public call does with the engine's state, for EngineLock.
enum class Access { Read, Write };

// The lock of one public call: one request at a time per engine (Impl::mu), and the thread
// holding it recorded in Impl::holder. A request calls the caller's code while it holds the
// lock (SampleRequest::on_step, EngineOptions::log, the message sink), and that code may call
// the same engine on the same thread: waiting for the lock there would wait forever (a
// std::mutex is not recursive, and Ctrl-C cannot interrupt the wait). Such a call is told
// apart by the thread id: a Read call (counters, fits, qualification, fingerprint,
// residency) runs without the lock, which is safe because the request that holds it is
// paused in that callback until the call returns; a Write call (a request, warm-up,
// offload, reload, reset_counters) throws an Error naming `call` at once. Calls from other
// threads wait for the lock as before.
class EngineLock {
 public:
  EngineLock(EngineAccess::Impl& impl, const char* call, Access access);
  ~EngineLock();
  EngineLock(const EngineLock&) = delete;
  EngineLock& operator=(const EngineLock&) = delete;

 private:
  EngineAccess::Impl& impl_;
  bool owns_ = false;  // false for a Read call from inside a callback: nothing to release
  std::optional<WorkspaceHold> workspace_;  // a Write call of an engine sharing a workspace
};

// Runs the engine's work on `stream` (or the engine's own) for the scope's lifetime. The
// default streams (cudaStreamLegacy, cudaStreamPerThread: what PyTorch's default stream is)
// cannot hold a CUDA graph capture: the work runs on the engine's own stream, ordered after
// the caller's work on entry and before it on exit by events.
class StreamScope {
 public:
  StreamScope(s3d::Context& context, void* stream, cudaStream_t own);
  ~StreamScope();

 private:
  s3d::Context& context_;
  cudaStream_t previous_;
  cudaStream_t join_ = nullptr;  // the caller's default stream, joined on exit
  cudaStream_t own_ = nullptr;
  cudaEvent_t event_ = nullptr;
};

// Views <-> tensors (views.cpp). `what` names the argument in errors.
s3d::Tensor borrow(const TensorView& view, const char* what);
Array array_of(const s3d::Tensor& tensor);
// Copies `src` into the caller's `out` (checked: dtype f32, shape, device).
void copy_into_view(const s3d::Tensor& src, const TensorView& out, const char* what);

}  // namespace sparse3d
