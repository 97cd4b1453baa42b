// uv_unwrap's stated properties on small odd meshes (a cube, a noisy sphere with a hole, two
// components, a degenerate face), for both methods (planar and xatlas): every input face comes
// back once with its 3D corners, vertex_of points at identical positions, UVs lie in [0, 1],
// and no texel centre lies strictly inside two faces' UV triangles (checked by brute force
// over each face's bounding box). Then the planar atlas's own promises: one texel density for
// every chart within its cone's bound, a surface that winds over itself split until nothing
// overlaps, the same atlas whatever the thread count.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <random>
#include <set>

#include <omp.h>

#include "../expect_error.h"
#include "mesh/atlas.h"
#include "mesh/atlas_chart.h"
#include "mesh/clean.h"
#include "mesh_test_shapes.h"

namespace s3d::mesh {
namespace {

using test::uv_sphere;

TriMesh cube(float s, Vec3 c) {
  TriMesh m;
  for (int i = 0; i < 8; ++i)
    m.positions.insert(m.positions.end(), {c[0] + ((i & 1) ? s : -s), c[1] + ((i & 2) ? s : -s),
                                           c[2] + ((i & 4) ? s : -s)});
  // Counter-clockwise from outside.
  m.faces = {0, 2, 1, 1, 2, 3, 4, 5, 6, 5, 7, 6, 0, 1, 4, 1, 5, 4,
             2, 6, 3, 3, 6, 7, 0, 4, 2, 2, 4, 6, 1, 3, 5, 3, 7, 5};
  return m;
}

void append(TriMesh& a, const TriMesh& b) {
  const int32_t base = static_cast<int32_t>(a.num_vertices());
  a.positions.insert(a.positions.end(), b.positions.begin(), b.positions.end());
  for (int32_t v : b.faces) a.faces.push_back(v + base);
}

// A face as its three corners, rotated to start at the smallest (winding kept).
using FaceKey = std::array<std::array<float, 3>, 3>;
FaceKey face_key(const float* p0, const float* p1, const float* p2) {
  FaceKey k = {{{p0[0], p0[1], p0[2]}, {p1[0], p1[1], p1[2]}, {p2[0], p2[1], p2[2]}}};
  const int first = static_cast<int>(std::min_element(k.begin(), k.end()) - k.begin());
  std::rotate(k.begin(), k.begin() + first, k.end());
  return k;
}

void expect_faces_kept(const TriMesh& in, const UvMesh& out) {
  ASSERT_EQ(out.num_faces(), in.num_faces());
  std::vector<FaceKey> a, b;
  for (int64_t f = 0; f < in.num_faces(); ++f) {
    const int32_t* t = &in.faces[3 * f];
    a.push_back(
        face_key(&in.positions[3 * t[0]], &in.positions[3 * t[1]], &in.positions[3 * t[2]]));
  }
  for (int64_t f = 0; f < out.num_faces(); ++f) {
    const int32_t* t = &out.faces[3 * f];
    for (int k = 0; k < 3; ++k) ASSERT_TRUE(t[k] >= 0 && t[k] < out.num_vertices());
    b.push_back(
        face_key(&out.positions[3 * t[0]], &out.positions[3 * t[1]], &out.positions[3 * t[2]]));
  }
  std::sort(a.begin(), a.end());
  std::sort(b.begin(), b.end());
  EXPECT_TRUE(a == b) << "the output faces are not the input faces";
}

void expect_vertices_consistent(const TriMesh& in, const UvMesh& out) {
  ASSERT_EQ(out.positions.size(), 3 * out.uvs.size() / 2);
  ASSERT_EQ(static_cast<int64_t>(out.vertex_of.size()), out.num_vertices());
  for (int64_t v = 0; v < out.num_vertices(); ++v) {
    const int32_t src = out.vertex_of[v];
    ASSERT_TRUE(src >= 0 && src < in.num_vertices()) << v;
    for (int k = 0; k < 3; ++k) ASSERT_EQ(out.positions[3 * v + k], in.positions[3 * src + k]);
    for (int k = 0; k < 2; ++k) {
      const float u = out.uvs[2 * v + k];
      ASSERT_TRUE(u >= 0.0f && u <= 1.0f) << "vertex " << v << " uv " << u;
    }
  }
}

// Texel centres strictly inside (by a margin) the UV triangles of two faces; with
// `skip_neighbours`, of two faces that are not neighbours on the input surface (sharing an
// input vertex, or with input vertices joined by an edge: the local folds the planar atlas
// leaves, atlas.h).
int64_t overlapping_texels(const UvMesh& m, int size, bool skip_neighbours = false) {
  std::vector<std::vector<int32_t>> cover(size * size);
  for (int64_t f = 0; f < m.num_faces(); ++f) {
    double x[3], y[3];
    for (int k = 0; k < 3; ++k) {
      x[k] = m.uvs[2 * m.faces[3 * f + k]] * double(size);
      y[k] = m.uvs[2 * m.faces[3 * f + k] + 1] * double(size);
    }
    const double area = (x[1] - x[0]) * (y[2] - y[0]) - (y[1] - y[0]) * (x[2] - x[0]);
    if (area == 0) continue;
    const int c0 = std::max(0, int(std::floor(std::min({x[0], x[1], x[2]})))),
              c1 = std::min(size - 1, int(std::ceil(std::max({x[0], x[1], x[2]})))),
              r0 = std::max(0, int(std::floor(std::min({y[0], y[1], y[2]})))),
              r1 = std::min(size - 1, int(std::ceil(std::max({y[0], y[1], y[2]}))));
    for (int r = r0; r <= r1; ++r)
      for (int c = c0; c <= c1; ++c) {
        const double px = c + 0.5, py = r + 0.5;
        bool inside = true;
        for (int i = 0; i < 3 && inside; ++i) {
          const int j = (i + 1) % 3;
          const double ex = x[j] - x[i], ey = y[j] - y[i];
          const double e = (ex * (py - y[i]) - ey * (px - x[i])) / std::hypot(ex, ey);
          inside = (area > 0 ? e : -e) > 1e-4;  // distance from the edge, in texels
        }
        if (inside) cover[r * size + c].push_back(static_cast<int32_t>(f));
      }
  }
  std::set<std::pair<int32_t, int32_t>> edges;  // input vertex pairs joined by an edge
  auto input = [&](int32_t f, int k) { return m.vertex_of.empty() ? m.faces[3 * f + k] : m.vertex_of[m.faces[3 * f + k]]; };
  for (int64_t f = 0; f < m.num_faces() && skip_neighbours; ++f)
    for (int k = 0; k < 3; ++k) {
      const int32_t a = input(f, k), b = input(f, (k + 1) % 3);
      edges.insert({std::min(a, b), std::max(a, b)});
    }
  auto neighbours = [&](int32_t f, int32_t g) {
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 3; ++j) {
        const int32_t a = input(f, i), b = input(g, j);
        if (a == b || edges.count({std::min(a, b), std::max(a, b)})) return true;
      }
    return false;
  };
  int64_t bad = 0;
  for (const auto& faces : cover) {
    bool found = false;
    for (size_t i = 0; i < faces.size() && !found; ++i)
      for (size_t j = i + 1; j < faces.size() && !found; ++j)
        found = !skip_neighbours || !neighbours(faces[i], faces[j]);
    bad += found;
  }
  return bad;
}

void expect_good_atlas(const TriMesh& in, const ChartOptions& o, int64_t allowed_empty = 0) {
  const UvMesh out = uv_unwrap(in, o);
  expect_faces_kept(in, out);
  expect_vertices_consistent(in, out);
  EXPECT_GE(out.num_charts, 1);
  EXPECT_EQ(overlapping_texels(out, 512, o.method != AtlasMethod::xatlas), 0);
  const AtlasStats st = atlas_stats(out, 256);
  EXPECT_GT(st.utilization, 0.2);
  EXPECT_LE(st.utilization, 1.0);
  EXPECT_EQ(st.flipped_or_empty, allowed_empty);
}

class MeshAtlasBoth : public ::testing::TestWithParam<AtlasMethod> {
 protected:
  ChartOptions options() const {
    ChartOptions o;
    o.method = GetParam();
    return o;
  }
};

TEST_P(MeshAtlasBoth, Cube) {
  ChartOptions o = options();
  o.texture_size = 512;
  expect_good_atlas(cube(0.3f, {0, 0, 0}), o);
  const UvMesh out = uv_unwrap(cube(0.3f, {0, 0, 0}), o);
  // A cube's faces are 90 degrees apart: at least one seam per pair of opposite faces.
  EXPECT_GT(out.num_vertices(), 8);
}

TEST_P(MeshAtlasBoth, SphereWithHole) {
  ChartOptions o = options();
  o.texture_size = 1024;
  o.padding = 3;
  // Radius 0.4, noise 0.01, the top 3 rings left out, no slivers at the poles.
  expect_good_atlas(uv_sphere(17, 23, 0.4f, 0.01f, 1, 3, false), o);
}

TEST_P(MeshAtlasBoth, TwoComponentsAndConeAngle) {
  TriMesh m = uv_sphere(11, 13, 0.4f, 0.01f, 2, 0, false);
  append(m, cube(0.2f, {1.5f, 0.1f, -0.3f}));
  ChartOptions o = options();
  o.texture_size = 512;
  expect_good_atlas(m, o);
  // A narrower cone makes more charts.
  const UvMesh wide = uv_unwrap(m, o);
  o.cone_half_angle_rad = 0.35f;
  const UvMesh narrow = uv_unwrap(m, o);
  expect_faces_kept(m, narrow);
  EXPECT_GT(narrow.num_charts, wide.num_charts);
}

TEST(MeshAtlas, SpatialGroupsAndChartCap) {
  // Small groups and a small chart cap (the 1M-face settings, scaled down): the same
  // properties hold, with more charts than one group and no cap give.
  const TriMesh m = uv_sphere(21, 27, 0.4f, 0.01f, 4, 2, false);  // 999 faces
  ChartOptions o;
  o.method = AtlasMethod::xatlas;
  o.texture_size = 1024;
  o.faces_per_chart = 0;
  o.faces_per_group = 0;
  const UvMesh plain = uv_unwrap(m, o);
  o.faces_per_chart = 40;
  o.faces_per_group = 301;
  expect_good_atlas(m, o);
  const UvMesh split = uv_unwrap(m, o);
  EXPECT_GE(split.num_charts, 4);
  EXPECT_GT(split.num_charts, plain.num_charts);
  EXPECT_GT(split.num_vertices(), plain.num_vertices());
}

TEST_P(MeshAtlasBoth, DegenerateFaceStaysInOutput) {
  TriMesh m = cube(0.3f, {0.1f, 0.2f, 0.3f});
  m.faces.insert(m.faces.end(), {0, 1, 1});  // a repeated corner: no area
  ChartOptions o = options();
  o.texture_size = 256;
  expect_good_atlas(m, o, 1);
}

TEST(MeshAtlas, StatsCountFlippedAndEmptyPerChart) {
  UvMesh m;
  // Chart 1: the square [0, 0.5]^2 as two faces, the second folded over (flipped).
  // Chart 2: a whole mirrored chart (both faces clockwise): not flipped.
  // Chart 3: a face without area.
  m.uvs = {0,    0,    0.5f, 0,    0.5f, 0.5f, 0,    0.5f, 0.6f, 0.6f, 0.6f,
           0.9f, 0.9f, 0.9f, 0.9f, 0.6f, 0.1f, 0.8f, 0.2f, 0.8f, 0.3f, 0.8f};
  m.faces = {0, 1, 2, 0, 3, 2, 4, 5, 6, 4, 6, 7, 8, 9, 10};
  m.positions.assign(3 * 11, 0.0f);
  AtlasStats st = atlas_stats(m, 64);
  EXPECT_EQ(st.flipped_or_empty, 2);
  // Chart 1 covers 32 x 32 texel centres, chart 2 the 20 x 20 centres in (0.6, 0.9) * 64.
  EXPECT_NEAR(st.utilization, (32.0 * 32 + 20 * 20) / (64.0 * 64), 1e-12);
  m.faces = {0, 1, 2, 0, 2, 3};
  st = atlas_stats(m, 64);
  EXPECT_EQ(st.flipped_or_empty, 0);
  EXPECT_EQ(st.utilization, 0.25);
  EXPECT_EQ(overlapping_texels(m, 64), 0);
  // The overlap check itself: the lower-right half laid twice.
  m.faces = {0, 1, 2, 0, 2, 3, 2, 0, 1};
  EXPECT_GT(overlapping_texels(m, 64), 400);
}

TEST_P(MeshAtlasBoth, RejectsBadInput) {
  ChartOptions o = options();
  EXPECT_ERROR(uv_unwrap(TriMesh{}, o), "no faces");
  TriMesh bad = cube(1, {0, 0, 0});
  bad.faces[4] = 99;
  EXPECT_ERROR(uv_unwrap(bad, o), "face 1 names vertex 99");
  TriMesh flat;  // every face without area
  flat.positions = {0, 0, 0, 1, 0, 0, 2, 0, 0};
  flat.faces = {0, 1, 2};
  EXPECT_ERROR(uv_unwrap(flat, o), "no face of the mesh has an area");
  ChartOptions t = o;
  t.texture_size = 0;
  EXPECT_ERROR(uv_unwrap(cube(1, {0, 0, 0}), t), "texture_size");
  t = o;
  t.cone_half_angle_rad = 0;
  EXPECT_ERROR(uv_unwrap(cube(1, {0, 0, 0}), t), "cone_half_angle_rad");
  t = o;
  t.padding = -1;
  EXPECT_ERROR(uv_unwrap(cube(1, {0, 0, 0}), t), "padding");
  t = o;
  t.faces_per_group = -5;
  EXPECT_ERROR(uv_unwrap(cube(1, {0, 0, 0}), t), "faces_per_group");
  t = o;
  t.method = static_cast<AtlasMethod>(7);
  EXPECT_ERROR(uv_unwrap(cube(1, {0, 0, 0}), t), "unknown atlas method 7");
}

INSTANTIATE_TEST_SUITE_P(Methods, MeshAtlasBoth,
                         ::testing::Values(AtlasMethod::planar, AtlasMethod::xatlas,
                                           AtlasMethod::conformal),
                         [](const auto& info) {
                           return info.param == AtlasMethod::planar   ? "planar"
                                  : info.param == AtlasMethod::xatlas ? "xatlas"
                                                                      : "conformal";
                         });

// A ramp that winds 1.6 times around the z axis, rising slowly: every normal is within a few
// degrees of +z, so it is one chart by the cone, but its projection onto the xy plane covers
// part of itself twice.
TriMesh spiral_ramp() {
  TriMesh m;
  const int steps = 97, across = 3;
  for (int i = 0; i <= steps; ++i) {
    const double a = 1.6 * 2 * M_PI * i / steps;
    for (int j = 0; j <= across; ++j) {
      const double r = 0.3 + 0.2 * j / across;
      m.positions.insert(m.positions.end(), {float(r * std::cos(a)), float(r * std::sin(a)),
                                             float(0.04 * a)});
    }
  }
  for (int i = 0; i < steps; ++i)
    for (int j = 0; j < across; ++j) {
      const int32_t v = i * (across + 1) + j, w = v + across + 1;
      m.faces.insert(m.faces.end(), {v, v + 1, w + 1, v, w + 1, w});
    }
  return m;
}

TEST(MeshAtlasPlanar, SelfOverlapIsSplit) {
  const TriMesh m = spiral_ramp();
  ChartOptions o;
  o.texture_size = 512;
  expect_good_atlas(m, o);
  EXPECT_GE(uv_unwrap(m, o).num_charts, 2);
}

// A fold (a face simplification flipped over its neighbours: its normal faces back) joins the
// chart around it, mirrored, instead of being a chart of its own; a face standing on edge
// (turned 90 degrees, no plane to project onto) does not.
TEST(MeshAtlasPlanar, FoldJoinsTheChartAroundIt) {
  TriMesh m;
  const int nx = 7, ny = 5;  // odd: 70 faces
  for (int i = 0; i <= ny; ++i)
    for (int j = 0; j <= nx; ++j)
      m.positions.insert(m.positions.end(), {0.1f * j - 0.35f, 0.09f * i - 0.2f, 0.0f});
  for (int i = 0; i < ny; ++i)
    for (int j = 0; j < nx; ++j) {
      const int32_t v = i * (nx + 1) + j, w = v + nx + 1;
      m.faces.insert(m.faces.end(), {v, v + 1, w + 1, v, w + 1, w});
    }
  ChartOptions o;
  o.texture_size = 256;
  ASSERT_EQ(uv_unwrap(m, o).num_charts, 1);
  const int64_t fold = 2 * (2 * nx + 3) + 1;  // an interior face
  std::swap(m.faces[3 * fold + 1], m.faces[3 * fold + 2]);
  const UvMesh out = uv_unwrap(m, o);
  EXPECT_EQ(out.num_charts, 1);
  expect_good_atlas(m, o, 1);  // the fold is mirrored in its chart: counted as flipped
  // An interior vertex pushed straight up far enough that a face of its fan stands on edge
  // (seen from its neighbours): charts of their own, as before.
  TriMesh fin = m;
  std::swap(fin.faces[3 * fold + 1], fin.faces[3 * fold + 2]);
  fin.positions[3 * (2 * (nx + 1) + 3) + 2] = 5.0f;
  EXPECT_GT(uv_unwrap(fin, o).num_charts, 1);
}

TEST(MeshAtlasPlanar, ChartsGoOnAcrossAnEdgeOfFourFaces) {
  // A flat sheet (z = 0) and a sheet standing across it (x = 0.4), sharing the line where they
  // cross: each edge of it has four faces, two running each way. Each sheet is one chart: the
  // faces of such an edge are paired (the best agreeing normals), not cut apart.
  TriMesh m;
  const int nx = 9, ny = 7, nz = 7;  // odd: the line is column 4 of the flat sheet
  auto flat = [&](int i, int j) { return static_cast<int32_t>(j * nx + i); };
  for (int j = 0; j < ny; ++j)
    for (int i = 0; i < nx; ++i) m.positions.insert(m.positions.end(), {0.1f * i, 0.1f * j, 0.f});
  std::vector<int32_t> standing(ny * nz);
  for (int k = 0; k < nz; ++k)
    for (int j = 0; j < ny; ++j) {
      if (k == nz / 2) {
        standing[k * ny + j] = flat(nx / 2, j);
        continue;
      }
      standing[k * ny + j] = static_cast<int32_t>(m.num_vertices());
      m.positions.insert(m.positions.end(), {0.4f, 0.1f * j, 0.1f * (k - nz / 2)});
    }
  for (int j = 0; j + 1 < ny; ++j)
    for (int i = 0; i + 1 < nx; ++i) {
      const int32_t v = flat(i, j), w = flat(i, j + 1);
      m.faces.insert(m.faces.end(), {v, v + 1, w + 1, v, w + 1, w});
    }
  for (int k = 0; k + 1 < nz; ++k)
    for (int j = 0; j + 1 < ny; ++j) {
      const int32_t v = standing[k * ny + j], v1 = standing[k * ny + j + 1],
                    w = standing[(k + 1) * ny + j], w1 = standing[(k + 1) * ny + j + 1];
      m.faces.insert(m.faces.end(), {v, v1, w1, v, w1, w});
    }
  ASSERT_EQ(mesh_stats(m).non_manifold_edges, ny - 1);
  ChartOptions o;
  o.texture_size = 256;
  EXPECT_EQ(uv_unwrap(m, o).num_charts, 2);
  expect_good_atlas(m, o);
}

// A closed thin plate (0.8 x 0.6, 0.004 thick: under one texel at this texture size), its top
// and bottom gridded, each rim one strip of faces. The rims, at right angles to both sides, are
// charts of their own by the cone, mostly margin; each is unfolded onto the top or bottom
// chart about the edge it shares with it, so two charts are left, and an unfolded face keeps
// its size in the plane (the same texels per unit area as the plate's).
TriMesh thin_plate(int nx, int ny, float t) {
  TriMesh m;
  auto vert = [&](float x, float y, float z) {
    m.positions.insert(m.positions.end(), {x, y, z});
    return static_cast<int32_t>(m.num_vertices() - 1);
  };
  // Each side's grid; the ring of border vertices is shared by the side and the rims.
  std::vector<int32_t> top((nx + 1) * (ny + 1)), bottom((nx + 1) * (ny + 1));
  for (int j = 0; j <= ny; ++j)
    for (int i = 0; i <= nx; ++i) {
      const float x = 0.8f * i / nx - 0.4f, y = 0.6f * j / ny - 0.3f;
      top[j * (nx + 1) + i] = vert(x, y, t / 2);
      bottom[j * (nx + 1) + i] = vert(x, y, -t / 2);
    }
  for (int j = 0; j < ny; ++j)
    for (int i = 0; i < nx; ++i) {
      const int32_t a = j * (nx + 1) + i, b = a + 1, c = a + nx + 1, d = c + 1;
      m.faces.insert(m.faces.end(), {top[a], top[b], top[d], top[a], top[d], top[c]});
      m.faces.insert(m.faces.end(),
                     {bottom[a], bottom[d], bottom[b], bottom[a], bottom[c], bottom[d]});
    }
  // The border counter-clockwise seen from above; each rim quad outward-facing.
  std::vector<int32_t> ring;
  for (int i = 0; i < nx; ++i) ring.push_back(i);
  for (int j = 0; j < ny; ++j) ring.push_back(j * (nx + 1) + nx);
  for (int i = nx; i > 0; --i) ring.push_back(ny * (nx + 1) + i);
  for (int j = ny; j > 0; --j) ring.push_back(j * (nx + 1));
  for (size_t k = 0; k < ring.size(); ++k) {
    const int32_t u = ring[k], v = ring[(k + 1) % ring.size()];
    m.faces.insert(m.faces.end(), {bottom[u], bottom[v], top[v], bottom[u], top[v], top[u]});
  }
  return m;
}

// UV area over 3D area, signed (a face turned over in the plane gives a negative ratio): the
// smallest and the largest over the faces.
std::pair<double, double> density_range(const UvMesh& out) {
  double lo = INFINITY, hi = -INFINITY;
  for (int64_t f = 0; f < out.num_faces(); ++f) {
    const int32_t* t = &out.faces[3 * f];
    auto at = [&](int k) {
      return Vec3{out.positions[3 * t[k]], out.positions[3 * t[k] + 1], out.positions[3 * t[k] + 2]};
    };
    const double a3 = 0.5 * length(cross(at(1) - at(0), at(2) - at(0)));
    const float* p = &out.uvs[2 * t[0]];
    const float* q = &out.uvs[2 * t[1]];
    const float* r = &out.uvs[2 * t[2]];
    const double a2 = 0.5 * ((double(q[0]) - p[0]) * (double(r[1]) - p[1]) -
                             (double(q[1]) - p[1]) * (double(r[0]) - p[0]));
    lo = std::min(lo, a2 / a3), hi = std::max(hi, a2 / a3);
  }
  return {lo, hi};
}

TEST(MeshAtlasPlanar, ThinRimsUnfoldOntoThePlate) {
  const TriMesh m = thin_plate(13, 9, 0.004f);  // 13 x 9 odd: 234 + 88 faces
  ASSERT_EQ(mesh_stats(m).boundary_edges, 0);
  ChartOptions o;
  o.texture_size = 256;
  const UvMesh out = uv_unwrap(m, o);
  EXPECT_EQ(out.num_charts, 2);
  expect_good_atlas(m, o);
  // UV area over 3D area, per face: the same for the rims as for the plate.
  const auto [lo, hi] = density_range(out);
  EXPECT_GT(lo, 0);  // nothing flipped
  EXPECT_LT(hi / lo, 1.05);
}

// A sheet bent through 40 degrees about an axis (on 31 rulings, jittered along them: a
// developable polyhedron), 30 x 7 cells: one chart either way. Laid out by the conformal map
// every face keeps one texel density (the unrolled sheet); projected, the faces turned from the
// chart's axis shrink by the cosine of their turn.
TriMesh bent_sheet() {
  TriMesh m;
  std::mt19937 rng(17);
  std::uniform_real_distribution<float> jitter(-0.02f, 0.02f);
  const int nx = 31, ny = 8;
  const double radius = 0.5, turn = 40.0 * M_PI / 180.0;
  for (int j = 0; j < ny; ++j)
    for (int i = 0; i < nx; ++i) {
      const double a = turn * i / (nx - 1);
      const float y = 0.5f * j / (ny - 1) + (j > 0 && j + 1 < ny ? jitter(rng) : 0.0f);
      m.positions.insert(m.positions.end(),
                         {float(radius * std::sin(a)), y, float(radius * (1 - std::cos(a)))});
    }
  for (int j = 0; j + 1 < ny; ++j)
    for (int i = 0; i + 1 < nx; ++i) {
      const int32_t v = j * nx + i, w = v + nx;
      // Counter-clockwise seen from the sheet's concave side (normals towards +z at i = 0).
      m.faces.insert(m.faces.end(), {v, w, v + 1, v + 1, w, w + 1});
    }
  return m;
}

TEST(MeshAtlasPlanar, ConformalChartsKeepOneDensityOnABentSheet) {
  const TriMesh m = bent_sheet();
  ChartOptions o;
  o.texture_size = 512;
  o.method = AtlasMethod::conformal;
  const UvMesh conformal = uv_unwrap(m, o);
  EXPECT_EQ(conformal.num_charts, 1);
  expect_good_atlas(m, o);
  const auto [lo, hi] = density_range(conformal);
  EXPECT_GT(lo, 0);  // nothing flipped
  EXPECT_LT(hi / lo, 1.02);  // float UVs at 512 texels: the unrolled sheet's own density
  ChartOptions p = o;
  p.method = AtlasMethod::planar;  // projected charts alone
  const UvMesh projected = uv_unwrap(m, p);
  EXPECT_EQ(projected.num_charts, 1);
  expect_good_atlas(m, p);
  const auto [plo, phi] = density_range(projected);
  EXPECT_GT(plo, 0);
  EXPECT_GT(phi / plo, 1.0 / std::cos(15.0 * M_PI / 180.0));  // the ends turned about 20 degrees
  EXPECT_LT(phi / plo, 1.0 / std::cos(40.0 * M_PI / 180.0));
}

// Every face's UV area over its 3D area is scale^2 * cos(angle to its chart's axis): within
// [cos(75 degrees), 1] of the largest (the hard bound), and within [cos(cone), 1] for nearly
// all of the surface (the cone bounds the smoothed normals).
TEST(MeshAtlasPlanar, OneTexelDensityWithinTheCone) {
  const TriMesh m = uv_sphere(23, 31, 0.4f, 0.02f, 3, 0, false);
  ChartOptions o;
  o.texture_size = 1024;
  const UvMesh out = uv_unwrap(m, o);
  double lo = INFINITY, hi = 0;
  std::vector<std::pair<double, double>> ratio_area;
  for (int64_t f = 0; f < out.num_faces(); ++f) {
    const int32_t* t = &out.faces[3 * f];
    const Vec3 a = {out.positions[3 * t[0]], out.positions[3 * t[0] + 1], out.positions[3 * t[0] + 2]};
    const Vec3 b = {out.positions[3 * t[1]], out.positions[3 * t[1] + 1], out.positions[3 * t[1] + 2]};
    const Vec3 c = {out.positions[3 * t[2]], out.positions[3 * t[2] + 1], out.positions[3 * t[2] + 2]};
    const double a3 = 0.5 * length(cross(b - a, c - a));
    const float* p = &out.uvs[2 * t[0]];
    const float* q = &out.uvs[2 * t[1]];
    const float* r = &out.uvs[2 * t[2]];
    const double a2 = 0.5 * std::fabs((double(q[0]) - p[0]) * (double(r[1]) - p[1]) -
                                      (double(q[1]) - p[1]) * (double(r[0]) - p[0]));
    if (a3 < 1e-6) continue;
    lo = std::min(lo, a2 / a3);
    hi = std::max(hi, a2 / a3);
    ratio_area.push_back({a2 / a3, a3});
  }
  ASSERT_GT(lo, 0);
  EXPECT_LE(hi / lo, 1.0 / std::cos(75.0 * M_PI / 180.0) * 1.01);
  double total = 0, within = 0;
  for (const auto& [ratio, area] : ratio_area) {
    total += area;
    within += ratio >= hi * std::cos(o.planar_cone_rad) / 1.01 ? area : 0;
  }
  EXPECT_GT(within / total, 0.9);
  // The atlas fills the texture: the charts reach (nearly) its far side.
  float umax = 0, vmax = 0;
  for (int64_t v = 0; v < out.num_vertices(); ++v)
    umax = std::max(umax, out.uvs[2 * v]), vmax = std::max(vmax, out.uvs[2 * v + 1]);
  EXPECT_GT(std::max(umax, vmax), 0.95f);
}

TEST(MeshAtlasPlanar, SameAtlasWhateverTheThreadCount) {
  TriMesh m = uv_sphere(19, 25, 0.4f, 0.01f, 5, 2, false);
  append(m, spiral_ramp());
  append(m, bent_sheet());
  for (AtlasMethod method : {AtlasMethod::planar, AtlasMethod::conformal}) {
    ChartOptions o;
    o.method = method;
    o.texture_size = 777;
    const int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    const UvMesh one = uv_unwrap(m, o);
    omp_set_num_threads(std::max(3, threads));
    const UvMesh many = uv_unwrap(m, o);
    omp_set_num_threads(threads);
    EXPECT_EQ(one.faces, many.faces);
    EXPECT_EQ(one.uvs, many.uvs);
    EXPECT_EQ(one.vertex_of, many.vertex_of);
  }
}

// The packing's gap search remembers how far up each column's answer holds and asks again
// only past that, and asks first the bands that refused last (atlas_packing.cpp,
// Skyline::gap_height and ask_sooner); pack_reference asks every column after every lift, in
// a fixed order. A ragged mix of charts of many sizes (cubes of 37 sizes, a noisy sphere with
// a hole, a spiral that splits) makes the small charts search the gaps the large ones leave
// (and about a thousand bands move forward in the order of asking): both give the same
// atlas, bit for bit.
TEST(MeshAtlasPlanar, PackingSearchGivesTheReferenceAtlas) {
  TriMesh m = uv_sphere(23, 31, 0.35f, 0.02f, 11, 3, false);
  append(m, spiral_ramp());
  for (int i = 0; i < 37; ++i)
    append(m, cube(0.01f + 0.004f * float((i * 7) % 37), {1.0f + 0.13f * float(i), 0.3f, 0}));
  ChartOptions o;
  o.texture_size = 613;
  const UvMesh fast = uv_unwrap(m, o);
  o.pack_reference = true;
  const UvMesh reference = uv_unwrap(m, o);
  EXPECT_GT(fast.num_charts, 60);
  EXPECT_EQ(fast.faces, reference.faces);
  EXPECT_EQ(fast.uvs, reference.uvs);
  EXPECT_EQ(fast.vertex_of, reference.vertex_of);
}

// The packing tries many scales and keeps the largest that fits; a try is given up once a
// larger scale has fitted (atlas_packing.cpp). On one thread the tries run largest first, so
// every try below the first that fits is given up: fewer tries reach their end than in the
// reference, which runs all of them, and the scale and every placement are the same.
TEST(MeshAtlasPlanar, TriesGivenUpLeaveThePackingAsItWas) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> side(0.01, 0.09), at(0.0, 1.0);
  std::vector<atlas::Chart> charts(301);
  for (atlas::Chart& c : charts) {  // L shapes of odd sizes: two rectangles, two faces each
    c.w = side(rng), c.h = side(rng);
    const double a = (0.2 + 0.6 * at(rng)) * c.w, b = (0.2 + 0.6 * at(rng)) * c.h;
    c.faces = {0, 1, 2, 3};
    c.verts = {0, 1, 2, 3, 4, 5, 6, 7};
    c.corners = {0, 1, 2, 0, 2, 3, 4, 5, 6, 4, 6, 7};
    c.xy = {0, 0, c.w, 0, c.w, b, 0, b, 0, b, a, b, a, c.h, 0, c.h};
    c.area = c.w * b + a * (c.h - b);
  }
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  std::vector<atlas::Placement> fast, reference;
  int fast_ended = -1, reference_ended = -1;
  const double fast_scale = atlas::pack(charts, 509, 1, false, fast, &fast_ended);
  const double reference_scale = atlas::pack(charts, 509, 1, true, reference, &reference_ended);
  omp_set_num_threads(threads);
  EXPECT_EQ(fast_scale, reference_scale);
  ASSERT_EQ(fast.size(), reference.size());
  for (size_t i = 0; i < fast.size(); ++i) {
    EXPECT_EQ(fast[i].x, reference[i].x) << "chart " << i;
    EXPECT_EQ(fast[i].y, reference[i].y) << "chart " << i;
    EXPECT_EQ(fast[i].turns, reference[i].turns) << "chart " << i;
  }
  EXPECT_GE(reference_ended, 16);  // every try of the reference ends
  EXPECT_GE(fast_ended, 1);
  EXPECT_LT(fast_ended, reference_ended);
}

// A chart of `tris` triangles given as xy corner triples (world units), its box's corner at
// the origin.
atlas::Chart chart_of(const std::vector<std::array<double, 6>>& tris) {
  atlas::Chart c;
  for (const auto& t : tris) {
    c.faces.push_back(static_cast<int32_t>(c.faces.size()));
    for (int k = 0; k < 3; ++k) {
      c.corners.push_back(static_cast<int32_t>(c.verts.size()));
      c.verts.push_back(static_cast<int32_t>(c.verts.size()));
      c.xy.insert(c.xy.end(), {t[2 * k], t[2 * k + 1]});
      c.w = std::max(c.w, t[2 * k]), c.h = std::max(c.h, t[2 * k + 1]);
    }
    c.area += 0.5 * std::abs((t[2] - t[0]) * (t[5] - t[1]) - (t[4] - t[0]) * (t[3] - t[1]));
  }
  return c;
}

// A square frame of side s around a square hole of side s - 2 * rim, in eight triangles.
atlas::Chart frame(double s, double rim) {
  const double o[4][2] = {{0, 0}, {s, 0}, {s, s}, {0, s}};
  const double i[4][2] = {{rim, rim}, {s - rim, rim}, {s - rim, s - rim}, {rim, s - rim}};
  std::vector<std::array<double, 6>> tris;
  for (int k = 0; k < 4; ++k) {
    const int n = (k + 1) % 4;
    tris.push_back({o[k][0], o[k][1], o[n][0], o[n][1], i[n][0], i[n][1]});
    tris.push_back({o[k][0], o[k][1], i[n][0], i[n][1], i[k][0], i[k][1]});
  }
  return chart_of(tris);
}

// The smallest Chebyshev (max-norm) distance between two triangles of texel coordinates
// (corners x0 y0 x1 y1 x2 y2): at a corner of one against an edge of the other, unless edges
// cross or a corner lies inside the other triangle (0). Over a segment the max-norm distance
// to a point is convex in the segment's parameter, so a ternary search finds its least.
double chebyshev(const std::array<double, 6>& a, const std::array<double, 6>& b) {
  auto point_segment = [](double px, double py, const double* s) {
    auto at = [&](double t) {
      return std::max(std::abs(px - (s[0] + t * (s[2] - s[0]))),
                      std::abs(py - (s[1] + t * (s[3] - s[1]))));
    };
    double lo = 0, hi = 1;
    for (int it = 0; it < 100; ++it) {
      const double m1 = lo + (hi - lo) / 3, m2 = hi - (hi - lo) / 3;
      (at(m1) < at(m2) ? hi : lo) = (at(m1) < at(m2) ? m2 : m1);
    }
    return std::min({at(lo), at(0), at(1)});
  };
  auto side = [](const double* s, double x, double y) {
    return (s[2] - s[0]) * (y - s[1]) - (s[3] - s[1]) * (x - s[0]);
  };
  auto cross = [&](const double* p, const double* q) {  // do segments p and q cross inside?
    return side(p, q[0], q[1]) * side(p, q[2], q[3]) < 0 &&
           side(q, p[0], p[1]) * side(q, p[2], p[3]) < 0;
  };
  auto inside = [&](const std::array<double, 6>& t, double x, double y) {
    double s3[3];
    for (int e = 0; e < 3; ++e) {
      const int n = (e + 1) % 3;
      const double seg[4] = {t[2 * e], t[2 * e + 1], t[2 * n], t[2 * n + 1]};
      s3[e] = side(seg, x, y);
    }
    return (s3[0] > 0 && s3[1] > 0 && s3[2] > 0) || (s3[0] < 0 && s3[1] < 0 && s3[2] < 0);
  };
  for (int k = 0; k < 3; ++k)
    if (inside(a, b[2 * k], b[2 * k + 1]) || inside(b, a[2 * k], a[2 * k + 1])) return 0;
  double best = INFINITY;
  for (int e = 0; e < 3; ++e) {
    const int n = (e + 1) % 3;
    const double ea[4] = {a[2 * e], a[2 * e + 1], a[2 * n], a[2 * n + 1]};
    const double eb[4] = {b[2 * e], b[2 * e + 1], b[2 * n], b[2 * n + 1]};
    for (int k = 0; k < 3; ++k) {
      best = std::min(best, point_segment(b[2 * k], b[2 * k + 1], ea));
      best = std::min(best, point_segment(a[2 * k], a[2 * k + 1], eb));
    }
    for (int f = 0; f < 3; ++f) {
      const int g = (f + 1) % 3;
      const double fb[4] = {b[2 * f], b[2 * f + 1], b[2 * g], b[2 * g + 1]};
      if (cross(ea, fb)) return 0;
    }
  }
  return best;
}

// Each chart's triangles in texels, as pack() placed them.
std::vector<std::vector<std::array<double, 6>>> placed_triangles(
    const std::vector<atlas::Chart>& charts, const std::vector<atlas::Placement>& at,
    double scale, int32_t size, int32_t padding) {
  std::vector<std::vector<std::array<double, 6>>> out(charts.size());
  for (size_t c = 0; c < charts.size(); ++c) {
    const std::vector<float> uv = atlas::chart_uvs(charts[c], at[c], scale, size, padding);
    for (size_t f = 0; f < charts[c].faces.size(); ++f) {
      std::array<double, 6> t{};
      for (int k = 0; k < 3; ++k) {
        const int32_t v = charts[c].corners[3 * f + k];
        t[2 * k] = double(uv[2 * v]) * size, t[2 * k + 1] = double(uv[2 * v + 1]) * size;
      }
      out[c].push_back(t);
    }
  }
  return out;
}

// The packing's promise: two charts' geometry at least padding + 1 texels apart (max norm),
// so bilinear lookups and the bake's dilation never mix them; with holes in charts (frames)
// that take other charts, ragged triangles whose column profiles are clipped to each column,
// odd sizes and both paddings used.
TEST(MeshAtlasPlanar, PackedChartsStayTheirMarginApart) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<atlas::Chart> charts;
  for (int i = 0; i < 7; ++i) charts.push_back(frame(0.2 + 0.1 * u(rng), 0.02 + 0.03 * u(rng)));
  for (int i = 0; i < 150; ++i) {  // fans of 1-5 thin, turned triangles
    std::vector<std::array<double, 6>> tris;
    const int n = 1 + i % 5;
    const double r = 0.01 + 0.05 * u(rng);
    for (int k = 0; k < n; ++k) {
      const double a0 = 0.9 * k + u(rng), a1 = a0 + 0.3 + 0.6 * u(rng);
      tris.push_back({r, r, r + r * std::cos(a0), r + r * std::sin(a0), r + r * std::cos(a1),
                      r + r * std::sin(a1)});
    }
    charts.push_back(chart_of(tris));
  }
  for (atlas::Chart& c : charts) {  // the box's corner at the origin, as the atlas makes them
    double x0 = INFINITY, y0 = INFINITY;
    for (size_t k = 0; k < c.xy.size(); k += 2)
      x0 = std::min(x0, c.xy[k]), y0 = std::min(y0, c.xy[k + 1]);
    c.w = c.h = 0;
    for (size_t k = 0; k < c.xy.size(); k += 2) {
      c.xy[k] -= x0, c.xy[k + 1] -= y0;
      c.w = std::max(c.w, c.xy[k]), c.h = std::max(c.h, c.xy[k + 1]);
    }
  }
  for (int32_t padding : {1, 2}) {
    const int32_t size = 301 + 2 * padding;
    std::vector<atlas::Placement> at;
    const double scale = atlas::pack(charts, size, padding, false, at);
    const auto tris = placed_triangles(charts, at, scale, size, padding);
    int in_frames = 0;
    double closest = INFINITY;
    auto apart = [&](const std::array<double, 6>& p, const std::array<double, 6>& q) {
      for (int d = 0; d < 2; ++d) {  // boxes farther apart than the margin on some axis
        const double p0 = std::min({p[d], p[2 + d], p[4 + d]});
        const double p1 = std::max({p[d], p[2 + d], p[4 + d]});
        const double q0 = std::min({q[d], q[2 + d], q[4 + d]});
        const double q1 = std::max({q[d], q[2 + d], q[4 + d]});
        if (q0 - p1 > padding + 1 || p0 - q1 > padding + 1) return true;
      }
      return false;
    };
    for (size_t a = 0; a < charts.size(); ++a)
      for (size_t b = a + 1; b < charts.size(); ++b)
        for (const auto& ta : tris[a])
          for (const auto& tb : tris[b])
            if (!apart(ta, tb)) closest = std::min(closest, chebyshev(ta, tb));
    for (size_t c = 7; c < charts.size(); ++c)  // a small chart inside some frame's box
      for (size_t f = 0; f < 7; ++f)
        if (at[c].x > at[f].x && at[c].x < at[f].x + scale * charts[f].w &&
            at[c].y > at[f].y && at[c].y < at[f].y + scale * charts[f].h) {
          ++in_frames;
          break;
        }
    EXPECT_GE(closest, padding + 1 - 1e-3) << "padding " << padding;  // float UVs
    EXPECT_GT(in_frames, 10) << "padding " << padding;
  }
}

TEST(MeshAtlasPlanar, TooManyChartsForTheTexture) {
  // Twenty separate cubes make twenty charts at least; boxes of at least 2 x 2 texels
  // (padding 1) fit an 8 x 8 texture sixteen times.
  TriMesh m;
  for (int i = 0; i < 20; ++i) append(m, cube(0.1f, {float(i), 0, 0}));
  ChartOptions o;
  o.texture_size = 8;
  o.padding = 1;
  EXPECT_ERROR(uv_unwrap(m, o), "do not fit a 8^2 texture");
}

}  // namespace
}  // namespace s3d::mesh
