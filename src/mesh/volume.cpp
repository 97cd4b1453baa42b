// The sparse attribute volume (volume.h): an open-addressing hash from a voxel's linear index
// (x * H + y) * D + z to its row, and FlexGEMM-style trilinear sampling over the present voxels.
#include "mesh/volume.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "core/error.h"

namespace s3d::mesh {

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
    uint64_t slot = volume_hash(static_cast<uint64_t>(key)) & mask_;
    while (keys_[slot] != -1) {
      S3D_CHECK(keys_[slot] != key, "SparseVolume: voxel ", i, " (", c[0], ", ", c[1], ", ", c[2],
                ") repeats voxel ", values_[slot]);
      slot = (slot + 1) & mask_;
    }
    keys_[slot] = key;
    values_[slot] = static_cast<int32_t>(i);
  }
}

VolumeView SparseVolume::view() const {
  VolumeView v;
  v.keys = keys_.data();
  v.rows = values_.data();
  v.attrs = attrs_.data();
  v.mask = mask_;
  for (int k = 0; k < 3; ++k) v.size[k] = size_[k];
  v.channels = channels_;
  return v;
}

int64_t SparseVolume::find(int32_t x, int32_t y, int32_t z) const {
  return volume_find(view(), x, y, z);
}

void SparseVolume::sample_trilinear(const float* points, int64_t n, float* out) const {
  const VolumeView v = view();
#pragma omp parallel for schedule(static) if (n > 4096)
  for (int64_t i = 0; i < n; ++i) volume_sample(v, points + 3 * i, out + int64_t{channels_} * i);
}

}  // namespace s3d::mesh
