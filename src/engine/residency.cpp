// Engine residency: offload() frees the device memory an engine holds between requests and
// reload() brings the weights back (include/sparse3d/engine.h, docs/API.md "Residency").
//
// What goes: the weights (moved to a host copy, pinned on a GPU: Transformer::
// offload_weights) and the allocator's cached blocks (returned to the driver). What stays:
// everything on the host or tiny that a request would otherwise rebuild: cuBLASLt plans and
// cuDNN graphs, the null-context probe, its v0 and cached rows and the qualifications, the
// family's position tables (the dense family's), the counters. The weights come back to the same alignment
// (so to the same library plans) with the same bits, so no result changes, but to another
// address: nothing may keep a weight's address across requests (CUDA graphs are captured
// per request, sampler/graph_runner.h; a graph kept longer would have to go on offload).
#include <chrono>
#include <cstdio>

#include "attention/attention.h"
#include "core/allocator.h"
#include "core/error.h"
#include "engine/engine_impl.h"
#include "gemm/linear.h"

namespace sparse3d {
namespace {

std::string gib(size_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f GiB", static_cast<double>(bytes) / (1u << 30));
  return text;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

void Engine::Impl::offload() {
  if (!model->weights_resident()) return;
  const auto t0 = std::chrono::steady_clock::now();
  s3d::ContextScope scope(*context);
  const bool gpu = device == Device::CUDA;
  const size_t reserved = gpu ? s3d::DeviceAllocator::current().stats().reserved_bytes : 0;
  size_t copied = model->offload_weights();
  for (Rank& r : ranks) {  // the replicas of EngineOptions::devices
    s3d::ContextScope rank_scope(*r.context);
    copied += r.model->offload_weights();
    s3d::DeviceAllocator::current().empty_cache();
  }
  size_t released = 0;
  if (gpu) {
    s3d::DeviceAllocator& allocator = s3d::DeviceAllocator::current();
    allocator.empty_cache();
    const size_t left = allocator.stats().reserved_bytes;
    released = reserved > left ? reserved - left : 0;
  }
  ++moves.offloads;
  moves.bytes_offloaded += copied;
  moves.device_bytes_released += released;
  const double took = seconds_since(t0);
  moves.offload_seconds += took;
  log(s3d::cat("weights offloaded: ", copied ? gib(copied) + " copied to " : "",
               gpu ? "pinned host memory" : "host memory",
               copied ? "" : " (the copy of an earlier offload)", ", ", gib(released),
               " of device memory returned, in ", took, " s"));
}

void Engine::Impl::reload() {
  if (model->weights_resident()) return;
  const auto t0 = std::chrono::steady_clock::now();
  s3d::ContextScope scope(*context);
  size_t copied = model->reload_weights();
  for (Rank& r : ranks) {
    s3d::ContextScope rank_scope(*r.context);
    copied += r.model->reload_weights();
  }
  ++moves.reloads;
  moves.bytes_reloaded += copied;
  const double took = seconds_since(t0);
  moves.reload_seconds += took;
  log(s3d::cat("weights reloaded: ", gib(copied), " copied to the ",
               device == Device::CUDA ? "GPU" : "engine's buffer", " in ", took, " s"));
}

void Engine::offload() {
  EngineLock lock(*impl_, "offload", Access::Write);
  impl_->offload();
}

void Engine::reload() {
  EngineLock lock(*impl_, "reload", Access::Write);
  impl_->reload();
}

Residency Engine::residency() const {
  EngineLock lock(*impl_, "residency", Access::Read);
  Residency r = impl_->moves;
  r.resident = impl_->model->weights_resident();
  r.weight_bytes = impl_->model->weight_bytes();
  r.host_copy_bytes = impl_->model->host_copy_bytes();
  r.weights_source = impl_->model->weights_source();
  return r;
}

size_t Engine::release_cache() {
  EngineLock lock(*impl_, "release_cache", Access::Write);
  if (impl_->device != Device::CUDA) return 0;
  s3d::ContextScope scope(*impl_->context);
  s3d::DeviceAllocator& allocator = s3d::DeviceAllocator::current();
  const size_t before = allocator.stats().reserved_bytes;
  // The libraries' workspaces too (their handles, plans and graphs stay): between requests
  // an engine holds nothing but its weights and a few rows, so that engines sharing a
  // workspace add no fixed cost each. CUDA graphs live within one request, so none still
  // holds these pointers.
  s3d::gemm::release_workspaces();
  s3d::attention::release_workspaces();
  allocator.empty_cache();
  for (Impl::Rank& r : impl_->ranks) {
    s3d::ContextScope rank_scope(*r.context);
    s3d::gemm::release_workspaces();
    s3d::attention::release_workspaces();
    s3d::DeviceAllocator::current().empty_cache();
  }
  const size_t after = allocator.stats().reserved_bytes;
  return before > after ? before - after : 0;
}

}  // namespace sparse3d
