// The bake's surface samples on the GPU: each texel's point taken to the closest point of the
// decoded surface (the device BVH), into grid units, and sampled from the attribute volume's
// device copy, in one kernel. The arithmetic is the CPU's (bvh_device.cuh, volume_sample.h and
// the same projection, in the same order), so the samples are the CPU bake's bit for bit
// (tests/gpu/test_mesh_gpu.cpp).
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "mesh/bvh_cuda.h"
#include "mesh/volume.h"

namespace s3d::mesh {

// The attribute volume's hash table and rows on the current CUDA device.
class DeviceVolume {
 public:
  // Uploads (synchronously). Throws s3d::Error when the device allocation fails.
  explicit DeviceVolume(const SparseVolume& volume);
  VolumeView view() const;

 private:
  Tensor keys_, rows_, attrs_;
  VolumeView host_;  // the host view's mask, size and channels
};

// out[channels * i ...] for the host points[3i..3i+2] (world units), i < n: the volume sampled
// at the closest point of the BVH's surface, in grid units (point - origin) / voxel. Chunked
// and synchronous; n may be 0.
void sample_surface_on_device(const DeviceBvh& bvh, const DeviceVolume& volume,
                              const float origin[3], const float voxel[3], const float* points,
                              int64_t n, float* out);

}  // namespace s3d::mesh
