// Private to the voxel stages (dual_grid.cpp, remesh.cpp): integer voxel coordinates packed
// into one 64-bit key, a radix sort of keys, and neighbour look-ups for voxels visited in
// ascending key order. Sorted sweeps instead of a hash table: every look-up reads memory just
// ahead of the last one, where a hash would miss the cache on almost every probe. Not part of
// the layer's interface.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace s3d::mesh::detail {

// 21 bits per axis: coordinates in [0, 2^21). Keys order voxels by (x, y, z).
constexpr int kKeyBits = 21;
constexpr int64_t kMaxKeyCoord = (int64_t(1) << kKeyBits) - 1;

inline uint64_t pack_key(int64_t x, int64_t y, int64_t z) {
  return (static_cast<uint64_t>(x) << (2 * kKeyBits)) | (static_cast<uint64_t>(y) << kKeyBits) |
         static_cast<uint64_t>(z);
}

// The permutation that sorts `keys` ascending (stable): least-significant-digit radix sort,
// 11 bits a pass, as many passes as the largest key needs.
inline std::vector<int32_t> sort_order(const std::vector<uint64_t>& keys) {
  const int64_t n = static_cast<int64_t>(keys.size());
  std::vector<int32_t> order(n), tmp(n);
  for (int64_t i = 0; i < n; ++i) order[i] = static_cast<int32_t>(i);
  uint64_t top = 0;
  for (uint64_t k : keys) top = std::max(top, k);
  constexpr int kDigit = 11;
  constexpr uint64_t kMask = (1 << kDigit) - 1;
  for (int shift = 0; shift < 64 && (top >> shift) != 0; shift += kDigit) {
    std::vector<int64_t> count((1 << kDigit) + 1, 0);
    for (int64_t i = 0; i < n; ++i) ++count[((keys[i] >> shift) & kMask) + 1];
    for (int d = 0; d < (1 << kDigit); ++d) count[d + 1] += count[d];
    for (int64_t i = 0; i < n; ++i) {
      const int32_t o = order[i];
      tmp[count[(keys[o] >> shift) & kMask]++] = o;
    }
    order.swap(tmp);
  }
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
