// The narrow-band dual-contouring remesh on the GPU (remesh_cuda.h): the CPU's algorithm
// (remesh.cpp) with the same per-voxel rules (remesh_rules.h) and the BVH's own traversal
// (bvh_device.cuh), so the mesh is the CPU's bit for bit, vertices and faces in the same order.
// What differs is how neighbours are found: the CPU sorts the voxels and sweeps them in key
// order; here every thread looks its neighbours up in an open-addressing hash table of the
// voxels (key: the packed coordinates, value: the voxel's band-search index). Grid corners are
// numbered in band-search order rather than sorted order; that numbering never reaches the
// output. Compactions and numberings are exclusive sums (CUB), which keep the order.
#include "mesh/remesh_cuda.h"

#include <cuda_runtime.h>

#include <cub/device/device_scan.cuh>

#include <algorithm>
#include <chrono>
#include <limits>
#include <vector>

#include "core/cuda_util.h"
#include "core/tensor.h"
#include "mesh/bvh_device.cuh"
#include "mesh/device_buffer.cuh"
#include "mesh/remesh_rules.h"
#include "mesh/timing.h"

namespace s3d::mesh::detail {
namespace {

namespace rules = remesh_rules;
using Clock = std::chrono::steady_clock;

constexpr int kThreads = 128;
constexpr unsigned long long kEmpty = ~0ull;
constexpr int kKeyBits = 21;
constexpr int32_t kMaxKeyCoord = (1 << kKeyBits) - 1;

struct Slot {
  unsigned long long key;
  int32_t value;
  int32_t pad;
};

struct Grid {
  float res, scale, center[3];
};

template <class T>
using Buffer = DeviceBuffer<T>;

__device__ unsigned long long pack(int32_t x, int32_t y, int32_t z) {
  return (static_cast<unsigned long long>(x) << (2 * kKeyBits)) |
         (static_cast<unsigned long long>(y) << kKeyBits) | static_cast<unsigned long long>(z);
}

__device__ uint64_t slot_of(unsigned long long key, uint64_t mask) {
  return (key * 0x9E3779B97F4A7C15ull >> 20) & mask;
}

// The band-search index of the voxel at (x, y, z), or -1.
__device__ int32_t find(const Slot* table, uint64_t mask, int32_t x, int32_t y, int32_t z) {
  if (x < 0 || y < 0 || z < 0 || x > kMaxKeyCoord || y > kMaxKeyCoord || z > kMaxKeyCoord)
    return -1;
  const unsigned long long key = pack(x, y, z);
  for (uint64_t h = slot_of(key, mask);; h = (h + 1) & mask) {
    const unsigned long long k = table[h].key;
    if (k == key) return table[h].value;
    if (k == kEmpty) return -1;
  }
}

// The 3 x 3 x 3 block around voxel c (remesh_rules.h's slots).
__device__ void block27(const Slot* table, uint64_t mask, const int32_t c[3], int32_t nb[27]) {
  for (int dx = -1; dx <= 1; ++dx)
    for (int dy = -1; dy <= 1; ++dy)
      for (int dz = -1; dz <= 1; ++dz)
        nb[rules::block_slot(dx, dy, dz)] = find(table, mask, c[0] + dx, c[1] + dy, c[2] + dz);
}

__device__ void load(const int32_t* coords, int64_t i, int32_t c[3]) {
  for (int k = 0; k < 3; ++k) c[k] = coords[3 * i + k];
}

// ---- 1. Band search ----------------------------------------------------------------------

// Candidate c: the parent itself, or its child c % 8 when `split`.
__device__ void candidate(const int32_t* parents, int64_t c, bool split, int32_t out[3]) {
  const int64_t p = split ? c / 8 : c;
  for (int k = 0; k < 3; ++k)
    out[k] = split ? 2 * parents[3 * p + k] + rules::corner_offset(int(c % 8), k)
                   : parents[3 * p + k];
}

// keep[c]: the candidate is in the band; outside[c] (when given): wholly outside it.
__global__ void band_kernel(DeviceBvh::View bvh, const int32_t* parents, int64_t n, bool split,
                            Grid g, float eps, float limit, int32_t* keep, int32_t* outside) {
  const int64_t c = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (c >= n) return;
  int32_t v[3];
  candidate(parents, c, split, v);
  float p[3];
  for (int k = 0; k < 3; ++k)
    p[k] = rules::world(static_cast<float>(v[k]) + 0.5f, g.res, g.scale, g.center[k]);
  const float d = closest_on_device(bvh, p).distance;
  keep[c] = rules::in_band(d, eps, limit) ? 1 : 0;
  if (outside) outside[c] = rules::outside_band(d, eps, limit) ? 1 : 0;
}

__global__ void scatter_kernel(const int32_t* parents, int64_t n, bool split,
                               const int32_t* keep, const int32_t* at, int32_t* out) {
  const int64_t c = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (c >= n || !keep[c]) return;
  candidate(parents, c, split, out + 3 * int64_t{at[c]});
}

// ---- 2. Corners ----------------------------------------------------------------------------

__global__ void insert_kernel(const int32_t* coords, int64_t n, Slot* table, uint64_t mask) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= n) return;
  const unsigned long long key = pack(coords[3 * i], coords[3 * i + 1], coords[3 * i + 2]);
  for (uint64_t h = slot_of(key, mask);; h = (h + 1) & mask) {
    const unsigned long long prev = atomicCAS(&table[h].key, kEmpty, key);
    if (prev == kEmpty || prev == key) {
      table[h].value = static_cast<int32_t>(i);
      return;
    }
  }
}

__global__ void owners_kernel(const int32_t* coords, int64_t n, const Slot* table, uint64_t mask,
                              uint8_t* owned, int32_t* count) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= n) return;
  int32_t c[3], nb[27];
  load(coords, i, c);
  block27(table, mask, c, nb);
  const unsigned m = rules::owned_corners(nb);
  owned[i] = static_cast<uint8_t>(m);
  count[i] = rules::bit_count(m);
}

__global__ void corner_values_kernel(DeviceBvh::View bvh, const int32_t* coords, int64_t n,
                                     const uint8_t* owned, const int32_t* first, Grid g,
                                     float eps, float* values) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= n) return;
  int32_t c[3];
  load(coords, i, c);
  int64_t v = first[i];
  for (int e = 0; e < 8; ++e) {
    if (!(owned[i] >> e & 1)) continue;
    float p[3];
    for (int k = 0; k < 3; ++k)
      p[k] = rules::world(static_cast<float>(c[k] + rules::corner_offset(e, k)), g.res, g.scale,
                          g.center[k]);
    values[v++] = closest_on_device(bvh, p).distance - eps;
  }
}

// ---- 2b. The cavity fill (drop_cavities) ---------------------------------------------------
// The CPU's graph (remesh.cpp, fill_outside): the finest voxels' non-negative corners (node =
// vertex number), the cells the band search dropped as wholly outside (numbered after them,
// level by level; found through one hash table, the level in the key's x field above the
// coordinate bits) and the border (the last node). Union-find with links from a root to a
// smaller index by compare and swap: the sets, so the answer per corner, are the CPU's.

constexpr int kLevelShift = 15;  // coordinates stay below 2^14 (remesh.cpp's kMaxResolution)

__device__ int32_t uf_root(int32_t* parent, int32_t x) {
  for (;;) {
    const int32_t p = *reinterpret_cast<volatile int32_t*>(&parent[x]);
    if (p == x) return x;
    const int32_t gp = *reinterpret_cast<volatile int32_t*>(&parent[p]);
    if (gp == p) return p;
    *reinterpret_cast<volatile int32_t*>(&parent[x]) = gp;  // still an ancestor: links only add
    x = gp;
  }
}

__device__ void uf_unite(int32_t* parent, int32_t a, int32_t b) {
  for (;;) {
    a = uf_root(parent, a), b = uf_root(parent, b);
    if (a == b) return;
    if (a < b) {
      const int32_t t = a;
      a = b, b = t;
    }
    if (atomicCAS(&parent[a], a, b) == a) return;
  }
}

struct CellTable {
  const Slot* table;
  uint64_t mask;
  int32_t base;    // resolution of level 0
  int32_t border;  // the border's node
};

// The node of the outside leaf holding cell (x, y, z) of `level`, the border beyond the grid,
// else -1 (remesh.cpp's Fill::leaf).
__device__ int32_t leaf(const CellTable& t, int level, int32_t x, int32_t y, int32_t z) {
  const int32_t r = t.base << level;
  if (x < 0 || y < 0 || z < 0 || x >= r || y >= r || z >= r) return t.border;
  for (; level >= 0; --level, x >>= 1, y >>= 1, z >>= 1) {
    const int32_t v = find(t.table, t.mask, x | (level << kLevelShift), y, z);
    if (v >= 0) return v;
  }
  return -1;
}

__global__ void iota_kernel(int32_t* parent, int64_t n) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i < n) parent[i] = static_cast<int32_t>(i);
}

__global__ void insert_cells_kernel(const int32_t* cells, int64_t n, int level, int32_t first,
                                    Slot* table, uint64_t mask) {
  const int64_t j = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (j >= n) return;
  const unsigned long long key =
      pack(cells[3 * j] | (level << kLevelShift), cells[3 * j + 1], cells[3 * j + 2]);
  for (uint64_t h = slot_of(key, mask);; h = (h + 1) & mask)
    if (atomicCAS(&table[h].key, kEmpty, key) == kEmpty) {
      table[h].value = first + static_cast<int32_t>(j);
      return;
    }
}

__global__ void join_voxels_kernel(const int32_t* coords, int64_t n, const Slot* table,
                                   uint64_t mask, const uint8_t* owned, const int32_t* first,
                                   const float* values, CellTable cells, int finest,
                                   int32_t* parent) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= n) return;
  int32_t c[3], nb[27], vtx[8];
  load(coords, i, c);
  block27(table, mask, c, nb);
  bool out[8];
  for (int o = 0; o < 8; ++o) {
    vtx[o] = static_cast<int32_t>(rules::corner_vertex(nb, o, owned, first));
    out[o] = values[vtx[o]] >= 0;
  }
  for (int o = 0; o < 8; ++o)
    for (int a = 0; a < 3; ++a)
      if (!(o >> a & 1) && out[o] && out[o | 1 << a]) uf_unite(parent, vtx[o], vtx[o | 1 << a]);
  for (int a = 0; a < 3; ++a)
    for (int side = 0; side <= 1; ++side) {
      int d[3] = {0, 0, 0};
      d[a] = side ? 1 : -1;
      if (nb[rules::block_slot(d[0], d[1], d[2])] >= 0) continue;
      const int32_t node = leaf(cells, finest, c[0] + d[0], c[1] + d[1], c[2] + d[2]);
      if (node < 0) continue;
      for (int o = 0; o < 8; ++o)
        if ((o >> a & 1) == side && out[o]) uf_unite(parent, vtx[o], node);
    }
}

__global__ void join_cells_kernel(const int32_t* cells, int64_t n, int level, int32_t first,
                                  CellTable t, int32_t* parent) {
  const int64_t j = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (j >= n) return;
  for (int a = 0; a < 3; ++a)
    for (int side = -1; side <= 1; side += 2) {
      int32_t p[3] = {cells[3 * j], cells[3 * j + 1], cells[3 * j + 2]};
      p[a] += side;
      const int32_t node = leaf(t, level, p[0], p[1], p[2]);
      if (node >= 0) uf_unite(parent, first + static_cast<int32_t>(j), node);
    }
}

__global__ void reached_kernel(int32_t* parent, int64_t n, int32_t border, uint8_t* reached) {
  const int64_t v = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (v >= n) return;
  reached[v] = uf_root(parent, static_cast<int32_t>(v)) == uf_root(parent, border) ? 1 : 0;
}

// ---- 3. Dual contouring --------------------------------------------------------------------

// With `reached` (per grid vertex, the fill's answer), quads whose outer corner was not
// reached are left out; counts[0] += those, counts[1] += every sign-changing edge.
__global__ void contour_kernel(const int32_t* coords, int64_t n, const Slot* table,
                               uint64_t mask, const uint8_t* owned, const int32_t* first,
                               const float* values, const uint8_t* reached, float* dual,
                               int8_t* dir, unsigned long long* counts) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= n) return;
  int32_t c[3], nb[27];
  load(coords, i, c);
  block27(table, mask, c, nb);
  float val[8];
  unsigned got = 0;
  for (int e = 0; e < 8; ++e) {
    const int64_t v = rules::corner_vertex(nb, e, owned, first);
    val[e] = values[v];
    if (reached && reached[v]) got |= 1u << e;
  }
  int8_t* d = dir + 3 * i;
  rules::contour_voxel(val, c, dual + 3 * i, d);
  if (!reached) return;
  const int edges = (d[0] != 0) + (d[1] != 0) + (d[2] != 0);
  const int dropped = rules::drop_unreached(got, d);
  if (edges) atomicAdd(&counts[1], static_cast<unsigned long long>(edges));
  if (dropped) atomicAdd(&counts[0], static_cast<unsigned long long>(dropped));
}

// The four voxels around voxel i's high-corner edge on axis a; false when one is absent.
__device__ bool ring(const Slot* table, uint64_t mask, const int32_t c[3], int64_t i, int a,
                     int32_t out[4]) {
  out[0] = static_cast<int32_t>(i);
  for (int j = 1; j < 4; ++j) {
    const int o = rules::edge_ring_offset(a, j);
    out[j] = find(table, mask, c[0] + rules::corner_offset(o, 0),
                  c[1] + rules::corner_offset(o, 1), c[2] + rules::corner_offset(o, 2));
    if (out[j] < 0) return false;
  }
  return true;
}

__global__ void quads_kernel(const int32_t* coords, int64_t n, const Slot* table, uint64_t mask,
                             const int8_t* dir, int32_t* triangles, int32_t* referenced) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= n) return;
  int made = 0;
  if (dir[3 * i] | dir[3 * i + 1] | dir[3 * i + 2]) {
    int32_t c[3];
    load(coords, i, c);
    for (int a = 0; a < 3; ++a) {
      int32_t q[4];
      if (!dir[3 * i + a] || !ring(table, mask, c, i, a, q)) continue;
      ++made;
      for (int j = 0; j < 4; ++j) referenced[q[j]] = 1;  // every writer writes 1
    }
  }
  triangles[i] = 2 * made;
}

__global__ void positions_kernel(const float* dual, int64_t n, const int32_t* referenced,
                                 const int32_t* vertex_of, Grid g, float* positions) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= n || !referenced[i]) return;
  for (int k = 0; k < 3; ++k)
    positions[3 * int64_t{vertex_of[i]} + k] =
        rules::world(dual[3 * i + k], g.res, g.scale, g.center[k]);
}

__global__ void faces_kernel(const int32_t* coords, int64_t n, const Slot* table, uint64_t mask,
                             const int8_t* dir, const int32_t* start, const int32_t* vertex_of,
                             const float* positions, int32_t* faces) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= n || !(dir[3 * i] | dir[3 * i + 1] | dir[3 * i + 2])) return;
  int32_t c[3];
  load(coords, i, c);
  int64_t at = 3 * int64_t{start[i]};
  for (int a = 0; a < 3; ++a) {
    int32_t q[4];
    if (!dir[3 * i + a] || !ring(table, mask, c, i, a, q)) continue;
    for (int j = 0; j < 4; ++j) q[j] = vertex_of[q[j]];
    rules::split_quad(positions, q, dir[3 * i + a] == 1, faces + at);
    at += 6;
  }
}

// ---- Host side -----------------------------------------------------------------------------

unsigned blocks_for(int64_t n) { return grid_for(std::max<int64_t>(n, 1), kThreads); }

// out[0, n] = the exclusive sums of in[0, n) and their total; returns the total.
int64_t exclusive_sum(const int32_t* in, int32_t* out, int64_t n) {
  const cudaStream_t stream = current_stream();
  if (n > 0) {
    size_t bytes = 0;
    S3D_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(nullptr, bytes, in, out, n, stream));
    Buffer<uint8_t> temp(static_cast<int64_t>(bytes));
    S3D_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(temp.get(), bytes, in, out, n, stream));
  }
  int32_t last[2] = {0, 0};
  if (n > 0) {
    S3D_CUDA_CHECK(cudaMemcpyAsync(&last[0], out + n - 1, 4, cudaMemcpyDeviceToHost, stream));
    S3D_CUDA_CHECK(cudaMemcpyAsync(&last[1], in + n - 1, 4, cudaMemcpyDeviceToHost, stream));
  }
  S3D_CUDA_CHECK(cudaStreamSynchronize(stream));
  const int32_t total = last[0] + last[1];
  S3D_CUDA_CHECK(cudaMemcpyAsync(out + n, &total, 4, cudaMemcpyHostToDevice, stream));
  S3D_CUDA_CHECK(cudaStreamSynchronize(stream));  // `total` dies with this scope
  return total;
}

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// The cells the band search dropped as wholly outside the band, per level (3 ints each).
struct OutsideLevels {
  std::vector<Buffer<int32_t>> cells;
  std::vector<int64_t> count;
};

// The band's voxels at the finest level, in band-search order (3 ints each); the cells dropped
// as outside, per level, into `outside` when it is given.
Buffer<int32_t> band_voxels(const DeviceBvh::View& bvh, const RemeshOptions& o, int32_t base,
                            float eps, int64_t& n, RemeshStats& st, OutsideLevels* outside) {
  const cudaStream_t stream = current_stream();
  std::vector<int32_t> grid;
  grid.reserve(3 * size_t(base) * base * base);
  for (int32_t x = 0; x < base; ++x)
    for (int32_t y = 0; y < base; ++y)
      for (int32_t z = 0; z < base; ++z) grid.insert(grid.end(), {x, y, z});
  n = static_cast<int64_t>(grid.size() / 3);
  Buffer<int32_t> parents(3 * n);
  S3D_CUDA_CHECK(cudaMemcpyAsync(parents.get(), grid.data(), grid.size() * 4,
                                 cudaMemcpyHostToDevice, stream));
  bool split = false;
  for (int32_t res = base;;) {
    const int64_t candidates = split ? 8 * n : n;
    Grid g{static_cast<float>(res), o.scale, {o.center[0], o.center[1], o.center[2]}};
    const float limit = static_cast<float>(0.87 * double(o.scale) / res);
    Buffer<int32_t> keep(candidates + 1), at(candidates + 1);
    Buffer<int32_t> out(outside ? candidates + 1 : 1);
    band_kernel<<<blocks_for(candidates), kThreads, 0, stream>>>(
        bvh, parents.get(), candidates, split, g, eps, limit, keep.get(),
        outside ? out.get() : nullptr);
    after_launch("mesh_remesh_band");
    st.udf_queries += candidates;
    if (outside) {
      const int64_t count = exclusive_sum(out.get(), at.get(), candidates);
      Buffer<int32_t> cells(3 * count);
      scatter_kernel<<<blocks_for(candidates), kThreads, 0, stream>>>(
          parents.get(), candidates, split, out.get(), at.get(), cells.get());
      after_launch("mesh_remesh_band_outside");
      outside->cells.push_back(std::move(cells));
      outside->count.push_back(count);
    }
    const int64_t kept = exclusive_sum(keep.get(), at.get(), candidates);
    Buffer<int32_t> next(3 * kept);
    scatter_kernel<<<blocks_for(candidates), kThreads, 0, stream>>>(
        parents.get(), candidates, split, keep.get(), at.get(), next.get());
    after_launch("mesh_remesh_band_scatter");
    parents = std::move(next);
    n = kept;
    if (res >= o.resolution) break;
    check_level_size(8 * n, 2 * res);
    res *= 2;
    split = true;
  }
  return parents;
}

// The finest voxels and the band search's hash table and corners, as the stages after it use
// them.
struct Voxels {
  const int32_t* coords;
  int64_t n;
  const Slot* table;
  uint64_t mask;
  const uint8_t* owned;
  const int32_t* first;
};

// Per grid vertex: 1 when its space outside the band is joined to the grid's border.
Buffer<uint8_t> fill_outside(const Voxels& v, const float* values, int64_t nv,
                             const OutsideLevels& lv, int32_t base, cudaStream_t stream) {
  int64_t total = nv;
  std::vector<int64_t> firsts;
  for (const int64_t c : lv.count) firsts.push_back(total), total += c;
  S3D_CHECK(total < std::numeric_limits<int32_t>::max(), "remesh_narrow_band_dc: ", total,
            " nodes in the cavity fill, more than int32 indices can name");
  const int32_t border = static_cast<int32_t>(total);
  Buffer<int32_t> parent(total + 1);
  iota_kernel<<<blocks_for(total + 1), kThreads, 0, stream>>>(parent.get(), total + 1);
  after_launch("mesh_remesh_fill_init");
  uint64_t size = 1;
  while (size < 2 * uint64_t(total - nv) + 2) size *= 2;
  Buffer<Slot> table(static_cast<int64_t>(size));
  S3D_CUDA_CHECK(cudaMemsetAsync(table.get(), 0xFF, size * sizeof(Slot), stream));
  const int levels = static_cast<int>(lv.count.size());
  for (int l = 0; l < levels; ++l) {
    insert_cells_kernel<<<blocks_for(lv.count[l]), kThreads, 0, stream>>>(
        lv.cells[l].get(), lv.count[l], l, static_cast<int32_t>(firsts[l]), table.get(),
        size - 1);
    after_launch("mesh_remesh_fill_hash");
  }
  const CellTable t{table.get(), size - 1, base, border};
  join_voxels_kernel<<<blocks_for(v.n), kThreads, 0, stream>>>(
      v.coords, v.n, v.table, v.mask, v.owned, v.first, values, t, levels - 1, parent.get());
  after_launch("mesh_remesh_fill_voxels");
  for (int l = 0; l < levels; ++l) {
    join_cells_kernel<<<blocks_for(lv.count[l]), kThreads, 0, stream>>>(
        lv.cells[l].get(), lv.count[l], l, static_cast<int32_t>(firsts[l]), t, parent.get());
    after_launch("mesh_remesh_fill_cells");
  }
  Buffer<uint8_t> reached(nv);
  reached_kernel<<<blocks_for(nv), kThreads, 0, stream>>>(parent.get(), nv, border,
                                                          reached.get());
  after_launch("mesh_remesh_fill_reached");
  S3D_CUDA_CHECK(cudaStreamSynchronize(stream));
  return reached;
}

// Dual vertices and sign changes per voxel into dual and dir; with `reached`, the quads whose
// outer corner the fill did not reach left out (counted into st), unless that is all of them.
void contour_voxels(const Voxels& v, const float* values, const uint8_t* reached, float* dual,
                    int8_t* dir, RemeshStats& st, cudaStream_t stream) {
  Buffer<unsigned long long> counts(2);
  S3D_CUDA_CHECK(cudaMemsetAsync(counts.get(), 0, 16, stream));
  const auto run = [&](const uint8_t* r) {
    contour_kernel<<<blocks_for(v.n), kThreads, 0, stream>>>(
        v.coords, v.n, v.table, v.mask, v.owned, v.first, values, r, dual, dir, counts.get());
    after_launch("mesh_remesh_contour");
  };
  run(reached);
  unsigned long long got[2] = {0, 0};
  S3D_CUDA_CHECK(cudaMemcpyAsync(got, counts.get(), 16, cudaMemcpyDeviceToHost, stream));
  S3D_CUDA_CHECK(cudaStreamSynchronize(stream));
  st.cavity_quads = static_cast<int64_t>(got[0]);
  if (reached && got[1] > 0 && got[0] == got[1]) {  // nothing reached: keep every quad
    run(nullptr);
    S3D_CUDA_CHECK(cudaStreamSynchronize(stream));
    st.cavity_quads = 0, st.cavities_kept_all = true;
  }
}

// The contour's mesh: two triangles per sign-changing band edge (quads_kernel), a vertex per
// voxel that one references, positions from the voxels' dual points; copied to the host.
TriMesh mesh_from_contour(const int32_t* coords, int64_t n, const Slot* table, uint64_t mask,
                          const int8_t* dir, const float* dual, const Grid& g,
                          cudaStream_t stream) {
  Buffer<int32_t> triangles(n + 1), referenced(n + 1), start(n + 1), vertex_of(n + 1);
  S3D_CUDA_CHECK(cudaMemsetAsync(referenced.get(), 0, 4 * size_t(n + 1), stream));
  quads_kernel<<<blocks_for(n), kThreads, 0, stream>>>(coords, n, table, mask, dir,
                                                       triangles.get(), referenced.get());
  after_launch("mesh_remesh_quads");
  const int64_t nf = exclusive_sum(triangles.get(), start.get(), n);
  const int64_t nv = exclusive_sum(referenced.get(), vertex_of.get(), n);
  // Poisoned (NaN, -1): an element no kernel writes fails the comparison with the CPU.
  Buffer<float> positions(3 * nv);
  Buffer<int32_t> faces(3 * nf);
  S3D_CUDA_CHECK(cudaMemsetAsync(positions.get(), 0xFF, 12 * size_t(nv), stream));
  S3D_CUDA_CHECK(cudaMemsetAsync(faces.get(), 0xFF, 12 * size_t(nf), stream));
  positions_kernel<<<blocks_for(n), kThreads, 0, stream>>>(dual, n, referenced.get(),
                                                           vertex_of.get(), g, positions.get());
  after_launch("mesh_remesh_positions");
  faces_kernel<<<blocks_for(n), kThreads, 0, stream>>>(coords, n, table, mask, dir, start.get(),
                                                       vertex_of.get(), positions.get(),
                                                       faces.get());
  after_launch("mesh_remesh_faces");
  TriMesh out;
  out.positions.resize(3 * nv);
  out.faces.resize(3 * nf);
  S3D_CUDA_CHECK(cudaMemcpyAsync(out.positions.data(), positions.get(), 12 * size_t(nv),
                                 cudaMemcpyDeviceToHost, stream));
  S3D_CUDA_CHECK(cudaMemcpyAsync(out.faces.data(), faces.get(), 12 * size_t(nf),
                                 cudaMemcpyDeviceToHost, stream));
  S3D_CUDA_CHECK(cudaStreamSynchronize(stream));
  return out;
}

}  // namespace

TriMesh remesh_on_device(const Bvh& bvh, const RemeshOptions& o, int32_t base, float eps,
                         RemeshStats& st) {
  const DeviceBvh* device = bvh.device();
  S3D_CHECK(device != nullptr, "remesh_narrow_band_dc: the BVH is not on the device");
  const DeviceBvh::View view = device->view();
  const cudaStream_t stream = current_stream();
  SubTimer timer("remesh");
  auto t = Clock::now();
  int64_t n = 0;
  OutsideLevels outside;
  Buffer<int32_t> coords =
      band_voxels(view, o, base, eps, n, st, o.drop_cavities ? &outside : nullptr);
  st.voxels = n;
  st.refine_s = seconds_since(t);
  timer.mark("band search");

  t = Clock::now();
  uint64_t size = 1;
  while (size < 2 * uint64_t(n) + 2) size *= 2;
  const uint64_t mask = size - 1;
  Buffer<Slot> table(static_cast<int64_t>(size));
  S3D_CUDA_CHECK(cudaMemsetAsync(table.get(), 0xFF, size * sizeof(Slot), stream));
  insert_kernel<<<blocks_for(n), kThreads, 0, stream>>>(coords.get(), n, table.get(), mask);
  after_launch("mesh_remesh_hash");
  Buffer<uint8_t> owned(n);
  Buffer<int32_t> count(n + 1), first(n + 1);
  owners_kernel<<<blocks_for(n), kThreads, 0, stream>>>(coords.get(), n, table.get(), mask,
                                                        owned.get(), count.get());
  after_launch("mesh_remesh_owners");
  st.grid_vertices = exclusive_sum(count.get(), first.get(), n);
  timer.mark("hash voxels and find corners");
  const Grid g{static_cast<float>(o.resolution), o.scale, {o.center[0], o.center[1], o.center[2]}};
  Buffer<float> values(st.grid_vertices);
  corner_values_kernel<<<blocks_for(n), kThreads, 0, stream>>>(
      view, coords.get(), n, owned.get(), first.get(), g, eps, values.get());
  after_launch("mesh_remesh_corner_values");
  st.udf_queries += st.grid_vertices;
  S3D_CUDA_CHECK(cudaStreamSynchronize(stream));
  st.vertex_udf_s = seconds_since(t);
  timer.mark("corner distances");

  const Voxels v{coords.get(), n, table.get(), mask, owned.get(), first.get()};
  Buffer<uint8_t> reached(1);
  if (o.drop_cavities) {
    t = Clock::now();
    reached = fill_outside(v, values.get(), st.grid_vertices, outside, base, stream);
    st.cavities_s = seconds_since(t);
    timer.mark("cavity fill");
  }
  t = Clock::now();
  Buffer<float> dual(3 * n);
  Buffer<int8_t> dir(3 * n);
  contour_voxels(v, values.get(), o.drop_cavities ? reached.get() : nullptr, dual.get(),
                 dir.get(), st, stream);
  timer.mark("contour");

  TriMesh out = mesh_from_contour(coords.get(), n, table.get(), mask, dir.get(), dual.get(), g,
                                  stream);
  timer.mark("build mesh");
  st.contour_s = seconds_since(t);
  return out;
}

}  // namespace s3d::mesh::detail
