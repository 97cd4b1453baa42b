// The runtime state one Engine owns: its CUDA stream and device, its device allocator, its
// launch counters and profiler, and a slot per upper layer for that layer's own state
// (cuBLASLt handle and plans, cuDNN handle and graphs, fallback counters, the environment
// fingerprint). Nothing of this is a process global: every op reads the *current* context,
// which a ContextScope sets for the calling thread (the Engine does so around each request).
// Code that runs outside any Engine (unit tests, `bench-kernels`) uses a process default.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <typeindex>
#include <typeinfo>
#include <unordered_map>
#include <vector>

namespace s3d {

class DeviceAllocator;

// Launches counted by op name (kernels, library calls, graph replays). Keyed by the op's
// string literal: one pointer compare per launch in the hot path.
struct LaunchCounter {
  std::unordered_map<const char*, uint64_t> by_op;
  uint64_t total = 0;
};

struct ProfilerState;  // core/profiler.cpp

class Context {
 public:
  // device: the CUDA ordinal this context's work runs on (-1: none, a CPU-only context).
  explicit Context(int device = -1);
  // A context whose allocator is `allocator` (shared with other contexts: a Workspace).
  Context(int device, std::shared_ptr<DeviceAllocator> allocator);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  int device() const { return device_; }
  cudaStream_t stream() const { return stream_; }
  void set_stream(cudaStream_t stream) { stream_ = stream; }

  DeviceAllocator& allocator() { return *allocator_; }
  // Device tensors keep their allocator alive: a result may outlive the Engine.
  const std::shared_ptr<DeviceAllocator>& allocator_handle() const { return allocator_; }

  LaunchCounter& launches() { return launches_; }
  ProfilerState& profiler();

  // The state of an upper layer, created by T() on first use and destroyed with the
  // context (before its allocator). One per type.
  template <class T>
  T& state() {
    std::lock_guard<std::mutex> lock(mu_);
    auto& slot = states_[std::type_index(typeid(T))];
    if (!slot) {
      slot = std::make_shared<T>();
      order_.push_back(slot);
    }
    return *static_cast<T*>(slot.get());
  }

 private:
  int device_;
  cudaStream_t stream_ = nullptr;
  std::shared_ptr<DeviceAllocator> allocator_;  // declared first: destroyed last
  LaunchCounter launches_;
  std::unique_ptr<ProfilerState> profiler_;
  std::mutex mu_;
  std::map<std::type_index, std::shared_ptr<void>> states_;
  std::vector<std::shared_ptr<void>> order_;  // creation order; released in reverse
};

// The calling thread's current context (set by ContextScope), else the process default.
Context& current_context();

// Makes `context` current on this thread for the scope's lifetime (and its device current,
// when it has one); nests.
class ContextScope {
 public:
  explicit ContextScope(Context& context);
  ~ContextScope();
  ContextScope(const ContextScope&) = delete;
  ContextScope& operator=(const ContextScope&) = delete;

 private:
  Context* previous_;
  int previous_device_ = -1;
};

}  // namespace s3d
