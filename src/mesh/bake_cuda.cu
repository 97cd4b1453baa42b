#include "mesh/bake_cuda.h"

#include <cuda_runtime.h>

#include <algorithm>

#include "core/cuda_util.h"
#include "mesh/bvh_device.cuh"
#include "mesh/device_buffer.cuh"
#include "mesh/volume_sample.h"

namespace s3d::mesh {
namespace {

struct Grid {
  float origin[3], voxel[3];
};

__global__ void surface_samples_kernel(DeviceBvh::View bvh, VolumeView volume, Grid grid,
                                       const float* __restrict__ points, int64_t n,
                                       float* __restrict__ out) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= n) return;
  const float p[3] = {points[3 * i], points[3 * i + 1], points[3 * i + 2]};
  int32_t slot = -1;
  const ClosestHit h = closest_on_device(bvh, p, &slot);
  float q[3] = {p[0], p[1], p[2]};
  if (h.face >= 0) {
    const float* c = bvh.corners + 9 * int64_t{slot};
    for (int k = 0; k < 3; ++k) q[k] = h.uvw[0] * c[k] + h.uvw[1] * c[3 + k] + h.uvw[2] * c[6 + k];
  }
  float g[3];
  for (int k = 0; k < 3; ++k) g[k] = (q[k] - grid.origin[k]) / grid.voxel[k];
  volume_sample(volume, g, out + int64_t{volume.channels} * i);
}

}  // namespace

DeviceVolume::DeviceVolume(const SparseVolume& volume) : host_(volume.view()) {
  const cudaStream_t stream = current_stream();
  const auto upload = [stream](Tensor& t, const void* src, size_t bytes) {
    t = Tensor::empty({static_cast<int64_t>((std::max<size_t>(bytes, 4) + 3) / 4)}, DType::I32,
                      Device::CUDA);
    S3D_CUDA_CHECK(cudaMemcpyAsync(t.data(), src, bytes, cudaMemcpyHostToDevice, stream));
  };
  upload(keys_, volume.hash_keys().data(), volume.hash_keys().size() * sizeof(int64_t));
  upload(rows_, volume.hash_rows().data(), volume.hash_rows().size() * sizeof(int32_t));
  upload(attrs_, volume.attrs().data(), volume.attrs().size() * sizeof(float));
  synchronize();
}

VolumeView DeviceVolume::view() const {
  VolumeView v = host_;
  v.keys = static_cast<const int64_t*>(keys_.data());
  v.rows = rows_.data_as<int32_t>();
  v.attrs = attrs_.data_as<float>();
  return v;
}

void sample_surface_on_device(const DeviceBvh& bvh, const DeviceVolume& volume,
                              const float origin[3], const float voxel[3], const float* points,
                              int64_t n, float* out) {
  if (n == 0) return;
  constexpr int64_t kChunk = int64_t{1} << 21;
  const int64_t chunk = std::min(n, kChunk);
  const VolumeView v = volume.view();
  const int64_t C = v.channels;
  DeviceBuffer<float> d_pts(3 * chunk), d_out(C * chunk);
  Grid grid;
  for (int k = 0; k < 3; ++k) grid.origin[k] = origin[k], grid.voxel[k] = voxel[k];
  const cudaStream_t stream = current_stream();
  constexpr int kThreads = 128;
  for (int64_t begin = 0; begin < n; begin += chunk) {
    const int64_t m = std::min(chunk, n - begin);
    S3D_CUDA_CHECK(cudaMemcpyAsync(d_pts.get(), points + 3 * begin, 3 * m * sizeof(float),
                                   cudaMemcpyHostToDevice, stream));
    surface_samples_kernel<<<static_cast<unsigned>((m + kThreads - 1) / kThreads), kThreads, 0,
                             stream>>>(bvh.view(), v, grid, d_pts.get(), m, d_out.get());
    after_launch("mesh_surface_samples");
    S3D_CUDA_CHECK(cudaMemcpyAsync(out + C * begin, d_out.get(), C * m * sizeof(float),
                                   cudaMemcpyDeviceToHost, stream));
    S3D_CUDA_CHECK(cudaStreamSynchronize(stream));
  }
}

}  // namespace s3d::mesh
