#include "mesh/bvh_cuda.h"

#include <cuda_runtime.h>

#include <cub/device/device_radix_sort.cuh>

#include <algorithm>
#include <cfloat>
#include <limits>
#include <cstring>
#include <vector>

#include "core/cuda_util.h"
#include "mesh/bvh_device.cuh"
#include "mesh/device_buffer.cuh"

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

// ---- the linear BVH, built on the device ----------------------------------------------------
namespace s3d::mesh {
namespace {

constexpr int kLeafFaces = 4;     // faces per leaf (the CPU tree's largest leaf)
constexpr int kMortonBits = 10;   // per axis; the key is (code << 32) | face index

__device__ void face_corner(const float* pos, const int32_t* faces, int64_t f, int k, float c[3]) {
  const int64_t v = faces[3 * f + k];
  c[0] = pos[3 * v], c[1] = pos[3 * v + 1], c[2] = pos[3 * v + 2];
}

// Floats ordered as integers, for atomic min and max of box bounds: IEEE bits of a non-negative
// float order as its signed integer; of a negative one, reversed (as unsigned).
__device__ void atomic_min_float(float* at, float v) {
  if (v >= 0) atomicMin(reinterpret_cast<int*>(at), __float_as_int(v));
  else atomicMax(reinterpret_cast<unsigned*>(at), __float_as_uint(v));
}
__device__ void atomic_max_float(float* at, float v) {
  if (v >= 0) atomicMax(reinterpret_cast<int*>(at), __float_as_int(v));
  else atomicMin(reinterpret_cast<unsigned*>(at), __float_as_uint(v));
}

__device__ void centroid(const float* pos, const int32_t* faces, int64_t f, float out[3]) {
  float a[3], b[3], c[3];
  face_corner(pos, faces, f, 0, a);
  face_corner(pos, faces, f, 1, b);
  face_corner(pos, faces, f, 2, c);
  for (int k = 0; k < 3; ++k) out[k] = (a[k] + b[k] + c[k]) / 3.0f;
}

// bounds[0..2] min, [3..5] max of the face centroids (bounds preset to +inf and -inf).
__global__ void centroid_bounds_kernel(const float* __restrict__ pos,
                                       const int32_t* __restrict__ faces, int64_t F,
                                       float* bounds) {
  float lo[3] = {INFINITY, INFINITY, INFINITY}, hi[3] = {-INFINITY, -INFINITY, -INFINITY};
  for (int64_t f = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; f < F;
       f += int64_t{gridDim.x} * blockDim.x) {
    float c[3];
    centroid(pos, faces, f, c);
    for (int k = 0; k < 3; ++k) lo[k] = fminf(lo[k], c[k]), hi[k] = fmaxf(hi[k], c[k]);
  }
  for (int k = 0; k < 3; ++k) {
    for (int off = 16; off > 0; off /= 2) {
      lo[k] = fminf(lo[k], __shfl_down_sync(0xffffffffu, lo[k], off));
      hi[k] = fmaxf(hi[k], __shfl_down_sync(0xffffffffu, hi[k], off));
    }
  }
  if ((threadIdx.x & 31) == 0)
    for (int k = 0; k < 3; ++k) atomic_min_float(&bounds[k], lo[k]), atomic_max_float(&bounds[3 + k], hi[k]);
}

__device__ uint32_t spread_bits(uint32_t x) {  // 10 bits to every third of 30
  x = (x | (x << 16)) & 0x030000ffu;
  x = (x | (x << 8)) & 0x0300f00fu;
  x = (x | (x << 4)) & 0x030c30c3u;
  x = (x | (x << 2)) & 0x09249249u;
  return x;
}

__global__ void morton_keys_kernel(const float* __restrict__ pos, const int32_t* __restrict__ faces,
                                   int64_t F, const float* __restrict__ bounds,
                                   unsigned long long* __restrict__ keys) {
  const int64_t f = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (f >= F) return;
  float c[3];
  centroid(pos, faces, f, c);
  constexpr float kCells = float(1 << kMortonBits);
  uint32_t code = 0;
  for (int k = 0; k < 3; ++k) {
    const float extent = bounds[3 + k] - bounds[k];
    const float t = extent > 0 ? (c[k] - bounds[k]) / extent : 0.0f;
    const uint32_t cell = static_cast<uint32_t>(fminf(fmaxf(t * kCells, 0.0f), kCells - 1));
    code |= spread_bits(cell) << (2 - k);
  }
  keys[f] = (static_cast<unsigned long long>(code) << 32) | static_cast<uint32_t>(f);
}

// Leaf slot s holds face keys[s]'s low half: its corners in the face's own order.
__global__ void gather_corners_kernel(const float* __restrict__ pos,
                                      const int32_t* __restrict__ faces, int64_t F,
                                      const unsigned long long* __restrict__ keys,
                                      float* __restrict__ corners, int32_t* __restrict__ face_of) {
  const int64_t s = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (s >= F) return;
  const int32_t f = static_cast<int32_t>(keys[s] & 0xffffffffull);
  face_of[s] = f;
  for (int k = 0; k < 3; ++k) face_corner(pos, faces, f, k, corners + 9 * s + 3 * k);
}

// The length of the common prefix of leaf keys i and j, -1 when j is outside [0, n). The keys
// are distinct (a face index in the low half), so this is below 64 for i != j.
__device__ int prefix(const unsigned long long* keys, int64_t n, int64_t i, int64_t j) {
  if (j < 0 || j >= n) return -1;
  return __clzll(keys[kLeafFaces * i] ^ keys[kLeafFaces * j]);
}

// Internal node i of n - 1 (n leaves; the leaves are nodes n - 1 + j): its key range and its
// split (Karras 2012), children and parent links.
__global__ void hierarchy_kernel(const unsigned long long* __restrict__ keys, int64_t n,
                                 Bvh::Node* __restrict__ nodes, int32_t* __restrict__ parent) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= n - 1) return;
  const int d = prefix(keys, n, i, i + 1) > prefix(keys, n, i, i - 1) ? 1 : -1;
  const int floor_prefix = prefix(keys, n, i, i - d);
  int64_t reach = 2;
  while (prefix(keys, n, i, i + reach * d) > floor_prefix) reach *= 2;
  int64_t len = 0;
  for (int64_t t = reach / 2; t >= 1; t /= 2)
    if (prefix(keys, n, i, i + (len + t) * d) > floor_prefix) len += t;
  const int64_t j = i + len * d;
  const int node_prefix = prefix(keys, n, i, j);
  int64_t s = 0;
  for (int64_t t = (len + 1) / 2;; t = (t + 1) / 2) {
    if (prefix(keys, n, i, i + (s + t) * d) > node_prefix) s += t;
    if (t == 1) break;
  }
  const int64_t split = i + s * d + (d < 0 ? -1 : 0);
  const int64_t lo = i < j ? i : j, hi = i < j ? j : i;
  const int32_t left = static_cast<int32_t>(lo == split ? n - 1 + split : split);
  const int32_t right = static_cast<int32_t>(hi == split + 1 ? n - 1 + split + 1 : split + 1);
  Bvh::Node& nd = nodes[i];
  nd.left = left, nd.right = right, nd.first = 0, nd.count = 0;
  parent[left] = static_cast<int32_t>(i);
  parent[right] = static_cast<int32_t>(i);
}

// Each leaf's box from its faces' corners, then up the tree: of a node's two children, the
// second to finish writes the node's box (the first stops), so every box is written once,
// after both of its children's.
__global__ void refit_kernel(const float* __restrict__ corners, int64_t F, int64_t n,
                             Bvh::Node* nodes, const int32_t* __restrict__ parent,
                             int32_t* arrivals) {
  const int64_t j = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (j >= n) return;
  const int64_t first = kLeafFaces * j;
  const int64_t count = F - first < kLeafFaces ? F - first : kLeafFaces;
  float lo[3] = {INFINITY, INFINITY, INFINITY}, hi[3] = {-INFINITY, -INFINITY, -INFINITY};
  for (int64_t s = first; s < first + count; ++s)
    for (int c = 0; c < 3; ++c)
      for (int k = 0; k < 3; ++k) {
        const float v = corners[9 * s + 3 * c + k];
        lo[k] = fminf(lo[k], v), hi[k] = fmaxf(hi[k], v);
      }
  int64_t node = n - 1 + j;
  Bvh::Node& leaf = nodes[node];
  for (int k = 0; k < 3; ++k) leaf.lo[k] = lo[k], leaf.hi[k] = hi[k];
  leaf.left = -1, leaf.right = -1;
  leaf.first = static_cast<int32_t>(first), leaf.count = static_cast<int32_t>(count);
  while (node != 0) {
    __threadfence();
    const int32_t p = parent[node];
    if (atomicAdd(&arrivals[p], 1) == 0) return;  // the sibling is not done: it goes on
    __threadfence();
    volatile Bvh::Node* v = nodes;
    const int32_t l = nodes[p].left, r = nodes[p].right;
    for (int k = 0; k < 3; ++k) {
      v[p].lo[k] = fminf(v[l].lo[k], v[r].lo[k]);
      v[p].hi[k] = fmaxf(v[l].hi[k], v[r].hi[k]);
    }
    node = p;
  }
}

unsigned blocks_for(int64_t n, int threads) {
  return static_cast<unsigned>((std::max<int64_t>(n, 1) + threads - 1) / threads);
}

}  // namespace

DeviceBvh::DeviceBvh(const TriMesh& mesh) {
  const int64_t F = mesh.num_faces(), V = mesh.num_vertices();
  S3D_CHECK(F > 0 && F < std::numeric_limits<int32_t>::max() / 2, "BVH mesh: ", F,
            " faces is outside what a device BVH of 32-bit indices holds");
  const cudaStream_t stream = current_stream();
  constexpr int kThreads = 256;
  const int64_t n = (F + kLeafFaces - 1) / kLeafFaces;  // leaves
  corners_ = Tensor::empty({F, 9}, DType::F32, Device::CUDA);
  face_of_ = Tensor::empty({F}, DType::I32, Device::CUDA);
  {
    DeviceBuffer<float> pos(3 * V);
    DeviceBuffer<int32_t> faces(3 * F);
    S3D_CUDA_CHECK(cudaMemcpyAsync(pos.get(), mesh.positions.data(), 3 * V * sizeof(float),
                                   cudaMemcpyHostToDevice, stream));
    S3D_CUDA_CHECK(cudaMemcpyAsync(faces.get(), mesh.faces.data(), 3 * F * sizeof(int32_t),
                                   cudaMemcpyHostToDevice, stream));
    DeviceBuffer<float> bounds(6);
    const float init[6] = {INFINITY, INFINITY, INFINITY, -INFINITY, -INFINITY, -INFINITY};
    S3D_CUDA_CHECK(cudaMemcpyAsync(bounds.get(), init, sizeof init, cudaMemcpyHostToDevice, stream));
    centroid_bounds_kernel<<<std::min(blocks_for(F, kThreads), 1024u), kThreads, 0, stream>>>(
        pos.get(), faces.get(), F, bounds.get());
    after_launch("mesh_bvh_bounds");
    DeviceBuffer<unsigned long long> keys(F), sorted(F);
    morton_keys_kernel<<<blocks_for(F, kThreads), kThreads, 0, stream>>>(
        pos.get(), faces.get(), F, bounds.get(), keys.get());
    after_launch("mesh_bvh_keys");
    size_t bytes = 0;
    const int end_bit = 32 + 3 * kMortonBits;
    S3D_CUDA_CHECK(cub::DeviceRadixSort::SortKeys(nullptr, bytes, keys.get(), sorted.get(), F, 0,
                                                  end_bit, stream));
    {
      DeviceBuffer<uint8_t> temp(static_cast<int64_t>(bytes));
      S3D_CUDA_CHECK(cub::DeviceRadixSort::SortKeys(temp.get(), bytes, keys.get(), sorted.get(),
                                                    F, 0, end_bit, stream));
    }
    gather_corners_kernel<<<blocks_for(F, kThreads), kThreads, 0, stream>>>(
        pos.get(), faces.get(), F, sorted.get(), corners_.data_as<float>(),
        face_of_.data_as<int32_t>());
    after_launch("mesh_bvh_corners");
    nodes_ = Tensor::empty({(2 * n - 1) * int64_t{sizeof(Bvh::Node)} / 4}, DType::I32,
                           Device::CUDA);
    auto* nodes = static_cast<Bvh::Node*>(nodes_.data());
    DeviceBuffer<int32_t> parent(2 * n - 1), arrivals(n);
    S3D_CUDA_CHECK(cudaMemsetAsync(arrivals.get(), 0, n * sizeof(int32_t), stream));
    hierarchy_kernel<<<blocks_for(n - 1, kThreads), kThreads, 0, stream>>>(sorted.get(), n, nodes,
                                                                             parent.get());
    after_launch("mesh_bvh_hierarchy");
    refit_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(
        corners_.data_as<float>(), F, n, nodes, parent.get(), arrivals.get());
    after_launch("mesh_bvh_refit");
    synchronize();  // the host arrays and the scratch die with this scope
  }
}

}  // namespace s3d::mesh
