// TRELLIS.2's remesh branch (remesh.h), computing what CuMesh's remesh_narrow_band_dc does:
//  1. band search: all voxels of a grid of at most 32^3 over the cube, then, level by level,
//     the voxels whose centre's |udf - eps| is under 0.87 of their edge (sqrt(3)/2: the band
//     can reach into them), split in eight for the next level, down to `resolution`;
//  2. the corners of the finest voxels, each once, with value udf - eps at the corner;
//  3. dual contouring: per voxel, the mean of the zero crossings on its 12 edges (linear
//     interpolation; the centre when none); for each of the three edges at its high corner
//     that changes sign, the quad of the four voxels around it, wound so that it faces from
//     the band (negative) to the outside, split as CuMesh splits it; unreferenced dual
//     vertices dropped; then optionally pulled back toward the input surface.
// Voxels keep the order the band search finds them in (CuMesh's), so vertices and faces come
// out in CuMesh's order. Neighbours are found by sweeping the voxels in sorted key order.
#include "mesh/remesh.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include "core/error.h"
#include "mesh/remesh_cuda.h"
#include "mesh/remesh_rules.h"
#include "mesh/timing.h"
#include "mesh/union_find.h"
#include "mesh/voxel_index.h"

namespace s3d::mesh {
namespace {

using detail::pack_key;
using detail::Row;
using detail::UpperNeighbours;
using detail::upper_slot;
using Clock = std::chrono::steady_clock;
namespace rules = remesh_rules;

constexpr int32_t kMaxResolution = 1 << 14;
constexpr int64_t kChunk = 1 << 20;  // distance queries per batch: bounded scratch memory
// Voxels of one level at most: about 6 GiB of working memory at the finest level.
constexpr int64_t kMaxVoxels = int64_t(1) << 27;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

int32_t base_resolution(const RemeshOptions& o) {
  S3D_CHECK(o.resolution >= 1 && o.resolution <= kMaxResolution,
            "remesh_narrow_band_dc: resolution ", o.resolution, ", expected 1..", kMaxResolution);
  int32_t base = o.resolution;
  while (base > 32) {
    S3D_CHECK(base % 2 == 0, "remesh_narrow_band_dc: resolution ", o.resolution,
              " does not halve to 32 or below through even numbers (", base, " is odd)");
    base /= 2;
  }
  return base;
}

void check_options(const RemeshOptions& o) {
  S3D_CHECK(std::isfinite(o.scale) && o.scale > 0, "remesh_narrow_band_dc: scale ", o.scale,
            ", expected > 0");
  S3D_CHECK(std::isfinite(o.band) && o.band > 0, "remesh_narrow_band_dc: band ", o.band,
            ", expected > 0");
  S3D_CHECK(o.project_back >= 0 && o.project_back <= 1, "remesh_narrow_band_dc: project_back ",
            o.project_back, ", expected 0..1");
  for (int k = 0; k < 3; ++k)
    S3D_CHECK(std::isfinite(o.center[k]), "remesh_narrow_band_dc: center[", k, "] is ",
              o.center[k]);
}

// ---- 1. Band search ----------------------------------------------------------------------

// The cells the band search dropped as wholly outside the band (rules::outside_band), per
// level (0: the base grid): what the cavity fill walks besides the finest voxels' corners.
struct OutsideCells {
  std::vector<int32_t> res;                 // per level: its resolution
  std::vector<std::vector<uint64_t>> keys;  // per level: the cells' keys, ascending
};

// The candidates (the parents themselves, or their eight children each when `split`) whose
// centre's |udf - eps| is under 0.87 voxel at resolution `res`, in candidate order; the keys of
// those wholly outside the band appended to `outside` when it is given.
std::vector<int32_t> keep_band(const Bvh& bvh, const std::vector<int32_t>& parents, bool split,
                               int32_t res, const RemeshOptions& o, float eps, int64_t& queries,
                               std::vector<uint64_t>* outside) {
  const int64_t per = split ? 8 : 1;
  const int64_t n = static_cast<int64_t>(parents.size() / 3) * per;
  const float limit = static_cast<float>(0.87 * double(o.scale) / res);
  std::vector<int32_t> kept, cand;
  std::vector<float> pts;
  std::vector<ClosestHit> hits;
  for (int64_t start = 0; start < n; start += kChunk) {
    const int64_t m = std::min(kChunk, n - start);
    cand.resize(3 * m);
    pts.resize(3 * m);
    hits.resize(m);
#pragma omp parallel for schedule(static)
    for (int64_t j = 0; j < m; ++j) {
      const int64_t c = start + j;
      const int32_t* p = &parents[3 * (c / per)];
      for (int k = 0; k < 3; ++k) {
        cand[3 * j + k] = split ? 2 * p[k] + rules::corner_offset(int(c % 8), k) : p[k];
        pts[3 * j + k] = rules::world(static_cast<float>(cand[3 * j + k]) + 0.5f,
                                      static_cast<float>(res), o.scale, o.center[k]);
      }
    }
    bvh.closest_many(pts.data(), m, hits.data());
    queries += m;
    for (int64_t j = 0; j < m; ++j) {
      if (rules::in_band(hits[j].distance, eps, limit))
        kept.insert(kept.end(), &cand[3 * j], &cand[3 * j + 3]);
      else if (outside && rules::outside_band(hits[j].distance, eps, limit))
        outside->push_back(pack_key(cand[3 * j], cand[3 * j + 1], cand[3 * j + 2]));
    }
  }
  return kept;
}

void sort_keys(std::vector<uint64_t>& keys) {
  const std::vector<int32_t> order = detail::sort_order(keys);
  std::vector<uint64_t> sorted(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) sorted[i] = keys[order[i]];
  keys.swap(sorted);
}

// The finest level's voxels; the cells dropped as outside, per level, into `outside` when it
// is given.
std::vector<int32_t> band_voxels(const Bvh& bvh, const RemeshOptions& o, float eps,
                                 RemeshStats& st, OutsideCells* outside) {
  int32_t res = base_resolution(o);
  std::vector<int32_t> coords;
  coords.reserve(3 * res * res * res);
  for (int32_t x = 0; x < res; ++x)
    for (int32_t y = 0; y < res; ++y)
      for (int32_t z = 0; z < res; ++z) coords.insert(coords.end(), {x, y, z});
  const auto level = [&](bool split) {
    if (outside) outside->res.push_back(res), outside->keys.emplace_back();
    coords = keep_band(bvh, coords, split, res, o, eps, st.udf_queries,
                       outside ? &outside->keys.back() : nullptr);
    if (outside) sort_keys(outside->keys.back());
  };
  level(false);
  while (res < o.resolution) {
    detail::check_level_size(static_cast<int64_t>(coords.size() / 3) * 8, 2 * res);
    res *= 2;
    level(true);
  }
  return coords;
}

// ---- 2. Corners ----------------------------------------------------------------------------

// Voxels sorted by key, and the 3 x 3 x 3 block of voxels around each, for voxels visited in
// ascending order (one Block per thread).
struct SortedVoxels {
  std::vector<uint64_t> keys;  // ascending
  std::vector<int32_t> index;  // sorted position -> voxel (band-search order)
};

SortedVoxels sort_voxels(const std::vector<int32_t>& coords) {
  const int64_t n = static_cast<int64_t>(coords.size() / 3);
  std::vector<uint64_t> keys(n);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i)
    keys[i] = pack_key(coords[3 * i], coords[3 * i + 1], coords[3 * i + 2]);
  SortedVoxels s;
  s.index = detail::sort_order(keys);
  s.keys.resize(n);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) s.keys[i] = keys[s.index[i]];
  return s;
}

// nb[(dx + 1) * 9 + (dy + 1) * 3 + dz + 1]: sorted position of voxel c + d, or -1.
class Block {
 public:
  explicit Block(const std::vector<uint64_t>& keys) : keys_(keys) {
    for (int dx = -1; dx <= 1; ++dx)
      for (int dy = -1; dy <= 1; ++dy) rows_.emplace_back(keys, dx, dy, -1, 1);
  }
  void find(int64_t s, int64_t nb[27], int32_t c[3]) {
    const uint64_t k = keys_[s];
    c[0] = static_cast<int32_t>(k >> (2 * detail::kKeyBits));
    c[1] = static_cast<int32_t>((k >> detail::kKeyBits) & detail::kMaxKeyCoord);
    c[2] = static_cast<int32_t>(k & detail::kMaxKeyCoord);
    for (int r = 0; r < 9; ++r) rows_[r].find(c[0], c[1], c[2], nb + 3 * r);
  }

 private:
  const std::vector<uint64_t>& keys_;
  std::vector<Row> rows_;
};

// Grid vertices: voxel s owns the corners in owned[s]; its first one is vertex first[s].
struct Corners {
  std::vector<uint8_t> owned;  // per sorted voxel, bit o: corner o
  std::vector<int64_t> first;  // per sorted voxel, and the total at the end
  // The vertex of corner o of the voxel at the centre of `nb`.
  int64_t vertex(const int64_t nb[27], int o) const {
    return rules::corner_vertex(nb, o, owned.data(), first.data());
  }
};

Corners find_corners(const SortedVoxels& sv) {
  const int64_t n = static_cast<int64_t>(sv.keys.size());
  Corners c;
  c.owned.resize(n);
  c.first.assign(n + 1, 0);
#pragma omp parallel
  {
    Block block(sv.keys);
#pragma omp for schedule(static)
    for (int64_t s = 0; s < n; ++s) {
      int64_t nb[27];
      int32_t xyz[3];
      block.find(s, nb, xyz);
      const unsigned mask = rules::owned_corners(nb);
      c.owned[s] = static_cast<uint8_t>(mask);
      c.first[s + 1] = rules::bit_count(mask);
    }
  }
  for (int64_t s = 0; s < n; ++s) c.first[s + 1] += c.first[s];
  return c;
}

// udf - eps at every grid vertex, batch by batch.
std::vector<float> corner_values(const Bvh& bvh, const SortedVoxels& sv, const Corners& c,
                                 const RemeshOptions& o, float eps, int64_t& queries) {
  const int64_t n = static_cast<int64_t>(sv.keys.size());
  std::vector<float> values(c.first[n]);
  std::vector<float> pts;
  std::vector<ClosestHit> hits;
  const float res = static_cast<float>(o.resolution);
  for (int64_t s0 = 0; s0 < n; s0 += kChunk / 2) {
    const int64_t s1 = std::min(n, s0 + kChunk / 2);
    const int64_t v0 = c.first[s0], m = c.first[s1] - v0;
    pts.resize(3 * m);
    hits.resize(m);
#pragma omp parallel for schedule(static)
    for (int64_t s = s0; s < s1; ++s) {
      const uint64_t k = sv.keys[s];
      const int64_t xyz[3] = {static_cast<int64_t>(k >> (2 * detail::kKeyBits)),
                              static_cast<int64_t>((k >> detail::kKeyBits) & detail::kMaxKeyCoord),
                              static_cast<int64_t>(k & detail::kMaxKeyCoord)};
      int64_t v = c.first[s] - v0;
      for (int e = 0; e < 8; ++e) {
        if (!(c.owned[s] >> e & 1)) continue;
        for (int j = 0; j < 3; ++j)
          pts[3 * v + j] = rules::world(static_cast<float>(xyz[j] + rules::corner_offset(e, j)),
                                        res, o.scale, o.center[j]);
        ++v;
      }
    }
    bvh.closest_many(pts.data(), m, hits.data());
    queries += m;
    for (int64_t j = 0; j < m; ++j) values[v0 + j] = hits[j].distance - eps;
  }
  return values;
}

// ---- 2b. The cavity fill (drop_cavities) ---------------------------------------------------

// The space outside the band as the band search leaves it: the finest voxels' corners with a
// non-negative value (node = their vertex number), the cells dropped as wholly outside at
// every level (numbered after them, level by level) and the grid's border (the last node),
// joined where they touch (union_find.h: the sets do not depend on the order of the unions
// or on the threads).
class Fill {
 public:
  Fill(int64_t vertices, const OutsideCells& cells) : cells_(cells) {
    int64_t n = vertices;
    for (const auto& k : cells.keys) first_.push_back(n), n += static_cast<int64_t>(k.size());
    S3D_CHECK(n < std::numeric_limits<int32_t>::max(), "remesh_narrow_band_dc: ", n,
              " nodes in the cavity fill, more than int32 indices can name");
    border_ = static_cast<int32_t>(n);
    uf_ = std::make_unique<detail::UnionFind>(n + 1);
  }
  int32_t border() const { return border_; }
  int64_t cells(int level) const { return static_cast<int64_t>(cells_.keys[level].size()); }
  int32_t cell_node(int level, int64_t j) const {
    return static_cast<int32_t>(first_[level] + j);
  }
  uint64_t cell_key(int level, int64_t j) const { return cells_.keys[level][j]; }

  // The node of the leaf holding cell (x, y, z) of `level` when it is an outside cell (found
  // by walking up the levels: the cell itself, or the coarser cell the search dropped it
  // in), the border beyond the grid, else -1 (a leaf wholly inside the band, or finer voxels).
  int32_t leaf(int level, int64_t x, int64_t y, int64_t z) const {
    const int64_t r = cells_.res[level];
    if (x < 0 || y < 0 || z < 0 || x >= r || y >= r || z >= r) return border_;
    for (; level >= 0; --level, x >>= 1, y >>= 1, z >>= 1) {
      const std::vector<uint64_t>& k = cells_.keys[level];
      const uint64_t key = pack_key(x, y, z);
      const auto it = std::lower_bound(k.begin(), k.end(), key);
      if (it != k.end() && *it == key) return cell_node(level, it - k.begin());
    }
    return -1;
  }

  int32_t root(int32_t x) { return static_cast<int32_t>(uf_->find(x)); }
  void unite(int32_t a, int32_t b) { uf_->unite(a, b); }

 private:
  const OutsideCells& cells_;
  std::vector<int64_t> first_;
  int32_t border_ = 0;
  std::unique_ptr<detail::UnionFind> uf_;
};

// The finest voxels: corners joined along the voxel's edges where both ends are non-negative,
// and to the outside cell (or the border) across each face with no finest voxel beyond it.
void join_voxels(const SortedVoxels& sv, const Corners& corners, const std::vector<float>& values,
                 int finest, Fill& fill) {
  const int64_t n = static_cast<int64_t>(sv.keys.size());
#pragma omp parallel
  {
    Block block(sv.keys);
#pragma omp for schedule(static)
    for (int64_t s = 0; s < n; ++s) {
      int64_t nb[27];
      int32_t c[3], vtx[8];
      block.find(s, nb, c);
      bool out[8];
      for (int o = 0; o < 8; ++o) {
        vtx[o] = static_cast<int32_t>(corners.vertex(nb, o));
        out[o] = values[vtx[o]] >= 0;
      }
      for (int o = 0; o < 8; ++o)
        for (int a = 0; a < 3; ++a)
          if (!(o >> a & 1) && out[o] && out[o | 1 << a]) fill.unite(vtx[o], vtx[o | 1 << a]);
      for (int a = 0; a < 3; ++a)
        for (int side = 0; side <= 1; ++side) {
          int d[3] = {0, 0, 0};
          d[a] = side ? 1 : -1;
          if (nb[rules::block_slot(d[0], d[1], d[2])] >= 0) continue;
          const int32_t node = fill.leaf(finest, c[0] + d[0], c[1] + d[1], c[2] + d[2]);
          if (node < 0) continue;
          for (int o = 0; o < 8; ++o)
            if ((o >> a & 1) == side && out[o]) fill.unite(vtx[o], node);
        }
    }
  }
}

// The outside cells: each joined to the outside cell (or the border) across each of its faces.
void join_cells(int levels, Fill& fill) {
  for (int l = 0; l < levels; ++l) {
    const int64_t n = fill.cells(l);
#pragma omp parallel for schedule(static)
    for (int64_t j = 0; j < n; ++j) {
      const uint64_t k = fill.cell_key(l, j);
      const int64_t c[3] = {static_cast<int64_t>(k >> (2 * detail::kKeyBits)),
                            static_cast<int64_t>((k >> detail::kKeyBits) & detail::kMaxKeyCoord),
                            static_cast<int64_t>(k & detail::kMaxKeyCoord)};
      for (int a = 0; a < 3; ++a)
        for (int side = -1; side <= 1; side += 2) {
          int64_t p[3] = {c[0], c[1], c[2]};
          p[a] += side;
          const int32_t node = fill.leaf(l, p[0], p[1], p[2]);
          if (node >= 0) fill.unite(fill.cell_node(l, j), node);
        }
    }
  }
}

// Per grid vertex: 1 when its space outside the band is joined to the grid's border.
std::vector<uint8_t> fill_outside(const SortedVoxels& sv, const Corners& corners,
                                  const std::vector<float>& values, const OutsideCells& cells) {
  const int64_t nv = corners.first.back();
  Fill fill(nv, cells);
  const int levels = static_cast<int>(cells.keys.size());
  join_voxels(sv, corners, values, levels - 1, fill);
  join_cells(levels, fill);
  const int32_t border = fill.root(fill.border());
  std::vector<uint8_t> reached(nv);
#pragma omp parallel for schedule(static)
  for (int64_t v = 0; v < nv; ++v)
    reached[v] = fill.root(static_cast<int32_t>(v)) == border ? 1 : 0;
  return reached;
}

// ---- 3. Dual contouring --------------------------------------------------------------------

// Per voxel (band-search order): dual vertex in grid units and, per axis, the sign change of
// the edge at its high corner (+1: negative to non-negative going up the axis, -1: the other
// way, 0: none).
struct Contour {
  std::vector<float> dual;
  std::vector<int8_t> dir;
};

// With `reached` (per grid vertex, fill_outside's answer), the quads whose outer corner was
// not reached are left out (rules::drop_unreached); `dropped` counts them and `edges` every
// sign-changing edge.
Contour contour(const SortedVoxels& sv, const Corners& corners, const std::vector<float>& values,
                const uint8_t* reached, int64_t& dropped, int64_t& edges) {
  const int64_t n = static_cast<int64_t>(sv.keys.size());
  Contour out;
  out.dual.resize(3 * n);
  out.dir.resize(3 * n);
  int64_t dropped_sum = 0, edge_sum = 0;
#pragma omp parallel reduction(+ : dropped_sum, edge_sum)
  {
    Block block(sv.keys);
#pragma omp for schedule(static)
    for (int64_t s = 0; s < n; ++s) {
      int64_t nb[27];
      int32_t c[3];
      block.find(s, nb, c);
      float val[8];
      unsigned mask = 0;
      for (int e = 0; e < 8; ++e) {
        const int64_t v = corners.vertex(nb, e);
        val[e] = values[v];
        if (reached && reached[v]) mask |= 1u << e;
      }
      const int64_t i = sv.index[s];
      int8_t* dir = &out.dir[3 * i];
      rules::contour_voxel(val, c, &out.dual[3 * i], dir);
      edge_sum += (dir[0] != 0) + (dir[1] != 0) + (dir[2] != 0);
      if (reached) dropped_sum += rules::drop_unreached(mask, dir);
    }
  }
  dropped = dropped_sum, edges = edge_sum;
  return out;
}

// Visits the voxels with a sign change in sorted order, in parallel over contiguous runs:
// visit(i, quads), quads[a] the four voxels (band-search indices) around its edge on axis a,
// quads[a][0] = -1 when that edge has no sign change or one of the four is absent.
template <class Visit>
void for_each_quad(const SortedVoxels& sv, const Contour& ct, Visit&& visit) {
  const int64_t n = static_cast<int64_t>(sv.keys.size());
#pragma omp parallel
  {
    UpperNeighbours upper(sv.keys);
#pragma omp for schedule(static)
    for (int64_t s = 0; s < n; ++s) {
      const int64_t i = sv.index[s];
      const int8_t* dir = &ct.dir[3 * i];
      if (!(dir[0] | dir[1] | dir[2])) continue;
      int64_t nb[6];
      upper.find(s, nb);
      int32_t quads[3][4];
      for (int a = 0; a < 3; ++a) {
        quads[a][0] = -1;
        if (!dir[a]) continue;
        int64_t ring[4];
        if (!detail::edge_ring(s, nb, a, ring)) continue;
        for (int j = 0; j < 4; ++j) quads[a][j] = sv.index[ring[j]];
      }
      visit(i, quads);
    }
  }
}

TriMesh build_mesh(const SortedVoxels& sv, const Contour& ct, const RemeshOptions& o) {
  const int64_t n = static_cast<int64_t>(sv.keys.size());
  std::vector<uint8_t> referenced(n, 0);
  std::vector<int64_t> start(n + 1, 0);
  for_each_quad(sv, ct, [&](int64_t i, const int32_t quads[3][4]) {
    int made = 0;
    for (int a = 0; a < 3; ++a) {
      if (quads[a][0] < 0) continue;
      ++made;
      for (int j = 0; j < 4; ++j)
        std::atomic_ref<uint8_t>(referenced[quads[a][j]]).store(1, std::memory_order_relaxed);
    }
    start[i + 1] = 2 * made;
  });
  // Kept dual vertices in voxel order (CuMesh's torch.unique of the quads' indices).
  std::vector<int32_t> vertex_of(n, -1);
  int32_t nv = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (referenced[i]) vertex_of[i] = nv++;
    start[i + 1] += start[i];
  }
  TriMesh out;
  out.positions.resize(3 * static_cast<int64_t>(nv));
  const float res = static_cast<float>(o.resolution);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    if (vertex_of[i] < 0) continue;
    for (int k = 0; k < 3; ++k)
      out.positions[3 * int64_t(vertex_of[i]) + k] =
          rules::world(ct.dual[3 * i + k], res, o.scale, o.center[k]);
  }
  out.faces.resize(3 * start[n]);
  for_each_quad(sv, ct, [&](int64_t i, const int32_t quads[3][4]) {
    int64_t at = 3 * start[i];
    for (int a = 0; a < 3; ++a) {
      if (quads[a][0] < 0) continue;
      int32_t q[4];
      for (int j = 0; j < 4; ++j) q[j] = vertex_of[quads[a][j]];
      rules::split_quad(out.positions.data(), q, ct.dir[3 * i + a] == 1, &out.faces[at]);
      at += 6;
    }
  });
  return out;
}

// Moves every vertex the fraction p of the way to its closest point on the input surface.
void project_back(const Bvh& bvh, float p, TriMesh& m) {
  const TriMesh& in = bvh.mesh();
  std::vector<ClosestHit> hits;
  for (int64_t v0 = 0; v0 < m.num_vertices(); v0 += kChunk) {
    const int64_t cnt = std::min(kChunk, m.num_vertices() - v0);
    hits.resize(cnt);
    bvh.closest_many(&m.positions[3 * v0], cnt, hits.data());
#pragma omp parallel for schedule(static)
    for (int64_t j = 0; j < cnt; ++j) {
      const int32_t* f = &in.faces[3 * int64_t(hits[j].face)];
      float* x = &m.positions[3 * (v0 + j)];
      for (int k = 0; k < 3; ++k) {
        const float q = in.positions[3 * int64_t(f[0]) + k] * hits[j].uvw[0] +
                        in.positions[3 * int64_t(f[1]) + k] * hits[j].uvw[1] +
                        in.positions[3 * int64_t(f[2]) + k] * hits[j].uvw[2];
        x[k] -= p * (x[k] - q);
      }
    }
  }
}

}  // namespace

void detail::check_level_size(int64_t children, int32_t res) {
  S3D_CHECK(children <= kMaxVoxels, "remesh_narrow_band_dc: ", children,
            " candidate voxels at resolution ", res, ", over ", kMaxVoxels,
            " (memory); lower the resolution");
}

TriMesh remesh_narrow_band_dc(const Bvh& bvh, const RemeshOptions& options, RemeshStats* stats) {
  check_options(options);
  const int32_t base = base_resolution(options);
  RemeshStats st;
  const float eps = static_cast<float>(double(options.band) * options.scale / options.resolution);
  if (options.use_device && bvh.on_device()) {
    TriMesh out = detail::remesh_on_device(bvh, options, base, eps, st);
    const auto t = Clock::now();
    if (options.project_back > 0) project_back(bvh, options.project_back, out);
    st.project_s = seconds_since(t);
    if (stats) *stats = st;
    return out;
  }
  SubTimer timer("remesh");
  auto t = Clock::now();
  OutsideCells outside;
  const std::vector<int32_t> coords =
      band_voxels(bvh, options, eps, st, options.drop_cavities ? &outside : nullptr);
  st.voxels = static_cast<int64_t>(coords.size() / 3);
  st.refine_s = seconds_since(t);
  timer.mark("band search");

  t = Clock::now();
  const SortedVoxels sv = sort_voxels(coords);
  const Corners corners = find_corners(sv);
  timer.mark("sort voxels and find corners");
  st.grid_vertices = corners.first.back();
  S3D_CHECK(st.grid_vertices <= std::numeric_limits<int32_t>::max(),
            "remesh_narrow_band_dc: ", st.grid_vertices,
            " grid vertices, more than int32 indices can name");
  const std::vector<float> values = corner_values(bvh, sv, corners, options, eps, st.udf_queries);
  st.vertex_udf_s = seconds_since(t);
  timer.mark("corner distances");

  std::vector<uint8_t> reached;
  if (options.drop_cavities) {
    t = Clock::now();
    reached = fill_outside(sv, corners, values, outside);
    st.cavities_s = seconds_since(t);
    timer.mark("cavity fill");
  }
  t = Clock::now();
  int64_t edges = 0;
  Contour ct = contour(sv, corners, values, reached.empty() ? nullptr : reached.data(),
                       st.cavity_quads, edges);
  if (!reached.empty() && edges > 0 && st.cavity_quads == edges) {  // nothing reached: keep all
    ct = contour(sv, corners, values, nullptr, st.cavity_quads, edges);
    st.cavity_quads = 0, st.cavities_kept_all = true;
  }
  timer.mark("contour");
  TriMesh out = build_mesh(sv, ct, options);
  timer.mark("build mesh");
  st.contour_s = seconds_since(t);

  t = Clock::now();
  if (options.project_back > 0) project_back(bvh, options.project_back, out);
  st.project_s = seconds_since(t);
  if (stats) *stats = st;
  return out;
}

}  // namespace s3d::mesh
