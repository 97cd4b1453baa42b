#include "core/allocator.h"

#include <cuda_runtime.h>

#include <cstdlib>
#include <map>
#include <mutex>
#include <unordered_map>

#include "core/cuda_util.h"
#include "core/error.h"

namespace s3d {
namespace {

constexpr size_t kSmallRound = 512;             // bytes
constexpr size_t kLargeRound = 2u << 20;        // 2 MiB above 1 MiB
constexpr size_t kLargeThreshold = 1u << 20;

size_t round_size(size_t bytes) {
  size_t r = bytes < kLargeThreshold ? kSmallRound : kLargeRound;
  return (bytes + r - 1) / r * r;
}

std::string mib(size_t bytes) { return cat(bytes / (1024.0 * 1024.0), " MiB"); }

}  // namespace

struct DeviceAllocator::Impl {
  mutable std::mutex mu;
  std::multimap<size_t, void*> free_blocks;       // rounded size -> block
  std::unordered_map<void*, size_t> block_sizes;  // every live or cached block
  AllocatorStats stats;
  bool caching = std::getenv("SPARSE3D_NO_CACHING") == nullptr;

  void free_cached_locked() {
    for (auto& [size, ptr] : free_blocks) {
      cudaFree(ptr);
      block_sizes.erase(ptr);
      stats.reserved_bytes -= size;
    }
    free_blocks.clear();
  }
};

DeviceAllocator& DeviceAllocator::instance() {
  static DeviceAllocator* a = new DeviceAllocator();  // never destroyed: outlives tensors
  return *a;
}

DeviceAllocator::DeviceAllocator() : impl_(new Impl) {}

void* DeviceAllocator::allocate(size_t bytes) {
  size_t size = round_size(bytes);
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (impl_->caching) {
    // Best fit, but never hand a block more than twice the request (plus one large round).
    auto it = impl_->free_blocks.lower_bound(size);
    if (it != impl_->free_blocks.end() && it->first <= 2 * size + kLargeRound) {
      void* p = it->second;
      size_t got = it->first;
      impl_->free_blocks.erase(it);
      impl_->stats.allocated_bytes += got;
      if (impl_->stats.allocated_bytes > impl_->stats.peak_allocated_bytes)
        impl_->stats.peak_allocated_bytes = impl_->stats.allocated_bytes;
      return p;
    }
  }
  void* p = nullptr;
  cudaError_t err = cudaMalloc(&p, size);
  if (err == cudaErrorMemoryAllocation && !impl_->free_blocks.empty()) {
    cudaGetLastError();
    impl_->free_cached_locked();
    err = cudaMalloc(&p, size);
  }
  if (err != cudaSuccess) {
    cudaGetLastError();
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    fail("out of device memory: a request for ", mib(size), " failed (",
         cudaGetErrorString(err), "); the engine holds ", mib(impl_->stats.allocated_bytes),
         " in tensors, the device has ", mib(free_b), " free of ", mib(total_b));
  }
  impl_->block_sizes[p] = size;
  impl_->stats.driver_allocations++;
  impl_->stats.reserved_bytes += size;
  impl_->stats.allocated_bytes += size;
  if (impl_->stats.allocated_bytes > impl_->stats.peak_allocated_bytes)
    impl_->stats.peak_allocated_bytes = impl_->stats.allocated_bytes;
  return p;
}

void DeviceAllocator::release(void* ptr, size_t /*bytes*/) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  auto it = impl_->block_sizes.find(ptr);
  if (it == impl_->block_sizes.end()) return;  // not ours: nothing sensible to do
  size_t size = it->second;
  impl_->stats.allocated_bytes -= size;
  if (impl_->caching) {
    impl_->free_blocks.emplace(size, ptr);
  } else {
    cudaFree(ptr);
    impl_->block_sizes.erase(it);
    impl_->stats.reserved_bytes -= size;
  }
}

AllocatorStats DeviceAllocator::stats() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->stats;
}

void DeviceAllocator::reset_peak() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->stats.peak_allocated_bytes = impl_->stats.allocated_bytes;
}

void DeviceAllocator::set_caching(bool enabled) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->caching = enabled;
  if (!enabled) impl_->free_cached_locked();
}

bool DeviceAllocator::caching() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->caching;
}

void DeviceAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->free_cached_locked();
}

void* host_allocate(size_t bytes) {
  size_t rounded = (bytes + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded);
  S3D_CHECK(p != nullptr, "out of host memory: a request for ", mib(rounded), " failed");
  return p;
}

void host_release(void* ptr) { std::free(ptr); }

}  // namespace s3d
