// The sparse attribute volume of a TRELLIS.2 asset: L voxels of a grid, each with C float
// channels (base colour, metallic, roughness, alpha, ...), and the trilinear sampling that
// to_glb bakes textures with (FlexGEMM's grid_sample_3d, mode 'trilinear'): voxel centres at
// integer + 0.5 in grid units, the eight surrounding voxels weighted by the usual trilinear
// weights, absent voxels left out and the weights of the present ones renormalised to sum 1;
// a point with no present neighbour samples to 0.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "mesh/volume_sample.h"

namespace s3d::mesh {

class SparseVolume {
 public:
  // coords: 3 int32 per voxel in [0, size); attrs: channels floats per voxel. Throws
  // s3d::Error naming the first voxel outside the grid, a repeated voxel, a non-finite
  // attribute, or a size that is not positive.
  SparseVolume(std::vector<int32_t> coords, std::vector<float> attrs, int32_t channels,
               std::array<int32_t, 3> size);

  int32_t channels() const { return channels_; }
  int64_t num_voxels() const { return static_cast<int64_t>(coords_.size() / 3); }
  // Index of voxel (x, y, z), or -1.
  int64_t find(int32_t x, int32_t y, int32_t z) const;
  // out[channels * i ...] for points[3i..3i+2] in grid units; parallel over the points.
  void sample_trilinear(const float* points, int64_t n, float* out) const;
  // The hash table and the attributes as arrays (volume_sample.h), valid while this lives: the
  // CPU's lookups and the device copy's (bake_cuda.h).
  VolumeView view() const;
  const std::vector<int64_t>& hash_keys() const { return keys_; }
  const std::vector<int32_t>& hash_rows() const { return values_; }
  const std::vector<float>& attrs() const { return attrs_; }

 private:
  std::vector<int32_t> coords_;
  std::vector<float> attrs_;
  int32_t channels_;
  std::array<int32_t, 3> size_;
  std::vector<int64_t> keys_;    // open addressing, -1 empty
  std::vector<int32_t> values_;
  uint64_t mask_ = 0;
};

}  // namespace s3d::mesh
