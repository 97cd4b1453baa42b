// uv_unwrap's stated properties on small odd meshes (a cube, a noisy sphere with a hole, two
// components, a degenerate face): every input face comes back once with its 3D corners,
// vertex_of points at identical positions, UVs lie in [0, 1], and no texel centre lies strictly
// inside two faces' UV triangles (checked by brute force over each face's bounding box).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <random>

#include "../expect_error.h"
#include "mesh/atlas.h"
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

// Texel centres strictly inside (by a margin) more than one face's UV triangle.
int64_t overlapping_texels(const UvMesh& m, int size) {
  std::vector<int> count(size * size, 0);
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
        count[r * size + c] += inside;
      }
  }
  return std::count_if(count.begin(), count.end(), [](int n) { return n > 1; });
}

void expect_good_atlas(const TriMesh& in, const ChartOptions& o, int64_t allowed_empty = 0) {
  const UvMesh out = uv_unwrap(in, o);
  expect_faces_kept(in, out);
  expect_vertices_consistent(in, out);
  EXPECT_GE(out.num_charts, 1);
  EXPECT_EQ(overlapping_texels(out, 512), 0);
  const AtlasStats st = atlas_stats(out, 256);
  EXPECT_GT(st.utilization, 0.2);
  EXPECT_LE(st.utilization, 1.0);
  EXPECT_EQ(st.flipped_or_empty, allowed_empty);
}

TEST(MeshAtlas, Cube) {
  ChartOptions o;
  o.texture_size = 512;
  expect_good_atlas(cube(0.3f, {0, 0, 0}), o);
  const UvMesh out = uv_unwrap(cube(0.3f, {0, 0, 0}), o);
  // A cube's faces are 90 degrees apart: at least one seam per pair of opposite faces.
  EXPECT_GT(out.num_vertices(), 8);
}

TEST(MeshAtlas, SphereWithHole) {
  ChartOptions o;
  o.texture_size = 1024;
  o.padding = 3;
  // Radius 0.4, noise 0.01, the top 3 rings left out, no slivers at the poles.
  expect_good_atlas(uv_sphere(17, 23, 0.4f, 0.01f, 1, 3, false), o);
}

TEST(MeshAtlas, TwoComponentsAndConeAngle) {
  TriMesh m = uv_sphere(11, 13, 0.4f, 0.01f, 2, 0, false);
  append(m, cube(0.2f, {1.5f, 0.1f, -0.3f}));
  ChartOptions o;
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

TEST(MeshAtlas, DegenerateFaceStaysInOutput) {
  TriMesh m = cube(0.3f, {0.1f, 0.2f, 0.3f});
  m.faces.insert(m.faces.end(), {0, 1, 1});  // a repeated corner: no area
  ChartOptions o;
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

TEST(MeshAtlas, RejectsBadInput) {
  ChartOptions o;
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
}

}  // namespace
}  // namespace s3d::mesh
