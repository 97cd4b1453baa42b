// The sparse volume's hash lookup and trilinear sample as plain functions over raw arrays,
// shared by the CPU (volume.cpp) and the GPU (bake_cuda.cu) so that both give the same bits:
// the same operations in the same order (the build turns off FMA contraction for host and
// device code alike).
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define S3D_VOLUME_HD __host__ __device__ __forceinline__
#else
#define S3D_VOLUME_HD inline
#endif

namespace s3d::mesh {

// The volume as arrays: an open-addressing table from a voxel's linear index
// (x * size[1] + y) * size[2] + z to its row (-1 keys are empty slots), and the rows' channels.
struct VolumeView {
  const int64_t* keys = nullptr;
  const int32_t* rows = nullptr;
  const float* attrs = nullptr;
  uint64_t mask = 0;  // table size - 1 (a power of two)
  int32_t size[3] = {0, 0, 0};
  int32_t channels = 0;
};

// A 64-bit finaliser (splitmix64): linear indices of neighbouring voxels differ in their low
// bits only, and linear probing needs those spread over the whole table.
S3D_VOLUME_HD uint64_t volume_hash(uint64_t k) {
  k ^= k >> 30;
  k *= 0xbf58476d1ce4e5b9ull;
  k ^= k >> 27;
  k *= 0x94d049bb133111ebull;
  k ^= k >> 31;
  return k;
}

// Row of voxel (x, y, z), or -1.
S3D_VOLUME_HD int64_t volume_find(const VolumeView& v, int32_t x, int32_t y, int32_t z) {
  if (x < 0 || y < 0 || z < 0 || x >= v.size[0] || y >= v.size[1] || z >= v.size[2]) return -1;
  const int64_t key = (int64_t(x) * v.size[1] + y) * v.size[2] + z;
  uint64_t slot = volume_hash(static_cast<uint64_t>(key)) & v.mask;
  while (true) {
    const int64_t k = v.keys[slot];
    if (k == key) return v.rows[slot];
    if (k == -1) return -1;
    slot = (slot + 1) & v.mask;
  }
}

// o[0, channels) = the trilinear sample at g (grid units), FlexGEMM's grid_sample_3d rule
// (volume.h): voxel x has its centre at x + 0.5, the eight neighbours weighted by
// 1 - |g - x - 0.5| per axis, absent ones left out and the rest renormalised; 0 where none is
// present or g is out of reach (checked in double before any float-to-int conversion).
S3D_VOLUME_HD void volume_sample(const VolumeView& v, const float g[3], float* o) {
  const int32_t C = v.channels;
  for (int32_t c = 0; c < C; ++c) o[c] = 0.0f;
  for (int k = 0; k < 3; ++k) {
    const double x = g[k];
    if (!(x > -1.0 && x < double(v.size[k]) + 1.0)) return;
  }
  const int32_t base[3] = {static_cast<int32_t>(floorf(g[0] - 0.5f)),
                           static_cast<int32_t>(floorf(g[1] - 0.5f)),
                           static_cast<int32_t>(floorf(g[2] - 0.5f))};
  int64_t row[8];
  float w[8];
  float w_sum = 0;
  for (int j = 0; j < 8; ++j) {
    const int32_t x = base[0] + (j & 1), y = base[1] + ((j >> 1) & 1), z = base[2] + ((j >> 2) & 1);
    row[j] = volume_find(v, x, y, z);
    w[j] = 0;
    if (row[j] < 0) continue;
    w[j] = (1 - fabsf(g[0] - x - 0.5f)) * (1 - fabsf(g[1] - y - 0.5f)) *
           (1 - fabsf(g[2] - z - 0.5f));
    w_sum += w[j];
  }
  // Renormalised over the present voxels; the floor on the sum is the reference's, so a point
  // whose present neighbours all have zero weight samples to 0 as there.
  const float denom = w_sum > 1e-12f ? w_sum : 1e-12f;
  for (int j = 0; j < 8; ++j) {
    if (row[j] < 0) continue;
    const float wj = w[j] / denom;
    const float* a = v.attrs + row[j] * C;
    for (int32_t c = 0; c < C; ++c) o[c] += wj * a[c];
  }
}

}  // namespace s3d::mesh
