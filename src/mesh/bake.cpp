// Texture baking in UV space (bake.h): a fixed-point rasteriser over row bands, the bake
// proper (interpolate, project onto the decoded surface, sample the volume) and a pull-push
// fill of the texels no chart covers.
#include "mesh/bake.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "core/error.h"
#include "mesh/bake_cuda.h"
#include "mesh/timing.h"

namespace s3d::mesh {
namespace {

// ---- rasterize_uv ---------------------------------------------------------------------------
// Vertices snap to 1/4096 of a texel, so that edge functions are exact 64-bit integers: an edge
// shared by two faces then gives the two faces exactly opposite values at every texel centre,
// and the top-left rule can hand each centre on it to exactly one of them. With sizes up to
// 16384 and UVs in [-1, 2], coordinates stay under 2^28 and products under 2^57.
constexpr int kSubBits = 12;
constexpr int64_t kOne = int64_t(1) << kSubBits;  // one texel
constexpr int64_t kHalf = kOne / 2;               // a texel centre's offset
constexpr int kBandRows = 16;                     // rows per band of the binning
constexpr int32_t kMaxRasterSize = 16384;

int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }
int64_t ceil_div(int64_t a, int64_t b) { return -floor_div(-a, b); }

// One face in fixed point, oriented so that its area is positive.
struct FixedTri {
  int64_t x[3], y[3];
  int64_t area = 0;                          // twice the area, > 0 when the face covers anything
  bool swapped = false;                      // vertices 1 and 2 exchanged to make the area positive
  int32_t r0 = 0, r1 = -1, c0 = 0, c1 = -1;  // texel rows and columns whose centres it spans
};

FixedTri setup_triangle(const float* const uv[3], int32_t size) {
  FixedTri t;
  const double scale = double(size) * double(kOne);
  for (int k = 0; k < 3; ++k) {
    t.x[k] = std::llround(uv[k][0] * scale);
    t.y[k] = std::llround(uv[k][1] * scale);
  }
  t.area = (t.x[1] - t.x[0]) * (t.y[2] - t.y[0]) - (t.y[1] - t.y[0]) * (t.x[2] - t.x[0]);
  if (t.area == 0) return t;
  if (t.area < 0) {
    std::swap(t.x[1], t.x[2]);
    std::swap(t.y[1], t.y[2]);
    t.area = -t.area;
    t.swapped = true;
  }
  const int64_t xlo = std::min({t.x[0], t.x[1], t.x[2]}), xhi = std::max({t.x[0], t.x[1], t.x[2]});
  const int64_t ylo = std::min({t.y[0], t.y[1], t.y[2]}), yhi = std::max({t.y[0], t.y[1], t.y[2]});
  // Texel c's centre is c * kOne + kHalf.
  t.c0 = static_cast<int32_t>(std::max<int64_t>(0, ceil_div(xlo - kHalf, kOne)));
  t.c1 = static_cast<int32_t>(std::min<int64_t>(size - 1, floor_div(xhi - kHalf, kOne)));
  t.r0 = static_cast<int32_t>(std::max<int64_t>(0, ceil_div(ylo - kHalf, kOne)));
  t.r1 = static_cast<int32_t>(std::min<int64_t>(size - 1, floor_div(yhi - kHalf, kOne)));
  if (t.c0 > t.c1) t.r1 = t.r0 - 1;  // no column: no row either
  return t;
}

FixedTri setup_face(const UvMesh& m, int64_t f, int32_t size) {
  const float* const uv[3] = {&m.uvs[2 * m.faces[3 * f]], &m.uvs[2 * m.faces[3 * f + 1]],
                              &m.uvs[2 * m.faces[3 * f + 2]]};
  return setup_triangle(uv, size);
}

// Calls visit(texel, e) for every texel centre of rows [row_lo, row_hi] inside t, where e holds
// the three edge functions there. An edge function is zero on the edge and positive inside; a
// centre exactly on an edge counts as inside when the centre nudged by (e, e^2), e -> 0, is
// inside: for edge direction (dx, dy) that is dy < 0, or dy == 0 and dx > 0 (a top-left rule).
// The nudge is one fixed direction, so of two faces sharing an edge, or of the fan around a
// shared vertex, exactly one takes the centre.
template <typename Visit>
void for_each_texel(const FixedTri& t, int32_t size, int32_t row_lo, int32_t row_hi,
                    Visit&& visit) {
  int64_t dx[3], dy[3], bias[3];
  for (int i = 0; i < 3; ++i) {
    const int j = (i + 1) % 3;
    dx[i] = t.x[j] - t.x[i];
    dy[i] = t.y[j] - t.y[i];
    bias[i] = (dy[i] < 0 || (dy[i] == 0 && dx[i] > 0)) ? 0 : 1;
  }
  const int32_t r_begin = std::max(row_lo, t.r0), r_end = std::min(row_hi, t.r1);
  for (int32_t r = r_begin; r <= r_end; ++r) {
    const int64_t py = int64_t(r) * kOne + kHalf;
    const int64_t px0 = int64_t(t.c0) * kOne + kHalf;
    int64_t e[3];
    for (int i = 0; i < 3; ++i) e[i] = dx[i] * (py - t.y[i]) - dy[i] * (px0 - t.x[i]);
    for (int32_t c = t.c0; c <= t.c1; ++c) {
      if (e[0] >= bias[0] && e[1] >= bias[1] && e[2] >= bias[2]) visit(int64_t(r) * size + c, e);
      for (int i = 0; i < 3; ++i) e[i] -= dy[i] * kOne;
    }
  }
}

// Rasterises face f over rows [row_lo, row_hi] into out: the higher face index wins a texel.
void raster_face(const FixedTri& t, int32_t f, int32_t size, int32_t row_lo, int32_t row_hi,
                 UvRaster& out) {
  const double inv_area = 1.0 / double(t.area);
  for_each_texel(t, size, row_lo, row_hi, [&](int64_t texel, const int64_t* e) {
    if (f <= out.face[texel]) return;
    // Weight of a vertex = the edge function of the edge facing it, over the area.
    const float w1 = static_cast<float>(double(e[2]) * inv_area);  // facing vertex 1
    const float w2 = static_cast<float>(double(e[0]) * inv_area);  // facing vertex 2
    out.face[texel] = f;
    out.bary[2 * texel] = t.swapped ? w2 : w1;
    out.bary[2 * texel + 1] = t.swapped ? w1 : w2;
  });
}

void check_uv_mesh(const UvMesh& m, const char* what) {
  S3D_CHECK(m.uvs.size() % 2 == 0 && m.faces.size() % 3 == 0, what,
            ": uvs and faces must be whole pairs and triples (", m.uvs.size(), " and ",
            m.faces.size(), " values)");
  S3D_CHECK(m.num_faces() < (int64_t(1) << 31), what, ": ", m.num_faces(), " faces exceed int32");
  const int64_t V = m.num_vertices();
  for (int64_t i = 0; i < 2 * V; ++i) {
    const float u = m.uvs[i];
    S3D_CHECK(std::isfinite(u) && u >= -1.0f && u <= 2.0f, what, ": vertex ", i / 2,
              " has uv coordinate ", u, " (must be finite, within [-1, 2])");
  }
  for (size_t i = 0; i < m.faces.size(); ++i) {
    S3D_CHECK(m.faces[i] >= 0 && m.faces[i] < V, what, ": face ", i / 3, " names vertex ",
              m.faces[i], ", outside [0, ", V, ")");
  }
}

// Faces binned into bands of kBandRows rows, each band's list in ascending face order (CSR).
// Counted per thread over fixed chunks of faces, so the lists do not depend on the schedule.
struct Bins {
  std::vector<int64_t> offset;  // bands + 1
  std::vector<int32_t> faces;
};

Bins bin_faces(const std::vector<FixedTri>& tris, int32_t bands) {
  const int64_t F = static_cast<int64_t>(tris.size());
  const int T = F < kParallelMin ? 1 : omp_get_max_threads();
  std::vector<int64_t> counts(int64_t(T) * bands, 0);
  const int64_t chunk = (F + T - 1) / T;
#pragma omp parallel num_threads(T)
  {
    const int t = omp_get_thread_num();
    int64_t* cnt = &counts[int64_t(t) * bands];
    for (int64_t f = t * chunk; f < std::min(F, (t + 1) * chunk); ++f) {
      if (tris[f].r0 > tris[f].r1) continue;
      for (int32_t b = tris[f].r0 / kBandRows; b <= tris[f].r1 / kBandRows; ++b) ++cnt[b];
    }
  }
  Bins bins;
  bins.offset.assign(bands + 1, 0);
  int64_t total = 0;
  for (int32_t b = 0; b < bands; ++b) {  // counts become each thread's start in its band
    bins.offset[b] = total;
    for (int t = 0; t < T; ++t) {
      const int64_t n = counts[int64_t(t) * bands + b];
      counts[int64_t(t) * bands + b] = total;
      total += n;
    }
  }
  bins.offset[bands] = total;
  bins.faces.resize(total);
#pragma omp parallel num_threads(T)
  {
    const int t = omp_get_thread_num();
    int64_t* pos = &counts[int64_t(t) * bands];
    for (int64_t f = t * chunk; f < std::min(F, (t + 1) * chunk); ++f) {
      if (tris[f].r0 > tris[f].r1) continue;
      for (int32_t b = tris[f].r0 / kBandRows; b <= tris[f].r1 / kBandRows; ++b)
        bins.faces[pos[b]++] = static_cast<int32_t>(f);
    }
  }
  return bins;
}

// ---- bake -----------------------------------------------------------------------------------
constexpr int64_t kBakeChunk = int64_t(1) << 20;  // texels per batch of queries

void check_bake_inputs(const UvRaster& raster, const BakeInputs& in) {
  S3D_CHECK(in.uv_mesh && in.surface && in.volume,
            "bake: uv_mesh, surface and volume must all be set");
  const int64_t n = int64_t(raster.size) * raster.size;
  S3D_CHECK(raster.size > 0 && static_cast<int64_t>(raster.face.size()) == n &&
                static_cast<int64_t>(raster.bary.size()) == 2 * n,
            "bake: the raster of size ", raster.size, " has ", raster.face.size(), " faces and ",
            raster.bary.size(), " barycentrics (expected ", n, " and ", 2 * n, ")");
  const UvMesh& m = *in.uv_mesh;
  S3D_CHECK(
      static_cast<int64_t>(m.positions.size()) == 3 * m.num_vertices() && m.faces.size() % 3 == 0,
      "bake: the UV mesh has ", m.positions.size(), " position values for ", m.num_vertices(),
      " vertices");
  for (size_t i = 0; i < m.faces.size(); ++i) {
    S3D_CHECK(m.faces[i] >= 0 && m.faces[i] < m.num_vertices(), "bake: UV mesh face ", i / 3,
              " names vertex ", m.faces[i], ", outside [0, ", m.num_vertices(), ")");
  }
  for (int k = 0; k < 3; ++k) {
    S3D_CHECK(
        std::isfinite(in.grid_origin[k]) && std::isfinite(in.voxel_size[k]) && in.voxel_size[k] > 0,
        "bake: grid origin and voxel size must be finite and the voxel size positive (axis ", k,
        ": origin ", in.grid_origin[k], ", voxel size ", in.voxel_size[k], ")");
  }
}

// The output mesh's 3D point under each listed texel.
void texel_points(const UvRaster& raster, const UvMesh& m, const int64_t* texels, int64_t n,
                  float* points) {
  const int64_t F = m.num_faces();
  bool bad = false;
#pragma omp parallel for schedule(static) reduction(|| : bad) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const int64_t t = texels[i];
    const int32_t f = raster.face[t];
    if (f >= F) {
      bad = true;
      continue;
    }
    const float b1 = raster.bary[2 * t], b2 = raster.bary[2 * t + 1], b0 = 1 - b1 - b2;
    const float* p0 = &m.positions[3 * m.faces[3 * f]];
    const float* p1 = &m.positions[3 * m.faces[3 * f + 1]];
    const float* p2 = &m.positions[3 * m.faces[3 * f + 2]];
    for (int k = 0; k < 3; ++k) points[3 * i + k] = b0 * p0[k] + b1 * p1[k] + b2 * p2[k];
  }
  S3D_CHECK(!bad, "bake: the raster names a face beyond the UV mesh's ", F, " faces");
}

// Replaces each point by its closest point on the decoded surface, in grid units.
void project_to_grid(const BakeInputs& in, const ClosestHit* hits, int64_t n, float* points) {
  const TriMesh& s = in.surface->mesh();
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const ClosestHit& h = hits[i];
    float q[3] = {points[3 * i], points[3 * i + 1], points[3 * i + 2]};
    if (h.face >= 0) {
      const int32_t* tri = &s.faces[3 * h.face];
      for (int k = 0; k < 3; ++k) {
        q[k] = h.uvw[0] * s.positions[3 * tri[0] + k] + h.uvw[1] * s.positions[3 * tri[1] + k] +
               h.uvw[2] * s.positions[3 * tri[2] + k];
      }
    }
    for (int k = 0; k < 3; ++k) points[3 * i + k] = (q[k] - in.grid_origin[k]) / in.voxel_size[k];
  }
}

// ---- fill_uncovered -------------------------------------------------------------------------
// One level of the pull-push pyramid: per texel, the mean of the covered finest texels under it
// and how many there are (0: a hole at this level).
struct Level {
  int32_t w = 0, h = 0;
  Unfilled<float> value;   // w * h * channels (every element written by the pull)
  Unfilled<float> weight;  // w * h
};

Level pull_from_image(const std::vector<uint8_t>& image, const std::vector<uint8_t>& mask,
                      int32_t W, int32_t H, int32_t C) {
  Level L;
  L.w = (W + 1) / 2, L.h = (H + 1) / 2;
  L.value.resize(int64_t(L.w) * L.h * C);  // unwritten (Unfilled): the loop sets each one
  L.weight.resize(int64_t(L.w) * L.h);
#pragma omp parallel for schedule(static) if (int64_t(W) * H > kParallelMin)
  for (int32_t y = 0; y < L.h; ++y) {
    for (int32_t x = 0; x < L.w; ++x) {
      double sum[16] = {};
      int n = 0;
      for (int32_t yy = 2 * y; yy < std::min(H, 2 * y + 2); ++yy)
        for (int32_t xx = 2 * x; xx < std::min(W, 2 * x + 2); ++xx) {
          const int64_t i = int64_t(yy) * W + xx;
          if (!mask[i]) continue;
          ++n;
          for (int32_t c = 0; c < C; ++c) sum[c] += image[i * C + c];
        }
      const int64_t o = int64_t(y) * L.w + x;
      L.weight[o] = static_cast<float>(n);
      for (int32_t c = 0; c < C; ++c)
        L.value[o * C + c] = n > 0 ? static_cast<float>(sum[c] / n) : 0.0f;
    }
  }
  return L;
}

Level pull(const Level& f, int32_t C) {
  Level L;
  L.w = (f.w + 1) / 2, L.h = (f.h + 1) / 2;
  L.value.resize(int64_t(L.w) * L.h * C);  // unwritten (Unfilled): the loop sets each one
  L.weight.resize(int64_t(L.w) * L.h);
#pragma omp parallel for schedule(static) if (int64_t(f.w) * f.h > kParallelMin)
  for (int32_t y = 0; y < L.h; ++y) {
    for (int32_t x = 0; x < L.w; ++x) {
      double sum[16] = {}, n = 0;  // counts and products stay exact in double
      for (int32_t yy = 2 * y; yy < std::min(f.h, 2 * y + 2); ++yy)
        for (int32_t xx = 2 * x; xx < std::min(f.w, 2 * x + 2); ++xx) {
          const int64_t i = int64_t(yy) * f.w + xx;
          const double w = f.weight[i];
          if (w == 0) continue;
          n += w;
          for (int32_t c = 0; c < C; ++c) sum[c] += w * f.value[i * C + c];
        }
      const int64_t o = int64_t(y) * L.w + x;
      L.weight[o] = static_cast<float>(n);
      for (int32_t c = 0; c < C; ++c)
        L.value[o * C + c] = n > 0 ? static_cast<float>(sum[c] / n) : 0.0f;
    }
  }
  return L;
}

// The coarse level bilinearly at fine texel (x, y): coarse texel j sits over fine texels 2j and
// 2j + 1, so fine texel x falls a quarter of a coarse texel off the nearer coarse centre.
void upsample(const Level& coarse, int32_t x, int32_t y, int32_t C, float* out) {
  const int32_t x0 = (x & 1) ? x / 2 : x / 2 - 1, y0 = (y & 1) ? y / 2 : y / 2 - 1;
  const float fx1 = (x & 1) ? 0.25f : 0.75f, fy1 = (y & 1) ? 0.25f : 0.75f;
  const int32_t xs[2] = {std::clamp(x0, 0, coarse.w - 1), std::clamp(x0 + 1, 0, coarse.w - 1)};
  const int32_t ys[2] = {std::clamp(y0, 0, coarse.h - 1), std::clamp(y0 + 1, 0, coarse.h - 1)};
  const float wx[2] = {1 - fx1, fx1}, wy[2] = {1 - fy1, fy1};
  for (int32_t c = 0; c < C; ++c) out[c] = 0;
  for (int j = 0; j < 2; ++j)
    for (int i = 0; i < 2; ++i) {
      const float w = wx[i] * wy[j];
      const float* v = &coarse.value[(int64_t(ys[j]) * coarse.w + xs[i]) * C];
      for (int32_t c = 0; c < C; ++c) out[c] += w * v[c];
    }
}

// Fills the holes of `fine` (weight 0) from the complete coarser level.
void push(Level& fine, const Level& coarse, int32_t C) {
#pragma omp parallel for schedule(static) if (int64_t(fine.w) * fine.h > kParallelMin)
  for (int32_t y = 0; y < fine.h; ++y)
    for (int32_t x = 0; x < fine.w; ++x) {
      const int64_t o = int64_t(y) * fine.w + x;
      if (fine.weight[o] == 0) upsample(coarse, x, y, C, &fine.value[o * C]);
    }
}

}  // namespace

void covered_texels(const float* uv0, const float* uv1, const float* uv2, int32_t size,
                    std::vector<int64_t>& out) {
  const float* const uv[3] = {uv0, uv1, uv2};
  const FixedTri t = setup_triangle(uv, size);
  if (t.area == 0) return;
  for_each_texel(t, size, t.r0, t.r1, [&](int64_t texel, const int64_t*) { out.push_back(texel); });
}

UvRaster rasterize_uv(const UvMesh& m, int32_t size) {
  S3D_CHECK(size > 0 && size <= kMaxRasterSize, "rasterize_uv: size must be in [1, ",
            kMaxRasterSize, "], got ", size);
  check_uv_mesh(m, "rasterize_uv");
  const int64_t F = m.num_faces();
  std::vector<FixedTri> tris(F);
#pragma omp parallel for schedule(static) if (F > kParallelMin)
  for (int64_t f = 0; f < F; ++f) tris[f] = setup_face(m, f, size);
  const int32_t bands = (size + kBandRows - 1) / kBandRows;
  const Bins bins = bin_faces(tris, bands);
  UvRaster out;
  out.size = size;
  const int64_t n = int64_t(size) * size;
  out.face.resize(n);  // unwritten (Unfilled): filled here by all threads
  out.bary.resize(2 * n);
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t t = 0; t < n; ++t) {
    out.face[t] = -1;
    out.bary[2 * t] = out.bary[2 * t + 1] = 0.0f;
  }
  // Bands own disjoint rows, so threads never write the same texel; within a band, the
  // higher face index wins whatever the order.
#pragma omp parallel for schedule(dynamic, 1) if (F + int64_t(size) * size > kParallelMin)
  for (int32_t b = 0; b < bands; ++b) {
    const int32_t row_lo = b * kBandRows, row_hi = std::min(size, row_lo + kBandRows) - 1;
    for (int64_t i = bins.offset[b]; i < bins.offset[b + 1]; ++i) {
      const int32_t f = bins.faces[i];
      raster_face(tris[f], f, size, row_lo, row_hi, out);
    }
  }
  return out;
}

namespace {

// Squared distance from (px, py) to the triangle (u, v) (texels; any winding, degenerate ones
// as their segments).
double distance2_to_triangle(const double u[3], const double v[3], double px, double py) {
  const double det = (u[1] - u[0]) * (v[2] - v[0]) - (v[1] - v[0]) * (u[2] - u[0]);
  if (det != 0) {
    const double b1 = ((px - u[0]) * (v[2] - v[0]) - (py - v[0]) * (u[2] - u[0])) / det;
    const double b2 = ((u[1] - u[0]) * (py - v[0]) - (v[1] - v[0]) * (px - u[0])) / det;
    if (b1 >= 0 && b2 >= 0 && b1 + b2 <= 1) return 0;
  }
  double best = INFINITY;
  for (int k = 0; k < 3; ++k) {
    const int j = (k + 1) % 3;
    const double ex = u[j] - u[k], ey = v[j] - v[k];
    const double len2 = ex * ex + ey * ey;
    double t = len2 > 0 ? ((px - u[k]) * ex + (py - v[k]) * ey) / len2 : 0;
    t = std::clamp(t, 0.0, 1.0);
    const double dx = u[k] + t * ex - px, dy = v[k] + t * ey - py;
    best = std::min(best, dx * dx + dy * dy);
  }
  return best;
}

// Max-norm (Chebyshev) distance from (px, py), outside the triangle (u, v), to it: the half
// side of the smallest square centred there that touches one of its edges. Along an edge the
// distance is convex and piecewise linear in the edge's parameter, so its least value is at an
// end or where the two coordinates' offsets are equal in size. (Its only caller has already
// found the point outside, so the inside test is not repeated here.)
double chebyshev_to_edges(const double u[3], const double v[3], double px, double py) {
  double best = INFINITY;
  for (int k = 0; k < 3; ++k) {
    const int j = (k + 1) % 3;
    const double ax = u[k] - px, ay = v[k] - py, ex = u[j] - u[k], ey = v[j] - v[k];
    const double ts[4] = {0, 1, ex != ey ? (ay - ax) / (ex - ey) : 0,
                          ex != -ey ? -(ax + ay) / (ex + ey) : 0};
    for (double t : ts) {
      t = std::clamp(t, 0.0, 1.0);
      best = std::min(best, std::max(std::abs(ax + t * ex), std::abs(ay + t * ey)));
    }
  }
  return best;
}

// A face's claim on an uncovered texel centre (px, py), (squared distance, face) packed so that
// the smaller key is the nearer face, the lower index at equal distance; kNone beyond reach.
// Nonnegative floats order as their bits do, and their top bit is free: it is set (kUnread) for
// a face 1 texel or more from the centre in max norm, so that a face that bilinear filtering
// reads the texel for (a point of it within 1 texel in both axes) comes first. The atlas keeps
// charts padding + 1 >= 2 texels apart in max norm, so the texels read at any point of a chart
// are its own, even where another chart's corner is nearer in Euclidean distance.
constexpr uint64_t kNone = ~uint64_t(0);
constexpr uint64_t kUnread = uint64_t(1) << 63;
uint64_t dilation_key(const double u[3], const double v[3], double px, double py, int32_t f,
                      double reach2) {
  const double d2 = distance2_to_triangle(u, v, px, py);
  if (!(d2 <= reach2)) return kNone;
  // Max norm <= Euclidean <= sqrt(2) max norm: only 1 <= d2 < 2 (outside) needs the max norm.
  const bool read = d2 < 1 || (d2 < 2 && chebyshev_to_edges(u, v, px, py) < 1);
  return (read ? 0 : kUnread) | (uint64_t(std::bit_cast<uint32_t>(static_cast<float>(d2))) << 32) |
         static_cast<uint32_t>(f);
}

void face_uv_texels(const UvMesh& m, int32_t f, int32_t S, double u[3], double v[3]) {
  for (int k = 0; k < 3; ++k) {
    u[k] = double(m.uvs[2 * m.faces[3 * int64_t(f) + k]]) * S;
    v[k] = double(m.uvs[2 * m.faces[3 * int64_t(f) + k] + 1]) * S;
  }
}

}  // namespace

int64_t dilate_raster(UvRaster& r, const UvMesh& m, int32_t radius) {
  S3D_CHECK(radius >= 0 && radius <= 64, "dilate_raster: radius must be in [0, 64], got ", radius);
  const int32_t S = r.size;
  const int64_t n = int64_t(S) * S;
  S3D_CHECK(S > 0 && static_cast<int64_t>(r.face.size()) == n &&
                static_cast<int64_t>(r.bary.size()) == 2 * n,
            "dilate_raster: the raster of size ", S, " has ", r.face.size(), " faces and ",
            r.bary.size(), " barycentrics");
  if (radius == 0) return 0;
  int32_t highest = -1;
#pragma omp parallel for schedule(static) reduction(max : highest) if (n > kParallelMin)
  for (int64_t t = 0; t < n; ++t) highest = std::max(highest, r.face[t]);
  S3D_CHECK(highest < m.num_faces(), "dilate_raster: the raster names face ", highest, " of ",
            m.num_faces());
  // Per uncovered texel, the least dilation_key over all faces: the result does not depend on
  // the order the threads visit them in.
  Unfilled<uint64_t> best(n);  // unwritten until the threads fill it
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t t = 0; t < n; ++t) best[t] = kNone;
  const double reach2 = double(radius) * radius;
  const int64_t F = m.num_faces();
#pragma omp parallel for schedule(dynamic, 4096) if (F > kParallelMin)
  for (int64_t f = 0; f < F; ++f) {
    double u[3], v[3];
    face_uv_texels(m, static_cast<int32_t>(f), S, u, v);
    if (!std::isfinite(u[0] + u[1] + u[2] + v[0] + v[1] + v[2])) continue;
    // Texel centres (c + 0.5, r + 0.5) within `radius` of the triangle's box.
    const double lo_x = std::min({u[0], u[1], u[2]}) - radius, hi_x = std::max({u[0], u[1], u[2]}) + radius;
    const double lo_y = std::min({v[0], v[1], v[2]}) - radius, hi_y = std::max({v[0], v[1], v[2]}) + radius;
    const int32_t c0 = static_cast<int32_t>(std::max(0.0, std::ceil(lo_x - 0.5)));
    const int32_t c1 = static_cast<int32_t>(std::min(S - 1.0, std::floor(hi_x - 0.5)));
    const int32_t r0 = static_cast<int32_t>(std::max(0.0, std::ceil(lo_y - 0.5)));
    const int32_t r1 = static_cast<int32_t>(std::min(S - 1.0, std::floor(hi_y - 0.5)));
    for (int32_t y = r0; y <= r1; ++y)
      for (int32_t x = c0; x <= c1; ++x) {
        const int64_t t = int64_t(y) * S + x;
        if (r.face[t] >= 0) continue;
        const uint64_t key = dilation_key(u, v, x + 0.5, y + 0.5, static_cast<int32_t>(f), reach2);
        if (key == kNone) continue;
        std::atomic_ref<uint64_t> slot(best[t]);
        uint64_t cur = slot.load(std::memory_order_relaxed);
        while (key < cur && !slot.compare_exchange_weak(cur, key, std::memory_order_relaxed)) {
        }
      }
  }
  // Each chosen face's plane continued to the texel's centre (barycentrics outside [0, 1]).
  int64_t given = 0;
#pragma omp parallel for schedule(static) reduction(+ : given) if (n > kParallelMin)
  for (int64_t t = 0; t < n; ++t) {
    if (best[t] == kNone) continue;
    const int32_t f = static_cast<int32_t>(best[t] & 0xffffffffu);
    double u[3], v[3];
    face_uv_texels(m, f, S, u, v);
    const double px = double(t % S) + 0.5, py = double(t / S) + 0.5;
    const double det = (u[1] - u[0]) * (v[2] - v[0]) - (v[1] - v[0]) * (u[2] - u[0]);
    double b1 = 0, b2 = 0;
    if (det != 0) {
      b1 = ((px - u[0]) * (v[2] - v[0]) - (py - v[0]) * (u[2] - u[0])) / det;
      b2 = ((u[1] - u[0]) * (py - v[0]) - (v[1] - v[0]) * (px - u[0])) / det;
    } else {
      b1 = b2 = 1.0 / 3;  // a face without UV area: its centroid
    }
    r.face[t] = f;
    r.bary[2 * t] = static_cast<float>(b1);
    r.bary[2 * t + 1] = static_cast<float>(b2);
    ++given;
  }
  return given;
}

BakedTexture bake(const UvRaster& raster, const BakeInputs& in) {
  check_bake_inputs(raster, in);
  const int32_t C = in.volume->channels();
  const int64_t n = int64_t(raster.size) * raster.size;
  BakedTexture out;
  out.size = raster.size;
  out.channels = C;
  SubTimer timer("bake");
  out.attrs.resize(n * C);  // unwritten (Unfilled): every element is set below
  out.mask.resize(n);
  // The covered texels in row-major order: counted per row, then listed per row in parallel;
  // uncovered texels get their zeros here.
  const int32_t S = raster.size;
  std::vector<int64_t> row_start(static_cast<size_t>(S) + 1, 0);
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int32_t y = 0; y < S; ++y) {
    int64_t covered = 0;
    for (int64_t t = int64_t(y) * S; t < int64_t(y + 1) * S; ++t) covered += raster.face[t] >= 0;
    row_start[y + 1] = covered;
  }
  for (int32_t y = 0; y < S; ++y) row_start[y + 1] += row_start[y];
  Unfilled<int64_t> texels(row_start[S]);  // unwritten: the loop below sets each one
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int32_t y = 0; y < S; ++y) {
    int64_t at = row_start[y];
    for (int64_t t = int64_t(y) * S; t < int64_t(y + 1) * S; ++t) {
      const bool covered = raster.face[t] >= 0;
      out.mask[t] = covered ? 1 : 0;
      if (covered) texels[at++] = t;
      else std::fill_n(&out.attrs[t * C], C, 0.0f);
    }
  }
  timer.mark("texel list");
  const int64_t N = static_cast<int64_t>(texels.size());
  const bool on_device = in.device_volume != nullptr && in.surface->device() != nullptr;
  std::vector<float> points(3 * std::min(N, kBakeChunk));
  std::vector<ClosestHit> hits(on_device ? 0 : std::min(N, kBakeChunk));  // the CPU's queries
  std::vector<float> sampled(C * std::min(N, kBakeChunk));
  for (int64_t start = 0; start < N; start += kBakeChunk) {
    const int64_t k = std::min(kBakeChunk, N - start);
    texel_points(raster, *in.uv_mesh, &texels[start], k, points.data());
    timer.mark("texel points");
    if (on_device) {
      sample_surface_on_device(*in.surface->device(), *in.device_volume, in.grid_origin.data(),
                               in.voxel_size.data(), points.data(), k, sampled.data());
      timer.mark("closest points and volume samples on the device");
    } else {
      in.surface->closest_many(points.data(), k, hits.data());
      timer.mark("closest points");
      project_to_grid(in, hits.data(), k, points.data());
      in.volume->sample_trilinear(points.data(), k, sampled.data());
      timer.mark("volume samples");
    }
#pragma omp parallel for schedule(static) if (k > kParallelMin)
    for (int64_t i = 0; i < k; ++i)
      std::memcpy(&out.attrs[texels[start + i] * C], &sampled[i * C], sizeof(float) * C);
  }
  return out;
}

void fill_uncovered(std::vector<uint8_t>& image, const std::vector<uint8_t>& mask, int32_t width,
                    int32_t height, int32_t channels) {
  S3D_CHECK(width > 0 && height > 0 && channels > 0 && channels <= 16,
            "fill_uncovered: width and height must be positive and channels in [1, 16] (got ",
            width, " x ", height, " x ", channels, ")");
  const int64_t n = int64_t(width) * height;
  S3D_CHECK(
      static_cast<int64_t>(image.size()) == n * channels && static_cast<int64_t>(mask.size()) == n,
      "fill_uncovered: a ", width, " x ", height, " x ", channels, " image needs ", n * channels,
      " bytes and a mask of ", n, " (got ", image.size(), " and ", mask.size(), ")");
  bool any = false;
  for (int64_t i = 0; i < n && !any; ++i) any = mask[i] != 0;
  if (!any || (width == 1 && height == 1)) return;
  // Pull: halve until one texel remains; push: fill each level's holes from the level above.
  std::vector<Level> levels;
  levels.push_back(pull_from_image(image, mask, width, height, channels));
  while (levels.back().w > 1 || levels.back().h > 1)
    levels.push_back(pull(levels.back(), channels));
  for (size_t k = levels.size() - 1; k > 0; --k) push(levels[k - 1], levels[k], channels);
  const Level& top = levels.front();
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int32_t y = 0; y < height; ++y) {
    float v[16];
    for (int32_t x = 0; x < width; ++x) {
      const int64_t i = int64_t(y) * width + x;
      if (mask[i]) continue;
      upsample(top, x, y, channels, v);
      for (int32_t c = 0; c < channels; ++c)
        image[i * channels + c] = static_cast<uint8_t>(std::clamp(std::lround(v[c]), 0L, 255L));
    }
  }
}

}  // namespace s3d::mesh
