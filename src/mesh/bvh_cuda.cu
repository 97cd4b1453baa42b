#include "mesh/bvh_cuda.h"

#include <cuda_runtime.h>

#include <cfloat>
#include <cstring>
#include <vector>

#include "core/cuda_util.h"
#include "mesh/bvh_device.cuh"

namespace s3d::mesh {
namespace {

__global__ void closest_kernel(DeviceBvh::View bvh, const float* __restrict__ points, int64_t n,
                               ClosestHit* __restrict__ out) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= n) return;
  const float p[3] = {points[3 * i], points[3 * i + 1], points[3 * i + 2]};
  out[i] = closest_on_device(bvh, p);
}

}  // namespace

DeviceBvh::DeviceBvh(const Bvh& bvh) {
  const auto& nodes = bvh.nodes();
  const auto& order = bvh.order();
  const int64_t F = static_cast<int64_t>(order.size());
  const std::vector<float> corners = bvh.leaf_corners();
  const cudaStream_t stream = current_stream();
  const int64_t node_bytes = static_cast<int64_t>(nodes.size() * sizeof(Bvh::Node));
  nodes_ = Tensor::empty({node_bytes / 4}, DType::I32, Device::CUDA);
  corners_ = Tensor::empty({F, 9}, DType::F32, Device::CUDA);
  face_of_ = Tensor::empty({F}, DType::I32, Device::CUDA);
  S3D_CUDA_CHECK(cudaMemcpyAsync(nodes_.data(), nodes.data(), node_bytes, cudaMemcpyHostToDevice,
                                 stream));
  S3D_CUDA_CHECK(cudaMemcpyAsync(corners_.data(), corners.data(), corners.size() * sizeof(float),
                                 cudaMemcpyHostToDevice, stream));
  S3D_CUDA_CHECK(cudaMemcpyAsync(face_of_.data(), order.data(), order.size() * sizeof(int32_t),
                                 cudaMemcpyHostToDevice, stream));
  synchronize();  // the host copies above die with this scope
}

DeviceBvh::View DeviceBvh::view() const {
  return {static_cast<const Bvh::Node*>(nodes_.data()), corners_.data_as<float>(),
          face_of_.data_as<int32_t>()};
}

void DeviceBvh::closest_many(const float* points, int64_t n, ClosestHit* out) const {
  if (n == 0) return;
  constexpr int kThreads = 128;
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  closest_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, current_stream()>>>(view(), points,
                                                                                 n, out);
  after_launch("mesh_closest_point");
}

void DeviceBvh::closest_many_host(const float* points, int64_t n, ClosestHit* out) const {
  constexpr int64_t kChunk = int64_t{1} << 22;  // 48 MiB of points, 80 MiB of hits
  const int64_t chunk = n < kChunk ? n : kChunk;
  Tensor d_pts = Tensor::empty({3 * chunk}, DType::F32, Device::CUDA);
  Tensor d_hits = Tensor::empty({chunk * int64_t{sizeof(ClosestHit)} / 4}, DType::I32, Device::CUDA);
  const cudaStream_t stream = current_stream();
  for (int64_t begin = 0; begin < n; begin += chunk) {
    const int64_t m = n - begin < chunk ? n - begin : chunk;
    S3D_CUDA_CHECK(cudaMemcpyAsync(d_pts.data(), points + 3 * begin, 3 * m * sizeof(float),
                                   cudaMemcpyHostToDevice, stream));
    closest_many(d_pts.data_as<float>(), m, static_cast<ClosestHit*>(d_hits.data()));
    S3D_CUDA_CHECK(cudaMemcpyAsync(out + begin, d_hits.data(), m * sizeof(ClosestHit),
                                   cudaMemcpyDeviceToHost, stream));
    S3D_CUDA_CHECK(cudaStreamSynchronize(stream));
  }
}

}  // namespace s3d::mesh
