// Private to the voxel stages (dual_grid.cpp, remesh.cpp): integer voxel coordinates packed
// into one 64-bit key, a radix sort of keys, and neighbour look-ups for voxels visited in
// ascending key order. Sorted sweeps instead of a hash table: every look-up reads memory just
// ahead of the last one, where a hash would miss the cache on almost every probe. Not part of
// the layer's interface.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include <omp.h>

namespace s3d::mesh::detail {

// 21 bits per axis: coordinates in [0, 2^21). Keys order voxels by (x, y, z).
constexpr int kKeyBits = 21;
constexpr int64_t kMaxKeyCoord = (int64_t(1) << kKeyBits) - 1;

inline uint64_t pack_key(int64_t x, int64_t y, int64_t z) {
  return (static_cast<uint64_t>(x) << (2 * kKeyBits)) | (static_cast<uint64_t>(y) << kKeyBits) |
         static_cast<uint64_t>(z);
}

// The permutation that sorts `keys` ascending (stable): least-significant-digit radix sort, 11
// bits a pass, over the key bits that vary (gathered into a compact key first: voxel keys
// of a 1024^3 grid vary in 30 of their 63 bits, so 3 passes instead of 5). Each pass is
// split over the threads in fixed contiguous ranges, each thread's bucket offsets after those
// of the threads before it, so the order is the serial one for any thread count.
inline std::vector<int32_t> sort_order(const std::vector<uint64_t>& keys) {
  const int64_t n = static_cast<int64_t>(keys.size());
  std::vector<int32_t> order(n);
  for (int64_t i = 0; i < n; ++i) order[i] = static_cast<int32_t>(i);
  if (n < 2) return order;
  uint64_t vary = 0;
  for (int64_t i = 1; i < n; ++i) vary |= keys[i] ^ keys[0];
  struct Run {
    int shift, at;
    uint64_t mask;
  };
  std::vector<Run> runs;
  int bits = 0;
  for (int b = 0; b < 64;) {
    if (!(vary >> b & 1)) {
      ++b;
      continue;
    }
    int e = b;
    while (e < 64 && (vary >> e & 1)) ++e;
    runs.push_back({b, bits, e - b == 64 ? ~uint64_t{0} : (uint64_t{1} << (e - b)) - 1});
    bits += e - b;
    b = e;
  }
  if (bits == 0) return order;
  std::vector<uint64_t> key(n), key2(n);
  std::vector<int32_t> order2(n);
  constexpr int kDigit = 11;
  constexpr int kBuckets = 1 << kDigit;
  const int threads = n < (int64_t{1} << 16) ? 1 : omp_get_max_threads();
  std::vector<int64_t> hist;
  uint64_t *k_in = key.data(), *k_out = key2.data();
  int32_t *o_in = order.data(), *o_out = order2.data();
  int passes = 0;
#pragma omp parallel num_threads(threads)
  {
    const int nt = omp_get_num_threads(), t = omp_get_thread_num();
    const int64_t lo = n * t / nt, hi = n * (t + 1) / nt;
    for (int64_t i = lo; i < hi; ++i) {
      uint64_t c = 0;
      for (const Run& r : runs) c |= ((keys[i] >> r.shift) & r.mask) << r.at;
      key[i] = c;
    }
#pragma omp single
    hist.assign(static_cast<size_t>(nt) * kBuckets, 0);
    for (int shift = 0; shift < bits; shift += kDigit) {
      int64_t* h = &hist[static_cast<size_t>(t) * kBuckets];
      std::fill(h, h + kBuckets, 0);
      for (int64_t i = lo; i < hi; ++i) ++h[(k_in[i] >> shift) & (kBuckets - 1)];
#pragma omp barrier
#pragma omp single
      {
        int64_t at = 0;
        for (int d = 0; d < kBuckets; ++d)
          for (int u = 0; u < nt; ++u) {
            const int64_t c = hist[static_cast<size_t>(u) * kBuckets + d];
            hist[static_cast<size_t>(u) * kBuckets + d] = at;
            at += c;
          }
      }
      for (int64_t i = lo; i < hi; ++i) {
        const int64_t to = h[(k_in[i] >> shift) & (kBuckets - 1)]++;
        k_out[to] = k_in[i];
        o_out[to] = o_in[i];
      }
#pragma omp barrier
#pragma omp single
      {
        std::swap(k_in, k_out);
        std::swap(o_in, o_out);
        ++passes;
      }
    }
  }
  if (passes % 2) order.swap(order2);
  return order;
}

// Looks up the voxels at (x + dx, y + dy, z + dz) for dz in [dz_lo, dz_hi] in ascending keys
// `keys`, for voxels (x, y, z) visited in ascending key order (each visitor thread its own
// Row). The first call binary-searches, later calls only move forward.
class Row {
 public:
  Row(const std::vector<uint64_t>& keys, int dx, int dy, int dz_lo, int dz_hi)
      : keys_(keys.data()),
        n_(static_cast<int64_t>(keys.size())),
        dx_(dx),
        dy_(dy),
        dz_lo_(dz_lo),
        dz_hi_(dz_hi) {}

  // out[dz - dz_lo]: the sorted position of that voxel, or -1.
  void find(int64_t x, int64_t y, int64_t z, int64_t* out) {
    const int64_t rx = x + dx_, ry = y + dy_;
    if (rx < 0 || ry < 0 || rx > kMaxKeyCoord || ry > kMaxKeyCoord) {
      for (int dz = dz_lo_; dz <= dz_hi_; ++dz) out[dz - dz_lo_] = -1;
      return;
    }
    const uint64_t base = pack_key(rx, ry, std::max<int64_t>(z + dz_lo_, 0));
    if (p_ < 0) {
      p_ = std::lower_bound(keys_, keys_ + n_, base) - keys_;
    } else {
      while (p_ < n_ && keys_[p_] < base) ++p_;
    }
    int64_t q = p_;
    for (int dz = dz_lo_; dz <= dz_hi_; ++dz) {
      const int64_t rz = z + dz;
      out[dz - dz_lo_] = -1;
      if (rz < 0 || rz > kMaxKeyCoord) continue;
      const uint64_t k = pack_key(rx, ry, rz);
      while (q < n_ && keys_[q] < k) ++q;
      if (q < n_ && keys_[q] == k) out[dz - dz_lo_] = q;
    }
  }

 private:
  const uint64_t* keys_;
  int64_t n_;
  int dx_, dy_, dz_lo_, dz_hi_;
  int64_t p_ = -1;
};

// Slot of offset o (in {0, 1}^3, not all zero) in UpperNeighbours' answer.
inline int upper_slot(const int o[3]) { return o[0] * 4 + o[1] * 2 + o[2] - 1; }

// The four voxels around the lattice edge along axis a at a voxel's high corner, the voxel
// itself first, in the order their dual vertices make the quad (o-voxel's and CuMesh's table).
constexpr int kEdgeRing[3][4][3] = {
    {{0, 0, 0}, {0, 0, 1}, {0, 1, 1}, {0, 1, 0}},
    {{0, 0, 0}, {1, 0, 0}, {1, 0, 1}, {0, 0, 1}},
    {{0, 0, 0}, {0, 1, 0}, {1, 1, 0}, {1, 0, 0}},
};

// The sorted positions of the six voxels c + o, o in {0, 1}^3 other than 0 (slot
// upper_slot(o)), or -1, for the voxel at sorted position s: all the voxels around the three
// edges at a voxel's high corner. Voxels visited in ascending order (one per thread).
class UpperNeighbours {
 public:
  explicit UpperNeighbours(const std::vector<uint64_t>& keys)
      : keys_(keys), r01_(keys, 0, 1, 0, 1), r10_(keys, 1, 0, 0, 1), r11_(keys, 1, 1, 0, 0) {}
  void find(int64_t s, int64_t nb[6]) {
    const uint64_t k = keys_[s];
    const int64_t x = static_cast<int64_t>(k >> (2 * kKeyBits));
    const int64_t y = static_cast<int64_t>(k >> kKeyBits) & kMaxKeyCoord;
    const int64_t z = static_cast<int64_t>(k) & kMaxKeyCoord;
    const bool next = z < kMaxKeyCoord && s + 1 < static_cast<int64_t>(keys_.size()) &&
                      keys_[s + 1] == k + 1;
    nb[0] = next ? s + 1 : -1;
    r01_.find(x, y, z, nb + 1);
    r10_.find(x, y, z, nb + 3);
    r11_.find(x, y, z, nb + 5);
  }

 private:
  const std::vector<uint64_t>& keys_;
  Row r01_, r10_, r11_;
};

// The sorted positions of the four voxels around the edge along `axis` at the high corner of
// the voxel at sorted position s (nb: UpperNeighbours' answer for s), in kEdgeRing's order;
// false when one of them is absent (no quad there).
inline bool edge_ring(int64_t s, const int64_t nb[6], int axis, int64_t ring[4]) {
  ring[0] = s;
  for (int j = 1; j < 4; ++j) {
    ring[j] = nb[upper_slot(kEdgeRing[axis][j])];
    if (ring[j] < 0) return false;
  }
  return true;
}

}  // namespace s3d::mesh::detail
