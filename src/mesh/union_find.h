// Union-find that threads may share, for the mesh layer's connected parts (clean.cpp's
// components, remesh.cpp's cavity fill). Private to the mesh layer.
#pragma once

#include <atomic>
#include <cstdint>
#include <utility>
#include <vector>

#include "mesh/mesh.h"  // kParallelMin

namespace s3d::mesh::detail {

// A root is only ever linked under a smaller root (compare and swap), so every set's root is
// its smallest member whatever the order of the unions and however many threads make them.
class UnionFind {
 public:
  using Id = uint32_t;
  explicit UnionFind(int64_t n) : parent_(n) {
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
    for (int64_t i = 0; i < n; ++i) parent_[i].store(static_cast<Id>(i), std::memory_order_relaxed);
  }
  Id find(Id a) {
    for (;;) {
      Id p = parent_[a].load(std::memory_order_relaxed);
      if (p == a) return a;
      const Id gp = parent_[p].load(std::memory_order_relaxed);
      // Path halving: gp is an ancestor of a, so the swap keeps every path valid.
      if (gp != p) parent_[a].compare_exchange_weak(p, gp, std::memory_order_relaxed);
      a = gp;
    }
  }
  void unite(Id a, Id b) {
    for (;;) {
      a = find(a);
      b = find(b);
      if (a == b) return;
      if (a < b) std::swap(a, b);
      Id expected = a;
      if (parent_[a].compare_exchange_strong(expected, b, std::memory_order_relaxed)) return;
    }
  }

 private:
  std::vector<std::atomic<Id>> parent_;
};

}  // namespace s3d::mesh::detail
