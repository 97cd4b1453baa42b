// Engine::Impl: what one Engine owns (include/sparse3d/engine.h). Internal to src/engine.
#pragma once

#include <cuda_runtime.h>

#include <functional>
#include <map>
#include <tuple>
#include <memory>
#include <mutex>
#include <string>

#include "core/context.h"
#include "core/tensor.h"
#include "engine/qualification_cache.h"
#include "model/checkpoint.h"
#include "model/null_context.h"
#include "model/slat_flow.h"
#include "sampler/sampler.h"
#include "sparse3d/engine.h"

namespace sparse3d {

struct Engine::Impl {
  EngineOptions options;
  Device device = Device::CPU;
  ExecutionPlan plan;
  std::unique_ptr<s3d::Context> context;  // stream, allocator, counters, library state
  cudaStream_t own_stream = nullptr;
  std::unique_ptr<s3d::model::SLatFlowModel> model;
  ModelInfo info;
  s3d::engine::QualificationCache cache;
  // Null-context state per condition length L: the probe once, a qualification per token count.
  // Null-context state per (L, tuned_gemm): with searched GEMM plans the projections that
  // make v0 and the cached rows, and the reference rows they are qualified against, may run
  // other algorithms, so a qualification holds only under the plan policy it was taken with.
  std::map<std::pair<int, bool>, std::unique_ptr<s3d::model::NullContext>> null_contexts;
  std::mutex mu;  // one request at a time
  uint64_t requests = 0;
  uint64_t qualifications_run = 0;
  size_t peak_device_bytes = 0;

  // Reads the checkpoint (`read`, on the host, while CUDA starts on another thread) and
  // uploads it; `checkpoint` names it (a NAME.json path, or what an in-memory one is called).
  Impl(const std::string& checkpoint, const std::function<s3d::model::Checkpoint()>& read,
       EngineOptions opts);
  ~Impl();

  void log(const std::string& line) const;
  // The request's flags: its own or the engine's, checked against the backend.
  FlagSet flags_for(const std::optional<FlagSet>& requested) const;
  // The NullContext for condition length L (its probe verdict from the cache when it holds a
  // trusted entry), with what a request of N tokens per branch in this CFG mode needs
  // qualified: the cached row (want_cache) and, in batched CFG, the slices.
  const s3d::model::NullContext& null_context(int cond_tokens, int64_t tokens, bool tuned_gemm,
                                              bool batched, bool want_cache);
  // Refuses, before anything runs, a request whose activations cannot fit.
  void check_memory(int64_t tokens, int batch, int cond_tokens, const FlagSet& flags) const;
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
};

// Engine::impl_ for the diagnostics (diagnostics.cpp), which are free functions.
struct EngineAccess {
  using Impl = Engine::Impl;
  static Impl& of(Engine& e) { return *e.impl_; }
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
