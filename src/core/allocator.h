// Caching device allocator with statistics, in the manner of PyTorch's: freed blocks go to
// a free list and are reused by later requests on the same stream, so that a denoise loop
// stops calling cudaMalloc after its first step. Peak bytes are what `run` and `bench`
// report. The cache can be switched off (SPARSE3D_NO_CACHING=1 or set_caching(false)) so
// that compute-sanitizer sees every allocation's true bounds. New blocks come from the driver,
// or from a DeviceMemorySource (set_source: a framework's caching allocator), and each goes
// back to where it came from.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "sparse3d/types.h"

namespace s3d {

using sparse3d::DeviceMemorySource;

struct AllocatorStats {
  size_t allocated_bytes = 0;       // handed out and not yet released
  size_t peak_allocated_bytes = 0;  // since the last reset_peak()
  size_t reserved_bytes = 0;        // held from the driver (allocated + cached)
  size_t peak_reserved_bytes = 0;   // since the last reset_peak()
  uint64_t driver_allocations = 0;  // cudaMalloc calls so far
};

// One per context (core/context.h): each Engine has its own blocks, cache and statistics.
class DeviceAllocator {
 public:
  // The current context's allocator.
  static DeviceAllocator& current();
  DeviceAllocator();
  // Returns every cached and pooled block to the driver.
  ~DeviceAllocator();
  DeviceAllocator(const DeviceAllocator&) = delete;
  DeviceAllocator& operator=(const DeviceAllocator&) = delete;

  // Throws s3d::Error naming the request and the memory state when the device is full.
  void* allocate(size_t bytes);
  void release(void* ptr, size_t bytes);

  AllocatorStats stats() const;
  // The sizes of the blocks handed out and not yet released, largest first (diagnostics:
  // what an engine holds between requests).
  std::vector<size_t> live_block_sizes() const;
  void reset_peak();
  void set_caching(bool enabled);
  bool caching() const;
  // Returns every cached block to the driver or the source it came from (private pools
  // keep theirs).
  void empty_cache();
  // New shared blocks come from `source` (null: the driver); each block goes back where it
  // came from. Private pools' blocks always come from the driver (a capture must not call
  // into a framework).
  void set_source(std::shared_ptr<const DeviceMemorySource> source);
  std::shared_ptr<const DeviceMemorySource> source() const;

  // Private pools (for CUDA-graph capture, core/cuda_graph.h): while a pool is active on
  // this thread (PoolScope), allocations come from it and never from the shared cache; a
  // block of a pool returns to that pool when freed, whichever pool is active then. Its
  // blocks are cached even with caching off, so a captured graph's addresses stay its own
  // between replays. release_pool frees the pool's cached blocks; blocks still in use then
  // become shared ones (freed to the shared cache later).
  uint64_t create_pool();
  void release_pool(uint64_t pool);

 private:
  struct Impl;
  Impl* impl_;
};

// Makes `pool` the active pool of this thread for the scope's lifetime (0: the shared cache).
class PoolScope {
 public:
  explicit PoolScope(uint64_t pool);
  ~PoolScope();
  PoolScope(const PoolScope&) = delete;
  PoolScope& operator=(const PoolScope&) = delete;

 private:
  uint64_t previous_;
};

// Host allocations (64-byte aligned) for CPU tensors. `bytes` in host_release is the size
// given to host_allocate (for the live counters).
void* host_allocate(size_t bytes);
void host_release(void* ptr, size_t bytes);

// Host blocks handed out and not yet released, process-wide: what a fault-injection sweep
// checks for leaks.
struct HostAllocationStats {
  uint64_t live_blocks = 0;
  size_t live_bytes = 0;
};
HostAllocationStats host_allocation_stats();

}  // namespace s3d
