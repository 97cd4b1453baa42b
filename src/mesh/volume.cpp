// The sparse attribute volume (volume.h): an open-addressing hash from a voxel's linear index
// (x * H + y) * D + z to its row, and FlexGEMM-style trilinear sampling over the present voxels.
#include "mesh/volume.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "core/error.h"

namespace s3d::mesh {
namespace {

// A 64-bit finaliser (splitmix64): linear indices of neighbouring voxels differ in their low
// bits only, and linear probing needs those spread over the whole table.
uint64_t mix(uint64_t k) {
  k ^= k >> 30;
  k *= 0xbf58476d1ce4e5b9ull;
  k ^= k >> 27;
  k *= 0x94d049bb133111ebull;
  k ^= k >> 31;
  return k;
}

// A point far enough outside the grid (or not finite) has no voxel among its eight
// neighbours; checked in double before any float-to-int conversion, which would be undefined.
bool outside_reach(const float g[3], const std::array<int32_t, 3>& size) {
  for (int k = 0; k < 3; ++k) {
    const double v = g[k];
    if (!(v > -1.0 && v < double(size[k]) + 1.0)) return true;
  }
  return false;
}

}  // namespace

SparseVolume::SparseVolume(std::vector<int32_t> coords, std::vector<float> attrs, int32_t channels,
                           std::array<int32_t, 3> size)
    : coords_(std::move(coords)), attrs_(std::move(attrs)), channels_(channels), size_(size) {
  S3D_CHECK(size[0] > 0 && size[1] > 0 && size[2] > 0, "SparseVolume: grid size (", size[0], ", ",
            size[1], ", ", size[2], ") must be positive");
  // The linear index must fit an int64 (and leave the -1 sentinel free).
  S3D_CHECK(double(size[0]) * size[1] * size[2] < 4.0e18, "SparseVolume: grid size (", size[0],
            ", ", size[1], ", ", size[2], ") has too many cells for a 64-bit index");
  S3D_CHECK(channels > 0, "SparseVolume: channels must be positive (got ", channels, ")");
  S3D_CHECK(coords_.size() % 3 == 0, "SparseVolume: coords must be whole triples (", coords_.size(),
            " values)");
  const int64_t n = num_voxels();
  S3D_CHECK(n < (int64_t(1) << 31) - 1, "SparseVolume: ", n, " voxels exceed the int32 rows");
  S3D_CHECK(static_cast<int64_t>(attrs_.size()) == n * channels, "SparseVolume: ", n, " voxels of ",
            channels, " channels need ", n * channels, " attributes, got ", attrs_.size());
  for (int64_t i = 0; i < n; ++i) {
    const int32_t* c = &coords_[3 * i];
    for (int k = 0; k < 3; ++k) {
      S3D_CHECK(c[k] >= 0 && c[k] < size[k], "SparseVolume: voxel ", i, " (", c[0], ", ", c[1],
                ", ", c[2], ") lies outside the grid (", size[0], ", ", size[1], ", ", size[2],
                ")");
    }
  }
  for (int64_t i = 0; i < n * channels; ++i) {
    S3D_CHECK(std::isfinite(attrs_[i]), "SparseVolume: voxel ", i / channels, " channel ",
              i % channels, " is not finite (", attrs_[i], ")");
  }
  // A load factor of at most 1/2 keeps probe sequences short.
  uint64_t capacity = 16;
  while (capacity < 2 * static_cast<uint64_t>(n)) capacity *= 2;
  mask_ = capacity - 1;
  keys_.assign(capacity, -1);
  values_.assign(capacity, -1);
  for (int64_t i = 0; i < n; ++i) {
    const int32_t* c = &coords_[3 * i];
    const int64_t key = (int64_t(c[0]) * size[1] + c[1]) * size[2] + c[2];
    uint64_t slot = mix(static_cast<uint64_t>(key)) & mask_;
    while (keys_[slot] != -1) {
      S3D_CHECK(keys_[slot] != key, "SparseVolume: voxel ", i, " (", c[0], ", ", c[1], ", ", c[2],
                ") repeats voxel ", values_[slot]);
      slot = (slot + 1) & mask_;
    }
    keys_[slot] = key;
    values_[slot] = static_cast<int32_t>(i);
  }
}

int64_t SparseVolume::find(int32_t x, int32_t y, int32_t z) const {
  if (x < 0 || y < 0 || z < 0 || x >= size_[0] || y >= size_[1] || z >= size_[2]) return -1;
  const int64_t key = (int64_t(x) * size_[1] + y) * size_[2] + z;
  uint64_t slot = mix(static_cast<uint64_t>(key)) & mask_;
  while (true) {
    const int64_t k = keys_[slot];
    if (k == key) return values_[slot];
    if (k == -1) return -1;
    slot = (slot + 1) & mask_;
  }
}

void SparseVolume::sample_trilinear(const float* points, int64_t n, float* out) const {
  const int32_t C = channels_;
#pragma omp parallel for schedule(static) if (n > 4096)
  for (int64_t i = 0; i < n; ++i) {
    const float* g = points + 3 * i;
    float* o = out + C * i;
    std::fill(o, o + C, 0.0f);
    if (outside_reach(g, size_)) continue;
    // Voxel x has its centre at x + 0.5: the two neighbours along an axis are floor(g - 0.5)
    // and the next, with weights 1 - |g - x - 0.5| (FlexGEMM's grid_sample_3d).
    const int32_t base[3] = {static_cast<int32_t>(std::floor(g[0] - 0.5f)),
                             static_cast<int32_t>(std::floor(g[1] - 0.5f)),
                             static_cast<int32_t>(std::floor(g[2] - 0.5f))};
    int64_t row[8];
    float w[8];
    float w_sum = 0;
    for (int j = 0; j < 8; ++j) {
      const int32_t x = base[0] + (j & 1), y = base[1] + ((j >> 1) & 1),
                    z = base[2] + ((j >> 2) & 1);
      row[j] = find(x, y, z);
      w[j] = 0;
      if (row[j] < 0) continue;
      w[j] = (1 - std::fabs(g[0] - x - 0.5f)) * (1 - std::fabs(g[1] - y - 0.5f)) *
             (1 - std::fabs(g[2] - z - 0.5f));
      w_sum += w[j];
    }
    // Renormalised over the present voxels; the floor on the sum is the reference's, so a
    // point whose present neighbours all have zero weight samples to 0 as there.
    const float denom = std::max(w_sum, 1e-12f);
    for (int j = 0; j < 8; ++j) {
      if (row[j] < 0) continue;
      const float wj = w[j] / denom;
      const float* a = &attrs_[row[j] * C];
      for (int32_t c = 0; c < C; ++c) o[c] += wj * a[c];
    }
  }
}

}  // namespace s3d::mesh
