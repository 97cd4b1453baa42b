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

// A block on its way back: to the driver (no source) or to the source it came from.
struct Returned {
  void* ptr;
  std::shared_ptr<const DeviceMemorySource> source;
  int device;  // where the source's block was taken (its work must be done first)
};

// Outside the allocator's lock (a source may call into a framework that takes locks of its
// own): each block to where it came from. cudaFree waits for the device's work itself; a
// source's block is synchronised first, once per device, so that the framework may hand it
// out again at once on any stream.
void give_back(const std::vector<Returned>& blocks) {
  std::vector<int> synced;
  for (const Returned& b : blocks) {
    if (!b.source) {
      cudaFree(b.ptr);
      continue;
    }
    if (std::find(synced.begin(), synced.end(), b.device) == synced.end()) {
      int previous = -1;
      cudaGetDevice(&previous);  // best effort: this runs in destructors too
      if (previous != b.device) cudaSetDevice(b.device);
      cudaDeviceSynchronize();
      if (previous != b.device) cudaSetDevice(previous);
      synced.push_back(b.device);
    }
    b.source->release(b.ptr);
  }
}

// A new block: from `source`, else from the driver. nullptr when the memory is not there
// (`why` says what refused); any other driver error fails here.
void* obtain(size_t size, const DeviceMemorySource* source, std::string* why) {
  FirstUseTimer timer("device_allocation");  // a new block: kept for later requests
  if (source != nullptr) {
    void* p = source->allocate(size);
    if (p == nullptr) *why = cat(source->name, " had no room");
    return p;
  }
  void* p = nullptr;
  const cudaError_t err = cudaMalloc(&p, size);
  if (err == cudaSuccess) return p;
  cudaGetLastError();
  *why = cudaGetErrorString(err);
  if (err == cudaErrorMemoryAllocation) return nullptr;
  size_t free_b = 0, total_b = 0;
  cudaMemGetInfo(&free_b, &total_b);
  fail("device allocation of ", mib(size), " failed (", *why, "); the device has ", mib(free_b),
       " free of ", mib(total_b));
}

}  // namespace

struct DeviceAllocator::Impl {
  mutable std::mutex mu;
  std::multimap<size_t, void*> free_blocks;       // rounded size -> block
  std::unordered_map<void*, size_t> block_sizes;  // every live or cached block
  std::map<uint64_t, std::multimap<size_t, void*>> pool_free;  // private pools' free lists
  std::unordered_map<void*, uint64_t> block_pool;              // blocks owned by a pool
  // Blocks taken from a source (set_source), with the device they were taken on.
  std::unordered_map<void*, std::pair<std::shared_ptr<const DeviceMemorySource>, int>> sourced;
  std::shared_ptr<const DeviceMemorySource> source;  // null: new blocks from the driver
  uint64_t next_pool = 1;
  AllocatorStats stats;
  bool caching = std::getenv("SPARSE3D_NO_CACHING") == nullptr;

  // Takes `ptr` off the books; where it goes back is appended to `out`.
  void forget_locked(void* ptr, size_t size, std::vector<Returned>& out) {
    Returned r{ptr, nullptr, -1};
    if (auto it = sourced.find(ptr); it != sourced.end()) {
      r.source = std::move(it->second.first);
      r.device = it->second.second;
      sourced.erase(it);
    }
    block_sizes.erase(ptr);
    stats.reserved_bytes -= size;
    out.push_back(std::move(r));
  }

  std::vector<Returned> take_cached_locked() {
    std::vector<Returned> out;
    for (auto& [size, ptr] : free_blocks) forget_locked(ptr, size, out);
    free_blocks.clear();
    return out;
  }

  void record_locked(void* p, size_t size, uint64_t pool,
                     const std::shared_ptr<const DeviceMemorySource>& from) {
    block_sizes[p] = size;
    if (pool != 0) block_pool[p] = pool;
    if (from) {
      int device = -1;
      cudaGetDevice(&device);
      sourced.emplace(p, std::make_pair(from, device));
    }
    stats.driver_allocations++;
    stats.reserved_bytes += size;
    stats.peak_reserved_bytes = std::max(stats.peak_reserved_bytes, stats.reserved_bytes);
    stats.allocated_bytes += size;
    stats.peak_allocated_bytes = std::max(stats.peak_allocated_bytes, stats.allocated_bytes);
  }
};

DeviceAllocator& DeviceAllocator::current() { return current_context().allocator(); }

DeviceAllocator::DeviceAllocator() : impl_(new Impl) {}

DeviceAllocator::~DeviceAllocator() {
  std::vector<Returned> blocks;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    blocks = impl_->take_cached_locked();
    for (auto& [pool, free_list] : impl_->pool_free)
      for (auto& [size, ptr] : free_list) impl_->forget_locked(ptr, size, blocks);
  }
  give_back(blocks);
  delete impl_;
}

void* DeviceAllocator::allocate(size_t bytes) {
  const size_t size = round_size(bytes);
  const uint64_t pool = t_active_pool;
  std::shared_ptr<const DeviceMemorySource> source;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    if (fault::hit(fault::Point::DeviceAlloc))
      fail("out of device memory: a request for ", mib(size), " failed (injected fault ",
           fault::count(fault::Point::DeviceAlloc), "); the engine holds ",
           mib(impl_->stats.allocated_bytes), " in tensors");
    if (pool != 0 || impl_->caching) {
      size_t got = 0;
      auto found = impl_->pool_free.find(pool);
      S3D_CHECK(pool == 0 || found != impl_->pool_free.end(), "allocator: private pool ", pool,
                " is active but was released");
      auto& free_list = pool != 0 ? found->second : impl_->free_blocks;
      if (void* p = take_block(free_list, size, &got)) {
        impl_->stats.allocated_bytes += got;
        impl_->stats.peak_allocated_bytes =
            std::max(impl_->stats.peak_allocated_bytes, impl_->stats.allocated_bytes);
        return p;
      }
    }
    if (pool == 0) source = impl_->source;
  }
  std::string why;
  void* p = obtain(size, source.get(), &why);
  if (p == nullptr) {  // full: what this allocator caches goes back, and one more try
    std::vector<Returned> cached;
    {
      std::lock_guard<std::mutex> lock(impl_->mu);
      cached = impl_->take_cached_locked();
    }
    if (!cached.empty()) {
      give_back(cached);
      p = obtain(size, source.get(), &why);
    }
  }
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (p == nullptr) {
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    fail("out of device memory: a request for ", mib(size), " failed (", why,
         "); the engine holds ", mib(impl_->stats.allocated_bytes), " in tensors, the device has ",
         mib(free_b), " free of ", mib(total_b));
  }
  impl_->record_locked(p, size, pool, source);
  return p;
}

void DeviceAllocator::release(void* ptr, size_t /*bytes*/) {
  std::vector<Returned> back;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    auto it = impl_->block_sizes.find(ptr);
    if (it == impl_->block_sizes.end()) return;  // not ours: nothing sensible to do
    const size_t size = it->second;
    impl_->stats.allocated_bytes -= size;
    if (auto owner = impl_->block_pool.find(ptr); owner != impl_->block_pool.end()) {
      impl_->pool_free[owner->second].emplace(size, ptr);  // pools outlive their blocks' use
      return;
    }
    if (impl_->caching) {
      impl_->free_blocks.emplace(size, ptr);
      return;
    }
    impl_->forget_locked(ptr, size, back);
  }
  give_back(back);
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
  std::vector<Returned> cached;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->caching = enabled;
    if (!enabled) cached = impl_->take_cached_locked();
  }
  give_back(cached);
}

bool DeviceAllocator::caching() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->caching;
}

void DeviceAllocator::empty_cache() {
  std::vector<Returned> cached;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    cached = impl_->take_cached_locked();
  }
  give_back(cached);
}

void DeviceAllocator::set_source(std::shared_ptr<const DeviceMemorySource> source) {
  S3D_CHECK(!source || (source->allocate && source->release),
            "allocator: a memory source needs both allocate and release");
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->source = std::move(source);
}

std::shared_ptr<const DeviceMemorySource> DeviceAllocator::source() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->source;
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
  for (auto& [size, ptr] : it->second) {  // a pool's blocks are the driver's (set_source)
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
