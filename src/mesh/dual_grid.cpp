// The flexible dual grid (dual_grid.h): the encoder voxelize_dual_grid and the decoder's mesh
// extraction dual_grid_to_mesh, as TRELLIS.2's o-voxel defines them.
//
// Conventions (o-voxel's): the flag of voxel c on axis a stands for the lattice edge along a
// that spans the voxel at its HIGH corner in the two other axes, e.g. for a = x the edge from
// grid vertex (x, y+1, z+1) to (x+1, y+1, z+1). The four voxels around that edge are c and c
// plus the offsets of detail::kEdgeRing[a]; the quad joins their dual vertices in that order, which
// faces -a. o-voxel's flags are booleans (its decoded meshes are oriented afterwards); ours
// also say which way the surface faces: 1 = toward -a (o-voxel's winding), 2 = toward +a
// (winding reversed), so that a watertight input decodes to a consistently oriented mesh.
//
// The encoder decides "is this edge crossed" exactly: coordinates are snapped to 1/65536 of a
// voxel and every crossing test runs in integer arithmetic, ties (the surface through a
// lattice vertex or along a lattice edge) broken by simulating a global infinitesimal shift of
// the lattice. So the flags are the sign changes of one inside/outside function and the quads
// of a watertight surface close up. Voxel set, pieces and dual vertices use doubles.
#include "mesh/dual_grid.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "mesh/voxel_index.h"

namespace s3d::mesh {
namespace {

using detail::pack_key;
using detail::UpperNeighbours;
using detail::upper_slot;
using i128 = __int128;

constexpr int32_t kMaxGridSize = 1 << 16;
constexpr int kBlock = 16;               // voxels per axis of a unit of parallel work
constexpr int64_t kQuantum = 1 << 16;    // exact steps per voxel
constexpr double kReach = 1 << 20;       // coordinates clamped this many voxels outside
constexpr double kRegularization = 0.1;  // o-voxel's regularization_weight
constexpr double kMinArea = 1e-12;       // in voxels^2: below it a piece has no plane
constexpr int64_t kMaxBinned = int64_t(1) << 27;  // (block, face) pairs: 1.5 GiB of bins


std::vector<uint64_t> voxel_keys(const DualGrid& g) {
  const int64_t n = g.num_voxels();
  std::vector<uint64_t> keys(n);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i)
    keys[i] = pack_key(g.coords[3 * i], g.coords[3 * i + 1], g.coords[3 * i + 2]);
  return keys;
}

template <class T>
int sign_of(T v) {
  return (v > 0) - (v < 0);
}
int64_t floor_div(int64_t a, int64_t b) { return a / b - ((a % b != 0) && (a < 0)); }
int64_t ceil_div(int64_t a, int64_t b) { return -floor_div(-a, b); }
i128 floor_div(i128 a, i128 b) { return a / b - ((a % b != 0) && (a < 0)); }

void check_box(const GridBox& box, const char* what) {
  const Vec3 vs = box.voxel_size();
  for (int k = 0; k < 3; ++k) {
    S3D_CHECK(box.size[k] >= 1 && box.size[k] <= kMaxGridSize, what, ": grid size on axis ", k,
              " is ", box.size[k], ", expected 1..", kMaxGridSize);
    S3D_CHECK(std::isfinite(box.lo[k]) && std::isfinite(box.hi[k]) && box.hi[k] > box.lo[k] &&
                  vs[k] > 0 && std::isfinite(vs[k]),
              what, ": box axis ", k, " spans [", box.lo[k], ", ", box.hi[k],
              "], expected finite bounds with hi > lo");
  }
}

// ---- Exact crossings ---------------------------------------------------------------------

// Vertex positions in grid units times kQuantum. Clamping far-away vertices keeps every
// product in the crossing test inside 128 bits; it moves only vertices > 2^20 voxels out.
std::vector<int64_t> snap_to_grid(const TriMesh& m, const GridBox& box) {
  std::vector<int64_t> q(m.positions.size());
  const int64_t n = m.num_vertices();
#pragma omp parallel for schedule(static)
  for (int64_t v = 0; v < n; ++v) {
    for (int k = 0; k < 3; ++k) {
      const double vs = (double(box.hi[k]) - box.lo[k]) / box.size[k];
      double g = (double(m.positions[3 * v + k]) - box.lo[k]) / vs;
      g = std::clamp(g, -kReach, box.size[k] + kReach);
      q[3 * v + k] = std::llround(g * kQuantum);
    }
  }
  return q;
}

// The sign of edge function P->Q (twice the signed area of P, Q, p in the (b, c) plane) at the
// lattice point p shifted by the infinitesimal (e_b, e_c): E0 + dqb * e_c - dqc * e_b. The
// shift of axis 0 dominates that of axis 1, which dominates that of axis 2.
int edge_sign(i128 e0, int64_t dqb, int64_t dqc, bool b_dominates) {
  if (e0 != 0) return sign_of(e0);
  const int sb = -sign_of(dqc), sc = sign_of(dqb);
  if (b_dominates) return sb != 0 ? sb : sc;
  return sc != 0 ? sc : sb;
}

// Does the lattice line along axis a through (pb, pc) (snapped units) cross triangle v? If so,
// *edge receives the index along a of the lattice edge holding the crossing and *facing the
// sign of the triangle normal's a component.
bool line_crossing(const int64_t* v[3], int a, int64_t pb, int64_t pc, int64_t* edge, int* facing) {
  const int b = (a + 1) % 3, c = (a + 2) % 3;
  i128 e[3];
  int s[3];
  for (int i = 0; i < 3; ++i) {
    const int64_t* p = v[i];
    const int64_t* q = v[(i + 1) % 3];
    const int64_t dqb = q[b] - p[b], dqc = q[c] - p[c];
    e[i] = i128(dqb) * (pc - p[c]) - i128(dqc) * (pb - p[b]);
    s[i] = edge_sign(e[i], dqb, dqc, b < c);
  }
  if (s[0] == 0 || s[0] != s[1] || s[1] != s[2]) return false;
  // Barycentric weight of vertex i: the edge function of the edge opposite it.
  i128 den = e[0] + e[1] + e[2];
  i128 num = e[1] * v[0][a] + e[2] * v[1][a] + e[0] * v[2][a];
  if (den < 0) den = -den, num = -num;
  const i128 step = den * kQuantum;
  i128 k = floor_div(num, step);
  if (num == k * step) {
    // The crossing is exactly at lattice vertex k. Shifted, the line meets the plane at
    // a = k + g_b e_b + g_c e_c with g = -n_b / n_a, -n_c / n_a, and the vertex is at k + e_a:
    // the first nonzero coefficient in axis order decides which side the crossing falls on.
    i128 d1[3], d2[3];
    for (int j = 0; j < 3; ++j) d1[j] = v[1][j] - v[0][j], d2[j] = v[2][j] - v[0][j];
    const i128 n[3] = {d1[1] * d2[2] - d1[2] * d2[1], d1[2] * d2[0] - d1[0] * d2[2],
                       d1[0] * d2[1] - d1[1] * d2[0]};
    int side = 0;
    for (int axis = 0; axis < 3 && side == 0; ++axis)
      side = axis == a ? -1 : -sign_of(n[axis]) * sign_of(n[a]);
    if (side < 0) --k;
  }
  *edge = static_cast<int64_t>(k);
  *facing = s[0];
  return true;
}

// ---- Pieces of the surface in a voxel ----------------------------------------------------

// A convex polygon (a triangle clipped by planes; degenerate ones too: a point, a segment).
// Each clip adds at most one vertex: a triangle cut by six planes has at most nine.
struct Polygon {
  int n = 0;
  double p[9][3];
};

// The part of `in` on one side of the plane x_k = v, the plane itself included, so that
// pieces on a voxel's face or edge belong to every voxel sharing it (closed boxes).
void clip(const Polygon& in, int k, double v, bool below, Polygon& out) {
  out.n = 0;
  for (int i = 0; i < in.n; ++i) {
    const double* p = in.p[i];
    const double* q = in.p[(i + 1) % in.n];
    const bool ip = below ? p[k] <= v : p[k] >= v;
    const bool iq = below ? q[k] <= v : q[k] >= v;
    if (ip && out.n < 9) std::copy(p, p + 3, out.p[out.n++]);
    if (ip != iq && out.n < 9) {
      const double s = (v - p[k]) / (q[k] - p[k]);
      double* r = out.p[out.n++];
      for (int j = 0; j < 3; ++j) r[j] = p[j] + s * (q[j] - p[j]);
      r[k] = v;
    }
  }
}

// What a voxel gathers from the pieces of surface inside it.
struct VoxelAcc {
  double quad[6];  // sum of area * n n^T: xx, xy, xz, yy, yz, zz
  double lin[3];   // sum of area * d * n (plane n.x = d, n unit)
  double area;
  double centroid[3];  // sum of area * piece centroid
  double points[3];    // sum of the vertices of pieces without area
  int32_t npoints;
  int32_t facing[3];  // sum of the crossing triangles' facing, per flagged edge
  uint8_t parity[3];  // crossing count mod 2, per flagged edge
  uint8_t used;
};

// Minimises x^T H x - 2 g^T x over [0, 1]^3 (H symmetric positive definite): the free
// minimiser if it is inside, else the best over every face, edge and corner of the box.
void box_qp(const double h[3][3], const double g[3], double x[3]) {
  auto value = [&](const double* y) {
    double f = 0;
    for (int i = 0; i < 3; ++i) {
      f -= 2 * g[i] * y[i];
      for (int j = 0; j < 3; ++j) f += y[i] * h[i][j] * y[j];
    }
    return f;
  };
  double best = std::numeric_limits<double>::infinity();
  for (int fixed = 0; fixed < 8; ++fixed) {  // bit k: coordinate k held at a bound
    const int nfixed = __builtin_popcount(fixed);
    for (int bounds = 0; bounds < (1 << nfixed); ++bounds) {
      double y[3] = {0, 0, 0};
      int free_axes[3], nf = 0, bit = 0;
      for (int k = 0; k < 3; ++k) {
        if (fixed >> k & 1)
          y[k] = (bounds >> bit++) & 1;
        else
          free_axes[nf++] = k;
      }
      // Reduced system over the free coordinates: H_ff y_f = g_f - H_fx y_x.
      double a[3][3], r[3];
      for (int i = 0; i < nf; ++i) {
        r[i] = g[free_axes[i]];
        for (int k = 0; k < 3; ++k)
          if (fixed >> k & 1) r[i] -= h[free_axes[i]][k] * y[k];
        for (int j = 0; j < nf; ++j) a[i][j] = h[free_axes[i]][free_axes[j]];
      }
      bool ok = true;
      if (nf == 1) {
        y[free_axes[0]] = r[0] / a[0][0];
      } else if (nf == 2) {
        const double det = a[0][0] * a[1][1] - a[0][1] * a[1][0];
        y[free_axes[0]] = (r[0] * a[1][1] - a[0][1] * r[1]) / det;
        y[free_axes[1]] = (a[0][0] * r[1] - r[0] * a[1][0]) / det;
      } else if (nf == 3) {
        const double c0 = a[1][1] * a[2][2] - a[1][2] * a[2][1];
        const double c1 = a[1][2] * a[2][0] - a[1][0] * a[2][2];
        const double c2 = a[1][0] * a[2][1] - a[1][1] * a[2][0];
        const double det = a[0][0] * c0 + a[0][1] * c1 + a[0][2] * c2;
        for (int k = 0; k < 3; ++k) {  // Cramer: replace column k with r
          double m[3][3];
          for (int i = 0; i < 3; ++i)
            for (int j = 0; j < 3; ++j) m[i][j] = j == k ? r[i] : a[i][j];
          y[k] = (m[0][0] * (m[1][1] * m[2][2] - m[1][2] * m[2][1]) -
                  m[0][1] * (m[1][0] * m[2][2] - m[1][2] * m[2][0]) +
                  m[0][2] * (m[1][0] * m[2][1] - m[1][1] * m[2][0])) /
                 det;
        }
      }
      for (int i = 0; i < nf; ++i)
        ok = ok && y[free_axes[i]] >= 0 && y[free_axes[i]] <= 1;  // also rejects NaN
      if (!ok) continue;
      const double f = value(y);
      if (f < best) best = f, std::copy(y, y + 3, x);
      if (fixed == 0) return;  // the free minimiser is inside: it is the minimum
    }
  }
}

// The dual vertex from what the voxel gathered, in voxel units from its low corner.
void dual_vertex(const VoxelAcc& a, float out[3]) {
  double x[3] = {0.5, 0.5, 0.5};
  if (a.area > kMinArea) {
    const double lambda = kRegularization * a.area;
    const double h[3][3] = {{a.quad[0] + lambda, a.quad[1], a.quad[2]},
                            {a.quad[1], a.quad[3] + lambda, a.quad[4]},
                            {a.quad[2], a.quad[4], a.quad[5] + lambda}};
    double g[3];
    for (int k = 0; k < 3; ++k) g[k] = a.lin[k] + lambda * a.centroid[k] / a.area;
    box_qp(h, g, x);
  } else if (a.npoints > 0) {
    for (int k = 0; k < 3; ++k) x[k] = std::clamp(a.points[k] / a.npoints, 0.0, 1.0);
  } else {
    // Only a crossing (or a touch too thin to clip) put the voxel here: the middle of its
    // first flagged edge lies on the surface's crossing edge.
    for (int k = 0; k < 3; ++k) {
      if (!a.parity[k]) continue;
      x[k] = 0.5, x[(k + 1) % 3] = 1, x[(k + 2) % 3] = 1;
      break;
    }
  }
  for (int k = 0; k < 3; ++k) out[k] = static_cast<float>(x[k]);
}

struct OutVoxel {
  int32_t c[3];
  float d[3];
  uint8_t flag[3];
};

// Processes one kBlock^3 block of the grid: every triangle binned to it adds its pieces to
// the voxels of the block it touches and its crossings to the edges the block's voxels own.
class BlockWorker {
 public:
  BlockWorker(const std::vector<int64_t>& snapped, const std::vector<int32_t>& faces,
              const GridBox& box)
      : q_(snapped), faces_(faces), box_(box), acc_(kBlock * kBlock * kBlock) {}

  void run(const int32_t origin[3], const int32_t* tris, int64_t ntris,
           std::vector<OutVoxel>& out) {
    std::copy(origin, origin + 3, o_);
    for (int64_t t = 0; t < ntris; ++t) {
      add_pieces(tris[t]);
      add_crossings(tris[t]);
    }
    std::sort(used_.begin(), used_.end());
    out.reserve(used_.size());
    for (int32_t li : used_) {
      VoxelAcc& a = acc_[li];
      OutVoxel v;
      v.c[0] = o_[0] + li / (kBlock * kBlock);
      v.c[1] = o_[1] + li / kBlock % kBlock;
      v.c[2] = o_[2] + li % kBlock;
      dual_vertex(a, v.d);
      for (int k = 0; k < 3; ++k) v.flag[k] = a.parity[k] ? (a.facing[k] > 0 ? 2 : 1) : 0;
      out.push_back(v);
      a = VoxelAcc{};
    }
    used_.clear();
  }

 private:
  VoxelAcc& voxel(int32_t x, int32_t y, int32_t z) {
    const int32_t li = ((x - o_[0]) * kBlock + (y - o_[1])) * kBlock + (z - o_[2]);
    VoxelAcc& a = acc_[li];
    if (!a.used) a.used = 1, used_.push_back(li);
    return a;
  }

  // Voxel range of the triangle's closed bounding box within this block (lo > hi: none).
  void range(int32_t tri, int32_t lo[3], int32_t hi[3]) const {
    for (int k = 0; k < 3; ++k) {
      int64_t mn = std::numeric_limits<int64_t>::max(), mx = -mn;
      for (int i = 0; i < 3; ++i) {
        mn = std::min(mn, q_[3 * faces_[3 * tri + i] + k]);
        mx = std::max(mx, q_[3 * faces_[3 * tri + i] + k]);
      }
      lo[k] = static_cast<int32_t>(std::max<int64_t>(ceil_div(mn, kQuantum) - 1, o_[k]));
      hi[k] = static_cast<int32_t>(std::min<int64_t>(
          {floor_div(mx, kQuantum), int64_t(o_[k]) + kBlock - 1, int64_t(box_.size[k]) - 1}));
      lo[k] = std::max(lo[k], 0);
    }
  }

  // Cuts the triangle into its pieces in the voxels of its range, slab by slab along x, then
  // y, then z: every voxel the closed triangle touches gets a (maybe degenerate) piece.
  void add_pieces(int32_t tri) {
    int32_t lo[3], hi[3];
    range(tri, lo, hi);
    if (lo[0] > hi[0] || lo[1] > hi[1] || lo[2] > hi[2]) return;
    Polygon t;
    t.n = 3;
    for (int i = 0; i < 3; ++i)
      for (int k = 0; k < 3; ++k) t.p[i][k] = double(q_[3 * faces_[3 * tri + i] + k]) / kQuantum;
    double n[3] = {0, 0, 0};
    for (int k = 0; k < 3; ++k) {
      const int k1 = (k + 1) % 3, k2 = (k + 2) % 3;
      n[k] = (t.p[1][k1] - t.p[0][k1]) * (t.p[2][k2] - t.p[0][k2]) -
             (t.p[1][k2] - t.p[0][k2]) * (t.p[2][k1] - t.p[0][k1]);
    }
    const double len = std::sqrt(n[0] * n[0] + n[1] * n[1] + n[2] * n[2]);
    for (int k = 0; k < 3; ++k) n[k] = len > 0 ? n[k] / len : 0;
    int32_t c[3];
    Polygon rest[3], slab[3];
    clip(t, 0, lo[0], false, rest[0]);
    // Level k: cut rest[k] at the upper face of cell c[k]; the part below is that cell's slab.
    auto descend = [&](auto&& self, int k) -> void {
      for (c[k] = lo[k]; c[k] <= hi[k] && rest[k].n > 0; ++c[k]) {
        clip(rest[k], k, c[k] + 1, true, slab[k]);
        Polygon above;
        clip(rest[k], k, c[k] + 1, false, above);
        rest[k] = above;
        if (slab[k].n == 0) continue;
        if (k < 2) {
          clip(slab[k], k + 1, lo[k + 1], false, rest[k + 1]);
          self(self, k + 1);
        } else {
          add_piece(voxel(c[0], c[1], c[2]), slab[2], c, n);
        }
      }
    };
    descend(descend, 0);
  }

  // Adds a piece (absolute grid units) to voxel c's plane sums.
  static void add_piece(VoxelAcc& a, const Polygon& piece, const int32_t c[3], const double n[3]) {
    double p[9][3];
    const int m = piece.n;
    for (int i = 0; i < m; ++i)
      for (int k = 0; k < 3; ++k) p[i][k] = piece.p[i][k] - c[k];
    double area = 0, cen[3] = {0, 0, 0};
    for (int i = 1; i + 1 < m; ++i) {
      double e1[3], e2[3];
      for (int k = 0; k < 3; ++k) e1[k] = p[i][k] - p[0][k], e2[k] = p[i + 1][k] - p[0][k];
      const double w =
          0.5 * (n[0] * (e1[1] * e2[2] - e1[2] * e2[1]) + n[1] * (e1[2] * e2[0] - e1[0] * e2[2]) +
                 n[2] * (e1[0] * e2[1] - e1[1] * e2[0]));
      area += w;
      for (int k = 0; k < 3; ++k) cen[k] += w * (p[0][k] + p[i][k] + p[i + 1][k]) / 3;
    }
    if (area > kMinArea) {
      const double d = (n[0] * cen[0] + n[1] * cen[1] + n[2] * cen[2]) / area;
      const double nn[6] = {n[0] * n[0], n[0] * n[1], n[0] * n[2],
                            n[1] * n[1], n[1] * n[2], n[2] * n[2]};
      for (int k = 0; k < 6; ++k) a.quad[k] += area * nn[k];
      for (int k = 0; k < 3; ++k) {
        a.lin[k] += area * d * n[k];
        a.centroid[k] += cen[k];
      }
      a.area += area;
    } else {
      for (int i = 0; i < m; ++i)
        for (int k = 0; k < 3; ++k) a.points[k] += std::clamp(p[i][k], 0.0, 1.0);
      a.npoints += m;
    }
  }

  // Crossings of the triangle with the lattice edges this block's voxels own.
  void add_crossings(int32_t tri) {
    const int64_t* v[3] = {&q_[3 * faces_[3 * tri]], &q_[3 * faces_[3 * tri + 1]],
                           &q_[3 * faces_[3 * tri + 2]]};
    for (int a = 0; a < 3; ++a) {
      const int b = (a + 1) % 3, c = (a + 2) % 3;
      int64_t jlo[2], jhi[2];  // lattice lines along a: (b, c) = (jb, jc), interior ones only
      for (int s = 0; s < 2; ++s) {
        const int k = s ? c : b;
        const int64_t mn = std::min({v[0][k], v[1][k], v[2][k]});
        const int64_t mx = std::max({v[0][k], v[1][k], v[2][k]});
        jlo[s] = std::max<int64_t>({ceil_div(mn, kQuantum), 1, int64_t(o_[k]) + 1});
        jhi[s] = std::min<int64_t>(
            {floor_div(mx, kQuantum), int64_t(box_.size[k]) - 1, int64_t(o_[k]) + kBlock});
      }
      for (int64_t jb = jlo[0]; jb <= jhi[0]; ++jb)
        for (int64_t jc = jlo[1]; jc <= jhi[1]; ++jc) {
          int64_t edge;
          int facing;
          if (!line_crossing(v, a, jb * kQuantum, jc * kQuantum, &edge, &facing)) continue;
          if (edge < std::max(0, o_[a]) ||
              edge >= std::min<int64_t>(int64_t(o_[a]) + kBlock, box_.size[a]))
            continue;
          int32_t cc[3];
          cc[a] = static_cast<int32_t>(edge);
          cc[b] = static_cast<int32_t>(jb - 1);
          cc[c] = static_cast<int32_t>(jc - 1);
          VoxelAcc& acc = voxel(cc[0], cc[1], cc[2]);
          acc.parity[a] ^= 1;
          acc.facing[a] += facing;
        }
    }
  }

  const std::vector<int64_t>& q_;
  const std::vector<int32_t>& faces_;
  const GridBox& box_;
  int32_t o_[3] = {0, 0, 0};
  std::vector<VoxelAcc> acc_;
  std::vector<int32_t> used_;
};

// (block, triangle) pairs for every block a triangle's closed bounding box reaches, sorted.
struct Binning {
  std::vector<uint64_t> block;  // per pair, x-major block index
  std::vector<int32_t> tri;
  int64_t nb[3];
};

Binning bin_triangles(const std::vector<int64_t>& q, const TriMesh& m, const GridBox& box) {
  Binning out;
  for (int k = 0; k < 3; ++k) out.nb[k] = (box.size[k] + kBlock - 1) / kBlock;
  const int64_t nf = m.num_faces();
  std::vector<int32_t> blo(3 * nf), bhi(3 * nf);
  std::vector<int64_t> count(nf + 1, 0);
#pragma omp parallel for schedule(static)
  for (int64_t f = 0; f < nf; ++f) {
    int64_t n = 1;
    for (int k = 0; k < 3; ++k) {
      int64_t mn = std::numeric_limits<int64_t>::max(), mx = -mn;
      for (int i = 0; i < 3; ++i) {
        mn = std::min(mn, q[3 * m.faces[3 * f + i] + k]);
        mx = std::max(mx, q[3 * m.faces[3 * f + i] + k]);
      }
      const int64_t lo = std::max<int64_t>(ceil_div(mn, kQuantum) - 1, 0);
      const int64_t hi = std::min<int64_t>(floor_div(mx, kQuantum), box.size[k] - 1);
      blo[3 * f + k] = static_cast<int32_t>(lo / kBlock);
      bhi[3 * f + k] = static_cast<int32_t>(hi / kBlock);
      n *= lo <= hi ? bhi[3 * f + k] - blo[3 * f + k] + 1 : 0;
    }
    count[f + 1] = n;
  }
  for (int64_t f = 0; f < nf; ++f) count[f + 1] += count[f];
  // Big triangles in a big grid would ask for more blocks than memory holds: refuse them.
  S3D_CHECK(count[nf] <= kMaxBinned, "voxelize_dual_grid: the faces' bounding boxes cover ",
            count[nf], " blocks of ", kBlock, "^3 voxels, over ", kMaxBinned,
            "; use a coarser grid");
  std::vector<uint64_t> block(count[nf]);
#pragma omp parallel for schedule(static)
  for (int64_t f = 0; f < nf; ++f) {
    int64_t at = count[f];
    if (at == count[f + 1]) continue;
    for (int64_t x = blo[3 * f]; x <= bhi[3 * f]; ++x)
      for (int64_t y = blo[3 * f + 1]; y <= bhi[3 * f + 1]; ++y)
        for (int64_t z = blo[3 * f + 2]; z <= bhi[3 * f + 2]; ++z)
          block[at++] = static_cast<uint64_t>((x * out.nb[1] + y) * out.nb[2] + z);
  }
  // Stable by block, triangles ascending within one (they went in ascending).
  const std::vector<int32_t> order = detail::sort_order(block);
  out.block.resize(order.size());
  out.tri.resize(order.size());
  std::vector<int32_t> tri_of(block.size());
  for (int64_t f = 0; f < nf; ++f)
    for (int64_t i = count[f]; i < count[f + 1]; ++i) tri_of[i] = static_cast<int32_t>(f);
  for (size_t i = 0; i < order.size(); ++i) {
    out.block[i] = block[order[i]];
    out.tri[i] = tri_of[order[i]];
  }
  return out;
}

// Sorts the voxels by (x, y, z) into a DualGrid.
DualGrid assemble(const std::vector<OutVoxel>& vox) {
  std::vector<uint64_t> keys(vox.size());
  for (size_t i = 0; i < vox.size(); ++i) keys[i] = pack_key(vox[i].c[0], vox[i].c[1], vox[i].c[2]);
  const std::vector<int32_t> order = detail::sort_order(keys);
  DualGrid g;
  const int64_t n = static_cast<int64_t>(vox.size());
  g.coords.resize(3 * n);
  g.dual_vertices.resize(3 * n);
  g.intersected.resize(3 * n);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const OutVoxel& v = vox[order[i]];
    for (int k = 0; k < 3; ++k) {
      g.coords[3 * i + k] = v.c[k];
      g.dual_vertices[3 * i + k] = v.d[k];
      g.intersected[3 * i + k] = v.flag[k];
    }
  }
  return g;
}

// A flagged edge's four voxels all touch the surface at the crossing; rounding in the double
// box test may still miss one. Such voxels are added here, their dual vertex at the middle of
// that edge, so that no quad of a watertight surface is lost.
void add_missing_neighbours(DualGrid& g, std::vector<OutVoxel>& vox) {
  const int64_t n = g.num_voxels();
  const std::vector<uint64_t> keys = voxel_keys(g);  // ascending: g is sorted
  std::vector<OutVoxel> missing;
#pragma omp parallel
  {
    std::vector<OutVoxel> mine;
    UpperNeighbours upper(keys);
#pragma omp for schedule(static) nowait
    for (int64_t i = 0; i < n; ++i) {
      if (!(g.intersected[3 * i] | g.intersected[3 * i + 1] | g.intersected[3 * i + 2])) continue;
      int64_t nb[6];
      upper.find(i, nb);
      for (int a = 0; a < 3; ++a) {
        if (!g.intersected[3 * i + a]) continue;
        for (int j = 1; j < 4; ++j) {
          if (nb[upper_slot(detail::kEdgeRing[a][j])] >= 0) continue;
          OutVoxel v{};
          for (int k = 0; k < 3; ++k) {
            v.c[k] = g.coords[3 * i + k] + detail::kEdgeRing[a][j][k];
            v.d[k] = k == a ? 0.5f : 1.0f - detail::kEdgeRing[a][j][k];
          }
          mine.push_back(v);
        }
      }
    }
#pragma omp critical
    missing.insert(missing.end(), mine.begin(), mine.end());
  }
  if (missing.empty()) return;
  // The same voxel may be missing around several edges: keep the one that sorts first.
  std::sort(missing.begin(), missing.end(), [](const OutVoxel& x, const OutVoxel& y) {
    return std::lexicographical_compare(x.c, x.c + 3, y.c, y.c + 3) ||
           (std::equal(x.c, x.c + 3, y.c) &&
            std::lexicographical_compare(x.d, x.d + 3, y.d, y.d + 3));
  });
  for (size_t i = 0; i < missing.size(); ++i)
    if (i == 0 || !std::equal(missing[i].c, missing[i].c + 3, missing[i - 1].c))
      vox.push_back(missing[i]);
  g = assemble(vox);
}

}  // namespace

DualGrid voxelize_dual_grid(const TriMesh& surface, const GridBox& box) {
  check_mesh(surface, "voxelize_dual_grid");
  check_box(box, "voxelize_dual_grid");
  const std::vector<int64_t> q = snap_to_grid(surface, box);
  const Binning bins = bin_triangles(q, surface, box);
  std::vector<int64_t> start;  // pair ranges of each non-empty block
  for (size_t i = 0; i < bins.block.size(); ++i)
    if (i == 0 || bins.block[i] != bins.block[i - 1]) start.push_back(static_cast<int64_t>(i));
  const int64_t nblocks = static_cast<int64_t>(start.size());
  start.push_back(static_cast<int64_t>(bins.block.size()));
  std::vector<std::vector<OutVoxel>> per_block(nblocks);
#pragma omp parallel
  {
    BlockWorker worker(q, surface.faces, box);
#pragma omp for schedule(dynamic, 1)
    for (int64_t b = 0; b < nblocks; ++b) {
      const uint64_t id = bins.block[start[b]];
      const int32_t origin[3] = {static_cast<int32_t>(id / (bins.nb[1] * bins.nb[2]) * kBlock),
                                 static_cast<int32_t>(id / bins.nb[2] % bins.nb[1] * kBlock),
                                 static_cast<int32_t>(id % bins.nb[2] * kBlock)};
      worker.run(origin, &bins.tri[start[b]], start[b + 1] - start[b], per_block[b]);
    }
  }
  std::vector<OutVoxel> vox;
  size_t total = 0;
  for (const auto& v : per_block) total += v.size();
  vox.reserve(total);
  for (auto& v : per_block) {
    vox.insert(vox.end(), v.begin(), v.end());
    std::vector<OutVoxel>().swap(v);
  }
  DualGrid g = assemble(vox);
  add_missing_neighbours(g, vox);
  return g;
}

// ---- Decoder -----------------------------------------------------------------------------

namespace {

// The first voxel (lowest index) that is not a valid entry, or -1.
int64_t first_bad_voxel(const DualGrid& g, const GridBox& box) {
  const int64_t n = g.num_voxels();
  int64_t bad = std::numeric_limits<int64_t>::max();
#pragma omp parallel for schedule(static) reduction(min : bad)
  for (int64_t i = 0; i < n; ++i) {
    bool ok = true;
    for (int k = 0; k < 3; ++k) {
      ok = ok && g.coords[3 * i + k] >= 0 && g.coords[3 * i + k] < box.size[k];
      ok = ok && std::isfinite(g.dual_vertices[3 * i + k]) && g.intersected[3 * i + k] <= 2;
    }
    if (!ok) bad = std::min(bad, i);
  }
  return bad == std::numeric_limits<int64_t>::max() ? -1 : bad;
}

void check_grid(const DualGrid& g, const GridBox& box) {
  S3D_CHECK(g.coords.size() % 3 == 0, "dual_grid_to_mesh: coords must be whole triples (",
            g.coords.size(), " values)");
  const int64_t n = g.num_voxels();
  S3D_CHECK(g.dual_vertices.size() == g.coords.size() && g.intersected.size() == g.coords.size(),
            "dual_grid_to_mesh: ", n, " voxels but ", g.dual_vertices.size(),
            " dual vertex values and ", g.intersected.size(), " flags (expected ", 3 * n, " each)");
  S3D_CHECK(n <= std::numeric_limits<int32_t>::max(), "dual_grid_to_mesh: ", n,
            " voxels, more than a mesh's int32 indices can name");
  const int64_t bad = first_bad_voxel(g, box);
  if (bad < 0) return;
  const int32_t* c = &g.coords[3 * bad];
  for (int k = 0; k < 3; ++k) {
    S3D_CHECK(c[k] >= 0 && c[k] < box.size[k], "dual_grid_to_mesh: voxel ", bad, " at (", c[0],
              ", ", c[1], ", ", c[2], ") is outside the grid of ", box.size[0], " x ", box.size[1],
              " x ", box.size[2]);
    S3D_CHECK(std::isfinite(g.dual_vertices[3 * bad + k]), "dual_grid_to_mesh: voxel ", bad,
              " has a non-finite dual vertex");
    S3D_CHECK(g.intersected[3 * bad + k] <= 2, "dual_grid_to_mesh: voxel ", bad, " has flag ",
              int(g.intersected[3 * bad + k]), " on axis ", k, ", expected 0, 1 or 2");
  }
}

// The keys of the voxels in ascending order and, unless they came sorted, the permutation
// that sorts them. Throws on a repeated voxel, naming the first one that repeats.
std::vector<uint64_t> sorted_keys(const DualGrid& g, std::vector<int32_t>& order) {
  std::vector<uint64_t> keys = voxel_keys(g);
  const int64_t n = g.num_voxels();
  int64_t unsorted = 0;
#pragma omp parallel for schedule(static) reduction(+ : unsorted)
  for (int64_t i = 1; i < n; ++i) unsorted += keys[i] <= keys[i - 1];
  order.clear();
  if (unsorted == 0) return keys;
  order = detail::sort_order(keys);
  std::vector<uint64_t> sorted(n);
  for (int64_t s = 0; s < n; ++s) sorted[s] = keys[order[s]];
  int64_t first = -1, earlier = -1;  // stable sort: a run of equal keys lists them in order
  for (int64_t s = 1, run = 0; s < n; ++s) {
    if (sorted[s] != sorted[s - 1]) {
      run = s;
    } else if (first < 0 || order[s] < first) {
      first = order[s], earlier = order[run];
    }
  }
  if (first >= 0) {
    const int32_t* c = &g.coords[3 * first];
    fail("dual_grid_to_mesh: voxel ", first, " repeats (", c[0], ", ", c[1], ", ", c[2],
         "), voxel ", earlier);
  }
  return sorted;
}

// Visits the voxels in sorted order, in parallel over contiguous runs: visit(i, quads) for
// each voxel i with a flag, quads[a] the four voxels (input indices) around its edge on axis a
// in o-voxel's order, quads[a][0] = -1 when that edge is not flagged or a voxel is absent.
template <class Visit>
void for_each_quad(const DualGrid& g, const std::vector<uint64_t>& keys,
                   const std::vector<int32_t>& order, Visit&& visit) {
  const int64_t n = g.num_voxels();
#pragma omp parallel
  {
    UpperNeighbours upper(keys);
#pragma omp for schedule(static)
    for (int64_t s = 0; s < n; ++s) {
      const int64_t i = order.empty() ? s : order[s];
      const uint8_t* f = &g.intersected[3 * i];
      if (!(f[0] | f[1] | f[2])) continue;
      int64_t nb[6];
      upper.find(s, nb);
      int32_t quads[3][4];
      for (int a = 0; a < 3; ++a) {
        quads[a][0] = -1;
        if (!f[a]) continue;
        int64_t ring[4];
        if (!detail::edge_ring(s, nb, a, ring)) continue;
        for (int j = 0; j < 4; ++j)
          quads[a][j] = order.empty() ? static_cast<int32_t>(ring[j]) : order[ring[j]];
      }
      visit(i, quads);
    }
  }
}

// o-voxel's split choice: it compares |n0 . n1| of two normals per candidate split, but its
// normals of the second split come out as a cross product of a vector with itself (zero), and
// both of the first split's are normals of triangle (q0, q1, q2). So it keeps the split along
// q0-q2 unless that triangle is degenerate in float32; reproduced as such.
void split_quad(const std::vector<float>& pos, const int32_t q[4], bool reversed, int32_t* tri) {
  auto p = [&](int j) { return Vec3{pos[3 * q[j]], pos[3 * q[j] + 1], pos[3 * q[j] + 2]}; };
  const Vec3 n0 = cross(p(1) - p(0), p(2) - p(0));
  const Vec3 n1 = cross(p(2) - p(1), p(0) - p(1));
  const bool first = std::abs(dot(n0, n1)) > 0;
  const int order[2][6] = {{0, 1, 2, 0, 2, 3}, {0, 1, 3, 3, 1, 2}};
  for (int j = 0; j < 6; ++j) tri[j] = q[order[first ? 0 : 1][j]];
  if (reversed) std::swap(tri[1], tri[2]), std::swap(tri[4], tri[5]);
}

}  // namespace

TriMesh dual_grid_to_mesh(const DualGrid& grid, const GridBox& box) {
  check_box(box, "dual_grid_to_mesh");
  check_grid(grid, box);
  const int64_t n = grid.num_voxels();
  TriMesh out;
  out.positions.resize(3 * n);
  const Vec3 vs = box.voxel_size();
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < 3 * n; ++i) {
    const int k = static_cast<int>(i % 3);
    out.positions[i] =
        (static_cast<float>(grid.coords[i]) + grid.dual_vertices[i]) * vs[k] + box.lo[k];
  }
  std::vector<int32_t> order;
  const std::vector<uint64_t> keys = sorted_keys(grid, order);
  // Two sweeps (count, then write at the prefix sums): the faces come in voxel order, then
  // axis order, as o-voxel lists them, whatever the thread count.
  std::vector<int64_t> start(n + 1, 0);
  for_each_quad(grid, keys, order, [&](int64_t i, const int32_t quads[3][4]) {
    start[i + 1] = 2 * ((quads[0][0] >= 0) + (quads[1][0] >= 0) + (quads[2][0] >= 0));
  });
  for (int64_t i = 0; i < n; ++i) start[i + 1] += start[i];
  out.faces.resize(3 * start[n]);
  for_each_quad(grid, keys, order, [&](int64_t i, const int32_t quads[3][4]) {
    int64_t at = 3 * start[i];
    for (int a = 0; a < 3; ++a) {
      if (quads[a][0] < 0) continue;
      split_quad(out.positions, quads[a], grid.intersected[3 * i + a] == 2, &out.faces[at]);
      at += 6;
    }
  });
  return out;
}

}  // namespace s3d::mesh
