#include "core/allocator.h"

#include <cuda_runtime.h>

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <map>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include "core/context.h"
#include "core/cuda_util.h"
#include "core/error.h"
#include "core/fault.h"
#include "core/first_use.h"

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

thread_local uint64_t t_active_pool = 0;  // PoolScope: 0 = the shared cache

// Best fit from a free list, never a block more than twice the request (plus one large
// round for a large request); nullptr when none fits. A small request (under 1 MiB) takes no
// slack: a row kept for the engine's life (a null-context value, say) would otherwise settle
// in the block a freed temporary of up to 2 MiB left, and hold all of it between requests
// (measured on the H200: 13.3 MB held by two 4-block engines' few kilobytes of rows).
void* take_block(std::multimap<size_t, void*>& free_list, size_t size, size_t* got) {
  auto it = free_list.lower_bound(size);
  const size_t slack = size < kLargeThreshold ? 0 : kLargeRound;
  if (it == free_list.end() || it->first > 2 * size + slack) return nullptr;
  void* p = it->second;
  *got = it->first;
  free_list.erase(it);
  return p;
}

}  // namespace

struct DeviceAllocator::Impl {
  mutable std::mutex mu;
  std::multimap<size_t, void*> free_blocks;       // rounded size -> block
  std::unordered_map<void*, size_t> block_sizes;  // every live or cached block
  std::map<uint64_t, std::multimap<size_t, void*>> pool_free;  // private pools' free lists
  std::unordered_map<void*, uint64_t> block_pool;              // blocks owned by a pool
  uint64_t next_pool = 1;
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

DeviceAllocator& DeviceAllocator::current() { return current_context().allocator(); }

DeviceAllocator::DeviceAllocator() : impl_(new Impl) {}

DeviceAllocator::~DeviceAllocator() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->free_cached_locked();
    for (auto& [pool, blocks] : impl_->pool_free)
      for (auto& [size, ptr] : blocks) cudaFree(ptr);
  }
  delete impl_;
}

void* DeviceAllocator::allocate(size_t bytes) {
  size_t size = round_size(bytes);
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (fault::hit(fault::Point::DeviceAlloc))
    fail("out of device memory: a request for ", mib(size), " failed (injected fault ",
         fault::count(fault::Point::DeviceAlloc), "); the engine holds ",
         mib(impl_->stats.allocated_bytes), " in tensors");
  const uint64_t pool = t_active_pool;
  if (pool != 0 || impl_->caching) {
    size_t got = 0;
    auto found = impl_->pool_free.find(pool);
    S3D_CHECK(pool == 0 || found != impl_->pool_free.end(), "allocator: private pool ", pool,
              " is active but was released");
    auto& free_list = pool != 0 ? found->second : impl_->free_blocks;
    if (void* p = take_block(free_list, size, &got)) {
      impl_->stats.allocated_bytes += got;
      if (impl_->stats.allocated_bytes > impl_->stats.peak_allocated_bytes)
        impl_->stats.peak_allocated_bytes = impl_->stats.allocated_bytes;
      return p;
    }
  }
  void* p = nullptr;
  cudaError_t err;
  {
    FirstUseTimer timer("device_allocation");  // a new block: kept for later requests
    err = cudaMalloc(&p, size);
  }
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
  if (pool != 0) impl_->block_pool[p] = pool;
  impl_->stats.driver_allocations++;
  impl_->stats.reserved_bytes += size;
  impl_->stats.peak_reserved_bytes =
      std::max(impl_->stats.peak_reserved_bytes, impl_->stats.reserved_bytes);
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
  if (auto owner = impl_->block_pool.find(ptr); owner != impl_->block_pool.end()) {
    impl_->pool_free[owner->second].emplace(size, ptr);  // pools outlive their blocks' use
    return;
  }
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

std::vector<size_t> DeviceAllocator::live_block_sizes() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  std::unordered_multiset<void*> cached;
  for (const auto& [size, ptr] : impl_->free_blocks) cached.insert(ptr);
  for (const auto& [pool, blocks] : impl_->pool_free)
    for (const auto& [size, ptr] : blocks) cached.insert(ptr);
  std::vector<size_t> out;
  for (const auto& [ptr, size] : impl_->block_sizes)
    if (cached.count(ptr) == 0) out.push_back(size);
  std::sort(out.rbegin(), out.rend());
  return out;
}

void DeviceAllocator::reset_peak() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->stats.peak_allocated_bytes = impl_->stats.allocated_bytes;
  impl_->stats.peak_reserved_bytes = impl_->stats.reserved_bytes;
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

uint64_t DeviceAllocator::create_pool() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  const uint64_t id = impl_->next_pool++;
  impl_->pool_free[id];
  return id;
}

void DeviceAllocator::release_pool(uint64_t pool) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  auto it = impl_->pool_free.find(pool);
  if (it == impl_->pool_free.end()) return;
  for (auto& [size, ptr] : it->second) {
    cudaFree(ptr);
    impl_->block_sizes.erase(ptr);
    impl_->block_pool.erase(ptr);
    impl_->stats.reserved_bytes -= size;
  }
  impl_->pool_free.erase(it);
  // Blocks of the pool still in use become shared ones.
  for (auto b = impl_->block_pool.begin(); b != impl_->block_pool.end();)
    b = b->second == pool ? impl_->block_pool.erase(b) : std::next(b);
}

PoolScope::PoolScope(uint64_t pool) : previous_(t_active_pool) { t_active_pool = pool; }
PoolScope::~PoolScope() { t_active_pool = previous_; }

namespace {
std::atomic<uint64_t> g_host_live_blocks{0};
std::atomic<size_t> g_host_live_bytes{0};
}  // namespace

void* host_allocate(size_t bytes) {
  // Large buffers (a checkpoint's tensors) on 2 MiB boundaries and advised as huge pages:
  // gigabytes of fresh 4 KiB pages cost a page fault each when first written.
  constexpr size_t kHuge = size_t(2) << 20;
  const size_t align = bytes >= kHuge ? kHuge : 64;
  const size_t rounded = (bytes + align - 1) / align * align;
  S3D_CHECK(!fault::hit(fault::Point::HostAlloc), "out of host memory: a request for ",
            mib(rounded), " failed (injected fault ", fault::count(fault::Point::HostAlloc),
            ")");
  void* p = std::aligned_alloc(align, rounded);
  S3D_CHECK(p != nullptr, "out of host memory: a request for ", mib(rounded), " failed");
  if (align == kHuge) madvise(p, rounded, MADV_HUGEPAGE);  // advice only: ignored if refused
  g_host_live_blocks.fetch_add(1, std::memory_order_relaxed);
  g_host_live_bytes.fetch_add(rounded, std::memory_order_relaxed);
  return p;
}

void host_release(void* ptr, size_t bytes) {
  if (ptr == nullptr) return;
  constexpr size_t kHuge = size_t(2) << 20;
  const size_t align = bytes >= kHuge ? kHuge : 64;
  g_host_live_blocks.fetch_sub(1, std::memory_order_relaxed);
  g_host_live_bytes.fetch_sub((bytes + align - 1) / align * align, std::memory_order_relaxed);
  std::free(ptr);
}

HostAllocationStats host_allocation_stats() {
  return {g_host_live_blocks.load(), g_host_live_bytes.load()};
}

}  // namespace s3d
