// The UV rasteriser against brute force (the highest face whose triangle holds the texel
// centre nudged by (e, e^2), evaluated exactly), on random odd meshes whose corners sit on
// half-texel lines so that many centres fall on edges and corners; the bake against an
// analytic linear field; the pull-push fill's stated properties.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <random>

#include "../expect_error.h"
#include "mesh/bake.h"

namespace s3d::mesh {
namespace {

// ---- rasterize_uv ---------------------------------------------------------------------------

// Random triangles with corners on the grid of half texels (units of 1 / (2 size)), some
// reaching past the unit square, some without area, overlapping freely.
UvMesh random_grid_mesh(int faces, int size, int max_extent, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> anchor(-4, 2 * size + 4), d(-max_extent, max_extent);
  UvMesh m;
  for (int f = 0; f < faces; ++f) {
    const int ax = anchor(rng), ay = anchor(rng);
    for (int k = 0; k < 3; ++k) {
      int x = ax + d(rng), y = ay + d(rng);
      if (f % 7 == 3 && k == 2) x = ax, y = ay;  // a repeated corner: no area
      x = std::clamp(x, -2 * size, 4 * size), y = std::clamp(y, -2 * size, 4 * size);
      m.uvs.push_back(float(x) / float(2 * size));
      m.uvs.push_back(float(y) / float(2 * size));
      m.positions.insert(m.positions.end(), {float(f), float(k), 0});
      m.faces.push_back(3 * f + k);
    }
  }
  return m;
}

// `faces` small triangles (sides up to 3 texels) at random places off any grid, UVs for `size`.
UvMesh random_scattered_mesh(int faces, int size, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> at(0.0f, float(size)), d(-1.5f, 1.5f);
  UvMesh m;
  for (int f = 0; f < faces; ++f) {
    const float ax = at(rng), ay = at(rng);
    for (int k = 0; k < 3; ++k) {
      m.uvs.push_back((ax + d(rng)) / float(size));
      m.uvs.push_back((ay + d(rng)) / float(size));
      m.positions.insert(m.positions.end(), {float(f), float(k), 0});
      m.faces.push_back(3 * f + k);
    }
  }
  return m;
}

// Corners in half-texel units; is the texel centre (2c+1, 2r+1) nudged by (e, e^2) strictly
// inside? The nudge is made exact by scaling: corners by 2^20, the centre moved by (2^10, 1).
bool covers_nudged(const int64_t x[3], const int64_t y[3], int64_t cx, int64_t cy) {
  const int64_t M = int64_t(1) << 20;
  const int64_t px = cx * M + (1 << 10), py = cy * M + 1;
  int pos = 0, neg = 0;
  for (int i = 0; i < 3; ++i) {
    const int j = (i + 1) % 3;
    // Scaled corners; each product stays under 2^58 for corners within +-2^8.
    const int64_t e = (x[j] - x[i]) * M * (py - y[i] * M) - (y[j] - y[i]) * M * (px - x[i] * M);
    pos += e > 0;
    neg += e < 0;
  }
  return pos == 3 || neg == 3;
}

std::vector<int32_t> brute_force_faces(const UvMesh& m, int size) {
  std::vector<int32_t> face(size * size, -1);
  for (int64_t f = 0; f < m.num_faces(); ++f) {
    int64_t x[3], y[3];
    for (int k = 0; k < 3; ++k) {
      x[k] = std::llround(m.uvs[2 * m.faces[3 * f + k]] * 2.0 * size);
      y[k] = std::llround(m.uvs[2 * m.faces[3 * f + k] + 1] * 2.0 * size);
    }
    for (int r = 0; r < size; ++r)
      for (int c = 0; c < size; ++c)
        if (covers_nudged(x, y, 2 * c + 1, 2 * r + 1)) face[r * size + c] = static_cast<int32_t>(f);
  }
  return face;
}

// The face's UVs at the raster's barycentrics give back the texel centre.
void expect_bary_reproduces_centres(const UvMesh& m, const UvRaster& r) {
  const int n = r.size;
  for (int row = 0; row < n; ++row)
    for (int c = 0; c < n; ++c) {
      const int64_t t = int64_t(row) * n + c;
      const int32_t f = r.face[t];
      if (f < 0) continue;
      const float b1 = r.bary[2 * t], b2 = r.bary[2 * t + 1];
      ASSERT_TRUE(b1 >= 0 && b2 >= 0 && b1 + b2 <= 1 + 1e-6f) << t;
      const float* a = &m.uvs[2 * m.faces[3 * f]];
      const float* b = &m.uvs[2 * m.faces[3 * f + 1]];
      const float* cc = &m.uvs[2 * m.faces[3 * f + 2]];
      for (int k = 0; k < 2; ++k) {
        const float v = (1 - b1 - b2) * a[k] + b1 * b[k] + b2 * cc[k];
        const float want = ((k == 0 ? c : row) + 0.5f) / n;
        ASSERT_NEAR(v, want, 2e-6f) << "texel " << row << ", " << c << " axis " << k;
      }
    }
}

TEST(MeshBake, RasterMatchesBruteForceOnRandomOddMeshes) {
  const struct {
    int faces, size, extent;
    uint32_t seed;
  } cases[] = {{51, 37, 20, 1},  {203, 37, 6, 2}, {17, 9, 8, 3},
               {301, 61, 12, 4}, {97, 1, 4, 5},   {41, 3, 4, 6}};
  for (const auto& k : cases) {
    const UvMesh m = random_grid_mesh(k.faces, k.size, k.extent, k.seed);
    const UvRaster r = rasterize_uv(m, k.size);
    ASSERT_EQ(r.size, k.size);
    ASSERT_EQ(r.face.size(), size_t(k.size * k.size));
    ASSERT_EQ(r.bary.size(), size_t(2 * k.size * k.size));
    const std::vector<int32_t> ref = brute_force_faces(m, k.size);
    int64_t covered = 0, on_edge = 0;
    for (size_t t = 0; t < ref.size(); ++t) {
      ASSERT_EQ(r.face[t], ref[t]) << "case seed " << k.seed << " texel " << t;
      covered += ref[t] >= 0;
    }
    EXPECT_GT(covered, 0) << "case seed " << k.seed;
    (void)on_edge;
    expect_bary_reproduces_centres(m, r);
  }
}

// Rasterises each face alone and counts, per texel, how many faces took it.
std::vector<int> coverage_counts(const UvMesh& m, int size) {
  std::vector<int> count(size * size, 0);
  for (int64_t f = 0; f < m.num_faces(); ++f) {
    UvMesh one = m;
    one.faces.assign(m.faces.begin() + 3 * f, m.faces.begin() + 3 * f + 3);
    const UvRaster r = rasterize_uv(one, size);
    for (int t = 0; t < size * size; ++t) count[t] += r.face[t] == 0;
  }
  return count;
}

TEST(MeshBake, SharedEdgesAndCornersCoverOnce) {
  // The unit square as two triangles: the diagonal runs through texel centres.
  UvMesh quad;
  quad.uvs = {0, 0, 1, 0, 1, 1, 0, 1};
  quad.positions.assign(12, 0.0f);
  quad.faces = {0, 1, 2, 0, 2, 3};
  for (int size : {1, 2, 7, 16, 33}) {
    const std::vector<int> n = coverage_counts(quad, size);
    for (int t = 0; t < size * size; ++t) ASSERT_EQ(n[t], 1) << "size " << size << " texel " << t;
    const UvRaster r = rasterize_uv(quad, size);
    for (int t = 0; t < size * size; ++t) ASSERT_GE(r.face[t], 0);
  }
  // A fan of 8 triangles, both windings, around a corner on a texel centre (size 9: texel 4's
  // centre is uv 0.5), its rim on texel centres too.
  UvMesh fan;
  const float rim[8][2] = {{0.5f, 1.5f / 9},     {7.5f / 9, 1.5f / 9}, {7.5f / 9, 0.5f},
                           {7.5f / 9, 7.5f / 9}, {0.5f, 7.5f / 9},     {1.5f / 9, 7.5f / 9},
                           {1.5f / 9, 0.5f},     {1.5f / 9, 1.5f / 9}};
  fan.uvs = {0.5f, 0.5f};
  for (const auto& p : rim) fan.uvs.insert(fan.uvs.end(), {p[0], p[1]});
  fan.positions.assign(27, 0.0f);
  for (int i = 0; i < 8; ++i) {
    const int a = 1 + i, b = 1 + (i + 1) % 8;
    if (i % 2)
      fan.faces.insert(fan.faces.end(), {0, a, b});
    else
      fan.faces.insert(fan.faces.end(), {0, b, a});
  }
  const std::vector<int> n = coverage_counts(fan, 9);
  for (int r = 0; r < 9; ++r)
    for (int c = 0; c < 9; ++c) {
      // Inside the rim's square [1.5, 7.5] texels: each centre exactly once (the rim's own
      // border line goes to one side only, so it is left out).
      const bool inner = r >= 2 && r <= 6 && c >= 2 && c <= 6;
      if (inner)
        ASSERT_EQ(n[r * 9 + c], 1) << r << ", " << c;
      else
        ASSERT_LE(n[r * 9 + c], 1) << r << ", " << c;
    }
}

TEST(MeshBake, HigherFaceWinsOnOverlap) {
  UvMesh m;
  m.uvs = {0, 0, 1, 0, 0, 1, 0, 0, 1, 0, 0, 1};
  m.positions.assign(18, 0.0f);
  m.faces = {0, 1, 2, 5, 4, 3};  // the same triangle twice, the second one mirrored in winding
  const UvRaster r = rasterize_uv(m, 11);
  int covered = 0;
  for (int t = 0; t < 121; ++t) {
    if (r.face[t] < 0) continue;
    ++covered;
    ASSERT_EQ(r.face[t], 1);
  }
  // Centres with c + r < 10; the 11 on the hypotenuse belong to whatever lies beyond it.
  EXPECT_EQ(covered, 55);
  EXPECT_EQ(std::vector<int32_t>(r.face.begin(), r.face.end()), brute_force_faces(m, 11));
}

TEST(MeshBake, RasterRejectsBadInput) {
  UvMesh m;
  m.uvs = {0, 0, 1, 0, 0, 1};
  m.positions.assign(9, 0.0f);
  m.faces = {0, 1, 2};
  EXPECT_ERROR(rasterize_uv(m, 0), "size must be in");
  UvMesh bad = m;
  bad.faces[2] = 3;
  EXPECT_ERROR(rasterize_uv(bad, 8), "face 0 names vertex 3");
  bad = m;
  bad.uvs[3] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_ERROR(rasterize_uv(bad, 8), "vertex 1 has uv coordinate");
  bad = m;
  bad.uvs[0] = 5;
  EXPECT_ERROR(rasterize_uv(bad, 8), "within [-1, 2]");
}

// ---- bake -----------------------------------------------------------------------------------

constexpr float kLinear[3][4] = {{0.2f, 0.5f, -0.25f, 0.75f},  // c0, cx, cy, cz per channel
                                 {-1.0f, 0.125f, 0.375f, 0.0f},
                                 {0.5f, -0.5f, 0.25f, 1.0f}};

float linear_field(int ch, float x, float y, float z) {
  return kLinear[ch][0] + kLinear[ch][1] * x + kLinear[ch][2] * y + kLinear[ch][3] * z;
}

// A full grid of n^3 voxels over [-0.5, 0.5]^3 holding the linear field at voxel centres (in
// grid units): trilinear sampling reproduces it between the centres.
SparseVolume linear_volume(int n) {
  std::vector<int32_t> coords;
  std::vector<float> attrs;
  for (int x = 0; x < n; ++x)
    for (int y = 0; y < n; ++y)
      for (int z = 0; z < n; ++z) {
        coords.insert(coords.end(), {x, y, z});
        for (int c = 0; c < 3; ++c) attrs.push_back(linear_field(c, x + 0.5f, y + 0.5f, z + 0.5f));
      }
  return SparseVolume(coords, attrs, 3, {n, n, n});
}

// A bumpy open sheet (rows x cols quads) with a UV layout spreading it over the unit square.
UvMesh sheet(int rows, int cols, float z_offset) {
  UvMesh m;
  for (int r = 0; r <= rows; ++r)
    for (int c = 0; c <= cols; ++c) {
      const float u = 0.05f + 0.9f * c / cols, v = 0.05f + 0.9f * r / rows;
      const float x = -0.35f + 0.7f * c / cols, y = -0.3f + 0.6f * r / rows;
      const float z = 0.1f * std::sin(7.0f * x) * std::cos(5.0f * y) + z_offset;
      m.positions.insert(m.positions.end(), {x, y, z});
      m.uvs.insert(m.uvs.end(), {u, v});
      m.vertex_of.push_back(static_cast<int32_t>(m.vertex_of.size()));
    }
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) {
      const int a = r * (cols + 1) + c, b = a + 1, d = a + cols + 1, e = d + 1;
      m.faces.insert(m.faces.end(), {a, b, e, a, e, d});
    }
  return m;
}

TriMesh as_trimesh(const UvMesh& m) {
  TriMesh t;
  t.positions = m.positions;
  t.faces = m.faces;
  return t;
}

TEST(MeshBake, BakesLinearFieldWhereMeshIsTheSurface) {
  const int n = 17;
  const SparseVolume vol = linear_volume(n);
  const UvMesh m = sheet(7, 9, 0.0f);
  const Bvh surface(as_trimesh(m));
  BakeInputs in;
  in.uv_mesh = &m;
  in.surface = &surface;
  in.volume = &vol;
  in.grid_origin = {-0.5f, -0.5f, -0.5f};
  in.voxel_size = {1.0f / n, 1.0f / n, 1.0f / n};
  const int size = 45;
  const UvRaster r = rasterize_uv(m, size);
  const BakedTexture t = bake(r, in);
  ASSERT_EQ(t.size, size);
  ASSERT_EQ(t.channels, 3);
  ASSERT_EQ(t.attrs.size(), size_t(size * size * 3));
  int64_t covered = 0;
  for (int i = 0; i < size * size; ++i) {
    ASSERT_EQ(t.mask[i], r.face[i] >= 0 ? 1 : 0);
    if (r.face[i] < 0) {
      for (int c = 0; c < 3; ++c) ASSERT_EQ(t.attrs[i * 3 + c], 0.0f);
      continue;
    }
    ++covered;
    const int32_t* tri = &m.faces[3 * r.face[i]];
    const float b1 = r.bary[2 * i], b2 = r.bary[2 * i + 1];
    float p[3];
    for (int k = 0; k < 3; ++k)
      p[k] = (1 - b1 - b2) * m.positions[3 * tri[0] + k] + b1 * m.positions[3 * tri[1] + k] +
             b2 * m.positions[3 * tri[2] + k];
    for (int c = 0; c < 3; ++c) {
      const float want = linear_field(c, (p[0] + 0.5f) * n, (p[1] + 0.5f) * n, (p[2] + 0.5f) * n);
      ASSERT_NEAR(t.attrs[i * 3 + c], want, 1e-4f) << "texel " << i << " channel " << c;
    }
  }
  EXPECT_GT(covered, size * size / 2);
}

// Squared distance (texels) from a point to a UV triangle given in texels, the test's own way:
// zero inside (same-sign edge functions), else the nearest of the three closed segments.
double reference_distance2(const double u[3], const double v[3], double px, double py) {
  int pos = 0, neg = 0;
  for (int i = 0; i < 3; ++i) {
    const int j = (i + 1) % 3;
    const double e = (u[j] - u[i]) * (py - v[i]) - (v[j] - v[i]) * (px - u[i]);
    pos += e >= 0;
    neg += e <= 0;
  }
  if (pos == 3 || neg == 3) return 0;
  double best = 1e300;
  for (int i = 0; i < 3; ++i) {
    const int j = (i + 1) % 3;
    const double ex = u[j] - u[i], ey = v[j] - v[i], l2 = ex * ex + ey * ey;
    const double t = l2 > 0 ? std::clamp(((px - u[i]) * ex + (py - v[i]) * ey) / l2, 0.0, 1.0) : 0;
    const double dx = u[i] + t * ex - px, dy = v[i] + t * ey - py;
    best = std::min(best, dx * dx + dy * dy);
  }
  return best;
}

// Whether the closed square of half side h centred at (px, py) meets the triangle, the test's
// own way: no separating axis among the square's two and the triangle's three edge normals.
bool reference_square_meets(const double u[3], const double v[3], double px, double py,
                            double h) {
  if (std::max({u[0], u[1], u[2]}) < px - h || std::min({u[0], u[1], u[2]}) > px + h ||
      std::max({v[0], v[1], v[2]}) < py - h || std::min({v[0], v[1], v[2]}) > py + h)
    return false;
  for (int i = 0; i < 3; ++i) {
    const int j = (i + 1) % 3, k = (i + 2) % 3;
    const double nx = v[j] - v[i], ny = u[i] - u[j];  // the edge's normal
    const double side = nx * (u[k] - u[i]) + ny * (v[k] - v[i]);
    if (side == 0) continue;  // a degenerate triangle: its edges' normals still separate
    // The square's extent along the normal, against the edge's line.
    const double centre = nx * (px - u[i]) + ny * (py - v[i]);
    const double reach = h * (std::abs(nx) + std::abs(ny));
    if (side > 0 ? centre + reach < 0 : centre - reach > 0) return false;
  }
  return true;
}

// Max-norm distance by bisection on the square's half side.
double reference_chebyshev(const double u[3], const double v[3], double px, double py) {
  double lo = 0, hi = 1e4;
  for (int it = 0; it < 80; ++it) {
    const double mid = 0.5 * (lo + hi);
    (reference_square_meets(u, v, px, py, mid) ? hi : lo) = mid;
  }
  return hi;
}

// dilate_raster: every uncovered texel within the radius of a face's UV triangle (brute force
// over all faces) gets a face and barycentrics that put its own centre back on that face's
// plane in UV space: the nearest face among those less than 1 texel away in max norm (whose
// points bilinear filtering reads it for), the nearest of all where there is none. Covered
// texels and farther ones are untouched.
TEST(MeshBake, DilationExtendsTheNearestFace) {
  const int size = 37;
  // Large overlapping faces, and many small scattered ones (where the two rules differ).
  for (const auto& [radius, m] : {std::pair{1, random_grid_mesh(9, 37, 9, 1234u)},
                                  std::pair{2, random_grid_mesh(9, 37, 9, 1234u)},
                                  std::pair{3, random_grid_mesh(9, 37, 9, 1234u)},
                                  std::pair{2, random_scattered_mesh(60, 37, 77u)}}) {
    const UvRaster before = rasterize_uv(m, size);
    UvRaster r = before;
    r.bary.assign(r.bary.size(), std::nanf(""));  // poison: a texel given a face must be written
    for (size_t t = 0; t < before.face.size(); ++t)
      if (before.face[t] >= 0) r.bary[2 * t] = before.bary[2 * t], r.bary[2 * t + 1] = before.bary[2 * t + 1];
    const int64_t given = dilate_raster(r, m, radius);
    int64_t counted = 0, differs = 0;  // texels the max-norm rule decides
    for (int y = 0; y < size; ++y)
      for (int x = 0; x < size; ++x) {
        const int64_t t = int64_t(y) * size + x;
        if (before.face[t] >= 0) {
          ASSERT_EQ(r.face[t], before.face[t]);
          ASSERT_EQ(r.bary[2 * t], before.bary[2 * t]);
          continue;
        }
        double best = 1e300, best_read = 1e300;
        bool unsure = false;  // a face within rounding of 1 texel in max norm
        std::vector<double> d(m.num_faces());
        std::vector<char> read(m.num_faces());
        for (int64_t f = 0; f < m.num_faces(); ++f) {
          double u[3], v[3];
          for (int k = 0; k < 3; ++k) {
            u[k] = double(m.uvs[2 * m.faces[3 * f + k]]) * size;
            v[k] = double(m.uvs[2 * m.faces[3 * f + k] + 1]) * size;
          }
          d[f] = reference_distance2(u, v, x + 0.5, y + 0.5);
          best = std::min(best, d[f]);
          const double cheb = reference_chebyshev(u, v, x + 0.5, y + 0.5);
          unsure |= std::abs(cheb - 1) < 1e-6;
          read[f] = cheb < 1;
          if (read[f]) best_read = std::min(best_read, d[f]);
        }
        const double reach = double(radius) * radius;
        if (best > reach + 1e-6) {
          ASSERT_EQ(r.face[t], -1) << "texel " << t << " has no face in reach";
          continue;
        }
        if (r.face[t] < 0) {
          ASSERT_GT(best, reach - 1e-6) << "texel " << t << " was left, a face " << std::sqrt(best)
                                        << " texels away";
          continue;
        }
        ++counted;
        if (best_read < 1e300 && !unsure) {
          ASSERT_TRUE(read[r.face[t]]) << "texel " << t << " took a face that does not read it";
          ASSERT_LE(d[r.face[t]], best_read + 1e-5) << "texel " << t << " took a farther face";
        } else if (!unsure) {
          ASSERT_LE(d[r.face[t]], best + 1e-5) << "texel " << t << " took a farther face";
        }
        differs += !unsure && best_read < 1e300 && best_read > best + 1e-9;
        const int32_t* tri = &m.faces[3 * r.face[t]];
        const double b1 = r.bary[2 * t], b2 = r.bary[2 * t + 1], b0 = 1 - b1 - b2;
        double area2 = 0;
        {
          const float* a = &m.uvs[2 * tri[0]];
          const float* b = &m.uvs[2 * tri[1]];
          const float* c = &m.uvs[2 * tri[2]];
          area2 = (double(b[0]) - a[0]) * (double(c[1]) - a[1]) - (double(b[1]) - a[1]) * (double(c[0]) - a[0]);
        }
        if (area2 == 0) continue;  // a face without UV area: its centroid
        for (int k = 0; k < 2; ++k) {
          const double got = (b0 * m.uvs[2 * tri[0] + k] + b1 * m.uvs[2 * tri[1] + k] +
                              b2 * m.uvs[2 * tri[2] + k]) * size;
          // Barycentrics are floats: far past a sliver they are large, and so is their rounding.
          const double tol = 1e-3 * std::max(1.0, std::abs(b0) + std::abs(b1) + std::abs(b2));
          ASSERT_NEAR(got, (k == 0 ? x : y) + 0.5, tol) << "texel " << t;
        }
      }
    EXPECT_EQ(given, counted);
    EXPECT_GT(given, 0);
    if (m.num_faces() > 9) {
      EXPECT_GT(differs, 0) << "no texel here tells the two rules apart";
    }
  }
  const UvMesh m = random_grid_mesh(9, 37, 9, 1234u);
  UvRaster r = rasterize_uv(m, size);
  const UvRaster same = r;
  EXPECT_EQ(dilate_raster(r, m, 0), 0);
  EXPECT_EQ(r.face, same.face);
  EXPECT_ERROR(dilate_raster(r, m, -1), "radius");
}

// Triangles sharing no vertex, each given by its three UV corners in texels at `size`.
UvMesh loose_triangles(int size, std::initializer_list<std::array<float, 6>> corners) {
  UvMesh m;
  for (const auto& xy : corners) {
    const int32_t base = static_cast<int32_t>(m.uvs.size() / 2);
    for (float c : xy) m.uvs.push_back(c / size);
    for (int k = 0; k < 3; ++k) {
      m.positions.insert(m.positions.end(), {float(base + k), 0, 0});
      m.faces.push_back(base + k);
    }
  }
  return m;
}

// A face too small to cover a texel centre still owns the texels around it, even where a
// large face's covered texels are as near as the old nearest-covered-texel rule would see.
TEST(MeshBake, DilationGivesATinyFaceItsTexels) {
  const int size = 16;
  const UvMesh m = loose_triangles(size, {{0.2f, 0.2f, 7.8f, 0.2f, 0.2f, 15.8f},  // large, left
                                          {10.6f, 8.6f, 10.9f, 8.6f, 10.6f, 8.9f}});  // 0.3 across
  UvRaster r = rasterize_uv(m, size);
  for (int32_t f : r.face) ASSERT_NE(f, 1) << "the tiny face covers no texel centre";
  dilate_raster(r, m, 2);
  // Texel (row 8, column 10) has its centre (10.5, 8.5) 0.14 texels from the tiny face.
  EXPECT_EQ(r.face[8 * size + 10], 1);
  EXPECT_EQ(r.face[8 * size + 11], 1);
  EXPECT_EQ(r.face[9 * size + 10], 1);
}

// Two charts 2 texels apart in max norm, one's corner diagonally across from the other's
// edge: the texel beyond the corner is nearer the edge in Euclidean distance (1.10 against
// 1.27 texels), but bilinear filtering reads it only for points of the corner's chart.
TEST(MeshBake, DilationGivesATexelToTheChartThatReadsIt) {
  const int size = 16;
  const UvMesh m = loose_triangles(size, {{5.6f, 0.2f, 15.8f, 0.2f, 5.6f, 15.8f},  // left edge 5.6
                                          {0.2f, 0.2f, 3.6f, 0.2f, 3.6f, 3.6f}});  // corner 3.6
  UvRaster r = rasterize_uv(m, size);
  const int64_t t = 4 * size + 4;  // centre (4.5, 4.5)
  ASSERT_EQ(r.face[t], -1);
  dilate_raster(r, m, 2);
  EXPECT_EQ(r.face[t], 1);
  // Beyond the corner's reach (centre (4.5, 5.5): 1.9 texels up from it) the nearer face.
  EXPECT_EQ(r.face[5 * size + 4], 0);
}

TEST(MeshBake, ProjectsOntoTheSurface) {
  // The output mesh floats 0.03 above a flat surface: every texel's point moves straight down.
  const int n = 15;
  const SparseVolume vol = linear_volume(n);
  UvMesh flat = sheet(4, 5, 0.0f);
  for (size_t i = 2; i < flat.positions.size(); i += 3) flat.positions[i] = -0.1f;
  UvMesh above = flat;
  for (size_t i = 2; i < above.positions.size(); i += 3) above.positions[i] = -0.07f;
  const Bvh surface(as_trimesh(flat));
  BakeInputs in{&above, &surface, &vol, {-0.5f, -0.5f, -0.5f}, {1.0f / n, 1.0f / n, 1.0f / n}};
  const UvRaster r = rasterize_uv(above, 31);
  const BakedTexture t = bake(r, in);
  int64_t covered = 0;
  for (int i = 0; i < 31 * 31; ++i) {
    if (r.face[i] < 0) continue;
    ++covered;
    const int32_t* tri = &above.faces[3 * r.face[i]];
    const float b1 = r.bary[2 * i], b2 = r.bary[2 * i + 1];
    float p[2];
    for (int k = 0; k < 2; ++k)
      p[k] = (1 - b1 - b2) * above.positions[3 * tri[0] + k] +
             b1 * above.positions[3 * tri[1] + k] + b2 * above.positions[3 * tri[2] + k];
    for (int c = 0; c < 3; ++c) {
      const float want = linear_field(c, (p[0] + 0.5f) * n, (p[1] + 0.5f) * n, (-0.1f + 0.5f) * n);
      ASSERT_NEAR(t.attrs[i * 3 + c], want, 1e-4f) << "texel " << i << " channel " << c;
    }
  }
  EXPECT_GT(covered, 300);
}

TEST(MeshBake, BakeRejectsBadInput) {
  const SparseVolume vol = linear_volume(3);
  const UvMesh m = sheet(2, 2, 0.0f);
  const Bvh surface(as_trimesh(m));
  const UvRaster r = rasterize_uv(m, 9);
  BakeInputs in{&m, &surface, &vol, {-0.5f, -0.5f, -0.5f}, {0.3f, 0.3f, 0.3f}};
  BakeInputs none = in;
  none.volume = nullptr;
  EXPECT_ERROR(bake(r, none), "must all be set");
  BakeInputs zero = in;
  zero.voxel_size[1] = 0;
  EXPECT_ERROR(bake(r, zero), "axis 1");
  UvRaster short_raster = r;
  short_raster.bary.pop_back();
  EXPECT_ERROR(bake(short_raster, in), "barycentrics");
  UvRaster beyond = r;
  for (auto& f : beyond.face)
    if (f >= 0) f = 1000;
  EXPECT_ERROR(bake(beyond, in), "beyond the UV mesh");
}

// ---- fill_uncovered -------------------------------------------------------------------------

TEST(MeshBake, FillKeepsCoveredAndFillsEveryHole) {
  const struct {
    int w, h, ch;
    double density;
  } cases[] = {
      {37, 23, 3, 0.3}, {1, 9, 1, 0.2}, {50, 3, 4, 0.05}, {64, 64, 2, 0.01}, {7, 1, 3, 0.5}};
  std::mt19937 rng(3);
  for (const auto& k : cases) {
    std::vector<uint8_t> image(k.w * k.h * k.ch, 0xAB), mask(k.w * k.h, 0);
    std::bernoulli_distribution covered(k.density);
    std::uniform_int_distribution<int> value(0, 100);  // never the poison 0xAB, nor a mix of it
    mask[rng() % mask.size()] = 1;
    for (size_t i = 0; i < mask.size(); ++i) {
      if (covered(rng)) mask[i] = 1;
      if (mask[i])
        for (int c = 0; c < k.ch; ++c) image[i * k.ch + c] = static_cast<uint8_t>(value(rng));
    }
    const std::vector<uint8_t> before = image;
    fill_uncovered(image, mask, k.w, k.h, k.ch);
    for (size_t i = 0; i < mask.size(); ++i)
      for (int c = 0; c < k.ch; ++c) {
        if (mask[i])
          ASSERT_EQ(image[i * k.ch + c], before[i * k.ch + c]) << i;
        else
          ASSERT_LE(image[i * k.ch + c], 100) << "texel " << i << " of " << k.w << "x" << k.h;
      }
  }
}

TEST(MeshBake, FillOfConstantImageIsExact) {
  const int w = 45, h = 29, ch = 4;
  const uint8_t colour[ch] = {17, 254, 3, 128};
  std::vector<uint8_t> image(w * h * ch, 0), mask(w * h, 0);
  std::mt19937 rng(5);
  for (int i = 0; i < w * h; ++i)
    if (rng() % 9 == 0 || (i % w > 30 && i / w < 7)) {
      mask[i] = 1;
      for (int c = 0; c < ch; ++c) image[i * ch + c] = colour[c];
    }
  fill_uncovered(image, mask, w, h, ch);
  for (int i = 0; i < w * h; ++i)
    for (int c = 0; c < ch; ++c) ASSERT_EQ(image[i * ch + c], colour[c]) << i;
}

TEST(MeshBake, FillNearAChartTakesItsColour) {
  // Chart A on the left (columns 3..14), chart B on the right (columns 27..40), a gap of 12.
  const int w = 47, h = 31;
  std::vector<uint8_t> image(w * h * 3, 0), mask(w * h, 0);
  for (int r = 4; r < 26; ++r) {
    for (int c = 3; c <= 14; ++c) {
      mask[r * w + c] = 1;
      image[(r * w + c) * 3] = 220, image[(r * w + c) * 3 + 1] = 30,
                          image[(r * w + c) * 3 + 2] = 20;
    }
    for (int c = 27; c <= 40; ++c) {
      mask[r * w + c] = 1;
      image[(r * w + c) * 3] = 10, image[(r * w + c) * 3 + 1] = 40,
                          image[(r * w + c) * 3 + 2] = 230;
    }
  }
  fill_uncovered(image, mask, w, h, 3);
  for (int r = 5; r < 25; ++r) {
    // The texels just right of A and just left of B.
    const uint8_t* a = &image[(r * w + 15) * 3];
    const uint8_t* b = &image[(r * w + 26) * 3];
    EXPECT_NEAR(a[0], 220, 25) << r;
    EXPECT_NEAR(a[2], 20, 25) << r;
    EXPECT_NEAR(b[0], 10, 25) << r;
    EXPECT_NEAR(b[2], 230, 25) << r;
  }
}

TEST(MeshBake, FillWithoutCoverageLeavesImage) {
  std::vector<uint8_t> image(5 * 3 * 2, 0x5A), mask(15, 0);
  fill_uncovered(image, mask, 5, 3, 2);
  for (uint8_t v : image) ASSERT_EQ(v, 0x5A);
  EXPECT_ERROR(fill_uncovered(image, mask, 5, 4, 2), "needs 40 bytes");
  EXPECT_ERROR(fill_uncovered(image, mask, 0, 3, 2), "must be positive");
}

}  // namespace
}  // namespace s3d::mesh
