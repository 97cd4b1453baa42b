// Workspace: one device allocator shared by engines that never run at once
// (include/sparse3d/engine.h), and the lock that makes them take turns.
#include <cuda_runtime.h>

#include "core/allocator.h"
#include "core/cuda_util.h"
#include "core/error.h"
#include "engine/engine_impl.h"

namespace sparse3d {

Workspace::Workspace(int device_index) : impl_(std::make_unique<Impl>()) {
  S3D_CHECK(s3d::cuda_available(), "Workspace: no usable CUDA device found");
  int count = 0;
  S3D_CUDA_CHECK(cudaGetDeviceCount(&count));
  S3D_CHECK(device_index >= 0 && device_index < count, "Workspace: device_index ", device_index,
            " is not a CUDA device (", count, " found)");
  impl_->device = device_index;
  impl_->allocator = std::make_shared<s3d::DeviceAllocator>();
}

Workspace::~Workspace() = default;

int Workspace::device_index() const { return impl_->device; }

size_t Workspace::release_cache() {
  WorkspaceHold hold(impl_.get(), "Workspace::release_cache");
  int previous = -1;
  S3D_CUDA_CHECK(cudaGetDevice(&previous));
  S3D_CUDA_CHECK(cudaSetDevice(impl_->device));
  const size_t before = impl_->allocator->stats().reserved_bytes;
  impl_->allocator->empty_cache();
  const size_t after = impl_->allocator->stats().reserved_bytes;
  cudaSetDevice(previous);
  return before > after ? before - after : 0;
}

void Workspace::set_memory_source(DeviceMemorySource source) {
  WorkspaceHold hold(impl_.get(), "Workspace::set_memory_source");
  if (!source.allocate && !source.release) {
    impl_->allocator->set_source(nullptr);
    return;
  }
  S3D_CHECK(source.allocate && source.release, "Workspace::set_memory_source: the source '",
            source.name, "' needs both allocate and release");
  if (source.name.empty()) source.name = "the workspace's memory source";
  impl_->allocator->set_source(std::make_shared<const DeviceMemorySource>(std::move(source)));
}

std::string Workspace::memory_source() const {
  auto source = impl_->allocator->source();
  return source ? source->name : std::string();
}

size_t Workspace::bytes_in_use() const { return impl_->allocator->stats().allocated_bytes; }
size_t Workspace::bytes_reserved() const { return impl_->allocator->stats().reserved_bytes; }
size_t Workspace::peak_bytes() const { return impl_->allocator->stats().peak_allocated_bytes; }
void Workspace::reset_peak() { impl_->allocator->reset_peak(); }

WorkspaceHold::WorkspaceHold(Workspace::Impl* workspace, const char* call)
    : workspace_(workspace) {
  if (!workspace_) return;
  S3D_CHECK(workspace_->holder.load() != std::this_thread::get_id(), call,
            ": an engine sharing this workspace is running a request on this thread (this "
            "call comes from its callback); the workspace serves one request at a time, so "
            "this could never start: call it after that request returns");
  workspace_->run.lock();
  workspace_->holder.store(std::this_thread::get_id());
}

WorkspaceHold::~WorkspaceHold() {
  if (!workspace_) return;
  // Best effort in a destructor: an error here is the request's, reported by its next call.
  int previous = -1;
  if (cudaGetDevice(&previous) == cudaSuccess) {
    if (previous != workspace_->device) cudaSetDevice(workspace_->device);
    cudaDeviceSynchronize();
    if (previous != workspace_->device) cudaSetDevice(previous);
  }
  workspace_->holder.store(std::thread::id());
  workspace_->run.unlock();
}

}  // namespace sparse3d
