#include "core/context.h"

#include "core/allocator.h"
#include "core/cuda_util.h"
#include "core/profiler.h"

namespace s3d {
namespace {

thread_local Context* t_current = nullptr;

}  // namespace

Context::Context(int device)
    : device_(device),
      allocator_(std::make_shared<DeviceAllocator>()),
      profiler_(profiler::make_state()) {}

Context::Context(int device, std::shared_ptr<DeviceAllocator> allocator)
    : device_(device),
      allocator_(allocator ? std::move(allocator) : std::make_shared<DeviceAllocator>()),
      profiler_(profiler::make_state()) {}

Context::~Context() {
  // Upper layers' state first, newest first (a cuDNN workspace returns to the allocator).
  states_.clear();
  while (!order_.empty()) order_.pop_back();
  profiler_.reset();
}

ProfilerState& Context::profiler() { return *profiler_; }

Context& current_context() {
  if (t_current) return *t_current;
  // The process default, for code that runs outside any Engine (tests, bench-kernels);
  // never destroyed: tensors made in it may outlive static destruction order.
  static Context* fallback = new Context(-1);
  return *fallback;
}

ContextScope::ContextScope(Context& context) : previous_(t_current) {
  if (context.device() >= 0) {
    S3D_CUDA_CHECK(cudaGetDevice(&previous_device_));
    if (previous_device_ != context.device()) S3D_CUDA_CHECK(cudaSetDevice(context.device()));
  }
  t_current = &context;
}

ContextScope::~ContextScope() {
  const int device = t_current ? t_current->device() : -1;
  t_current = previous_;
  if (device >= 0 && previous_device_ >= 0 && previous_device_ != device)
    cudaSetDevice(previous_device_);
}

}  // namespace s3d
