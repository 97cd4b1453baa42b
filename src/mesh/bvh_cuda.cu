#include "mesh/bvh_cuda.h"

#include <cuda_runtime.h>

#include <cfloat>
#include <cstring>
#include <vector>

#include "core/cuda_util.h"
#include "mesh/closest_point.h"

namespace s3d::mesh {
namespace {

constexpr int kStack = 96;  // the build bounds the depth at 48 + 31 levels

__global__ void closest_kernel(const Bvh::Node* __restrict__ nodes,
                               const float* __restrict__ corners,
                               const int32_t* __restrict__ face_of,
                               const float* __restrict__ points, int64_t n,
                               ClosestHit* __restrict__ out) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= n) return;
  const float p[3] = {points[3 * i], points[3 * i + 1], points[3 * i + 2]};
  float best_d2 = FLT_MAX;
  int32_t best_face = -1;
  float best_uvw[3] = {0, 0, 0};
  int32_t stack[kStack];
  int top = 0;
  stack[top++] = 0;
  while (top > 0) {
    const Bvh::Node& nd = nodes[stack[--top]];
    if (box_distance2(nd.lo, nd.hi, p) > best_d2) continue;
    if (nd.left < 0) {
      for (int32_t s = nd.first; s < nd.first + nd.count; ++s) {
        const float* c = corners + 9 * int64_t{s};
        float uvw[3];
        const float d2 = closest_on_triangle(p, c, c + 3, c + 6, uvw);
        const int32_t f = face_of[s];
        if (d2 < best_d2 || (d2 == best_d2 && f < best_face)) {
          best_d2 = d2;
          best_face = f;
          best_uvw[0] = uvw[0], best_uvw[1] = uvw[1], best_uvw[2] = uvw[2];
        }
      }
      continue;
    }
    const Bvh::Node& l = nodes[nd.left];
    const Bvh::Node& r = nodes[nd.right];
    const float dl = box_distance2(l.lo, l.hi, p), dr = box_distance2(r.lo, r.hi, p);
    if (top + 2 > kStack) break;  // unreachable for trees this build makes
    if (dl <= dr) {
      if (dr <= best_d2) stack[top++] = nd.right;
      if (dl <= best_d2) stack[top++] = nd.left;
    } else {
      if (dl <= best_d2) stack[top++] = nd.left;
      if (dr <= best_d2) stack[top++] = nd.right;
    }
  }
  ClosestHit h;
  h.distance = sqrtf(best_d2);
  h.face = best_face;
  h.uvw[0] = best_uvw[0], h.uvw[1] = best_uvw[1], h.uvw[2] = best_uvw[2];
  out[i] = h;
}

}  // namespace

DeviceBvh::DeviceBvh(const Bvh& bvh) {
  const auto& nodes = bvh.nodes();
  const auto& order = bvh.order();
  const TriMesh& m = bvh.mesh();
  const int64_t F = static_cast<int64_t>(order.size());
  std::vector<float> corners(9 * F);
  for (int64_t s = 0; s < F; ++s)
    for (int k = 0; k < 3; ++k)
      std::memcpy(&corners[9 * s + 3 * k], &m.positions[3 * m.faces[3 * order[s] + k]],
                  3 * sizeof(float));
  const int64_t node_bytes = static_cast<int64_t>(nodes.size() * sizeof(Bvh::Node));
  nodes_ = Tensor::empty({node_bytes / 4}, DType::I32, Device::CUDA);
  S3D_CUDA_CHECK(cudaMemcpyAsync(nodes_.data(), nodes.data(), node_bytes, cudaMemcpyHostToDevice,
                                 current_stream()));
  corners_ = Tensor::from_floats(corners, {F, 9}, DType::F32).to(Device::CUDA);
  face_of_ = Tensor::from_ints(order, {F}).to(Device::CUDA);
  synchronize();  // the host copies above die with this scope
}

void DeviceBvh::closest_many(const float* points, int64_t n, ClosestHit* out) const {
  if (n == 0) return;
  constexpr int kThreads = 128;
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  closest_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, current_stream()>>>(
      static_cast<const Bvh::Node*>(nodes_.data()), corners_.data_as<float>(),
      face_of_.data_as<int32_t>(), points, n, out);
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
