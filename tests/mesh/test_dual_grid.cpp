// The flexible dual grid: the encoder's voxel set and flags against brute force (triangle
// clipping, segment-triangle crossings), its dual vertices on planes and at corners, the
// decoder against a map-based reference, and the round trip: watertight shapes at odd
// resolutions decode to closed, consistently oriented meshes within a voxel of the input.
#include <gtest/gtest.h>
#include <omp.h>

#include <array>
#include <cmath>
#include <map>
#include <random>
#include <set>

#include "../expect_error.h"
#include "mesh/dual_grid.h"
#include "mesh_test_shapes.h"
#include "voxel_test_shapes.h"

namespace s3d::mesh {
namespace {

using test::box_mesh;
using test::closed_and_oriented;
using test::icosphere;
using test::random_soup;
using test::torus;

// Does triangle t (world) overlap box [lo, hi]? Reference: clip the triangle by the six
// planes; anything left over means overlap (exact ties do not occur in random data).
bool clip_overlaps(std::vector<std::array<double, 3>> poly, const double lo[3],
                   const double hi[3]) {
  for (int k = 0; k < 3; ++k)
    for (int side = 0; side < 2; ++side) {
      std::vector<std::array<double, 3>> next;
      auto inside = [&](const std::array<double, 3>& p) {
        return side == 0 ? p[k] >= lo[k] : p[k] <= hi[k];
      };
      for (size_t i = 0; i < poly.size(); ++i) {
        const auto& p = poly[i];
        const auto& q = poly[(i + 1) % poly.size()];
        if (inside(p)) next.push_back(p);
        if (inside(p) != inside(q)) {
          const double bound = side == 0 ? lo[k] : hi[k];
          const double s = (bound - p[k]) / (q[k] - p[k]);
          std::array<double, 3> r;
          for (int j = 0; j < 3; ++j) r[j] = p[j] + s * (q[j] - p[j]);
          next.push_back(r);
        }
      }
      poly = next;
      if (poly.empty()) return false;
    }
  return true;
}

// Signed crossing of segment [p, p + e_a * len] with triangle (a, b, c): 0 none, else the sign
// of the triangle normal's a component (Moller-Trumbore in double).
int segment_crossing(const double p[3], int a, double len, const Vec3& ta, const Vec3& tb,
                     const Vec3& tc) {
  double e1[3], e2[3], s[3], d[3] = {0, 0, 0};
  d[a] = len;
  for (int k = 0; k < 3; ++k) e1[k] = tb[k] - ta[k], e2[k] = tc[k] - ta[k], s[k] = p[k] - ta[k];
  const double h[3] = {d[1] * e2[2] - d[2] * e2[1], d[2] * e2[0] - d[0] * e2[2],
                       d[0] * e2[1] - d[1] * e2[0]};
  const double det = e1[0] * h[0] + e1[1] * h[1] + e1[2] * h[2];
  if (det == 0) return 0;
  const double u = (s[0] * h[0] + s[1] * h[1] + s[2] * h[2]) / det;
  const double q[3] = {s[1] * e1[2] - s[2] * e1[1], s[2] * e1[0] - s[0] * e1[2],
                       s[0] * e1[1] - s[1] * e1[0]};
  const double v = (d[0] * q[0] + d[1] * q[1] + d[2] * q[2]) / det;
  const double t = (e2[0] * q[0] + e2[1] * q[1] + e2[2] * q[2]) / det;
  if (u < 0 || v < 0 || u + v > 1 || t < 0 || t > 1) return 0;
  const double na = e1[(a + 1) % 3] * e2[(a + 2) % 3] - e1[(a + 2) % 3] * e2[(a + 1) % 3];
  return na > 0 ? 1 : -1;
}

// Brute force over every voxel of the grid and every face: the voxel set and the flags.
void expect_matches_brute_force(const TriMesh& m, const GridBox& box) {
  const DualGrid g = voxelize_dual_grid(m, box);
  std::map<std::array<int32_t, 3>, int64_t> index;
  for (int64_t i = 0; i < g.num_voxels(); ++i) {
    index[{g.coords[3 * i], g.coords[3 * i + 1], g.coords[3 * i + 2]}] = i;
    if (i > 0) {  // sorted by (x, y, z)
      EXPECT_TRUE(std::lexicographical_compare(&g.coords[3 * i - 3], &g.coords[3 * i],
                                               &g.coords[3 * i], &g.coords[3 * i + 3]));
    }
    for (int k = 0; k < 3; ++k) {
      EXPECT_GE(g.dual_vertices[3 * i + k], 0.0f);
      EXPECT_LE(g.dual_vertices[3 * i + k], 1.0f);
    }
  }
  const Vec3 vs = box.voxel_size();
  int64_t touched = 0, flagged = 0;
  for (int x = 0; x < box.size[0]; ++x)
    for (int y = 0; y < box.size[1]; ++y)
      for (int z = 0; z < box.size[2]; ++z) {
        const int c[3] = {x, y, z};
        double lo[3], hi[3];
        for (int k = 0; k < 3; ++k) lo[k] = box.lo[k] + double(vs[k]) * c[k], hi[k] = lo[k] + vs[k];
        bool touch = false;
        for (int64_t f = 0; f < m.num_faces() && !touch; ++f) {
          std::vector<std::array<double, 3>> tri;
          for (int j = 0; j < 3; ++j) {
            const Vec3 p = m.vertex(m.faces[3 * f + j]);
            tri.push_back({p[0], p[1], p[2]});
          }
          touch = clip_overlaps(tri, lo, hi);
        }
        const auto it = index.find({x, y, z});
        ASSERT_EQ(touch, it != index.end()) << "voxel " << x << " " << y << " " << z;
        touched += touch;
        for (int a = 0; a < 3; ++a) {
          // The edge along a at the voxel's high corner in the other two axes (interior only).
          const int b = (a + 1) % 3, cc = (a + 2) % 3;
          if (c[b] + 1 >= box.size[b] || c[cc] + 1 >= box.size[cc]) continue;
          double p[3];
          p[a] = lo[a], p[b] = hi[b], p[cc] = hi[cc];
          int count = 0, net = 0;
          for (int64_t f = 0; f < m.num_faces(); ++f) {
            const int s =
                segment_crossing(p, a, vs[a], m.vertex(m.faces[3 * f]),
                                 m.vertex(m.faces[3 * f + 1]), m.vertex(m.faces[3 * f + 2]));
            count += s != 0;
            net += s;
          }
          const int expect = count % 2 ? (net > 0 ? 2 : 1) : 0;
          const int got = it == index.end() ? 0 : g.intersected[3 * it->second + a];
          ASSERT_EQ(got, expect) << "voxel " << x << " " << y << " " << z << " axis " << a;
          flagged += expect != 0;
        }
      }
  EXPECT_GT(flagged, 10);  // the test saw crossings
  EXPECT_GT(touched, flagged / 3);
}

TEST(MeshDualGrid, VoxelsAndFlagsMatchBruteForceOnASoup) {
  GridBox box;
  box.lo = {-0.6f, -0.5f, -0.55f};
  box.hi = {0.6f, 0.55f, 0.5f};
  box.size = {11, 9, 13};
  // Triangles of several voxels, some reaching out of the box, and degenerate ones: a repeated
  // index, three collinear points (they touch voxels but cross nothing).
  TriMesh m = random_soup(31, 7, 0.55f, 0.3f);
  const int32_t v = static_cast<int32_t>(m.num_vertices());
  m.positions.insert(m.positions.end(), {-0.31f, 0.12f, 0.05f, 0.2f, -0.23f, 0.17f, -0.05f,
                                         -0.055f, 0.11f});
  m.faces.insert(m.faces.end(), {v, v, v + 1, v, v + 1, v + 2, 3, 3, 3});
  expect_matches_brute_force(m, box);
}

TEST(MeshDualGrid, VoxelsAndFlagsMatchBruteForceOnASphere) {
  GridBox box;
  box.size = {13, 13, 11};
  TriMesh m = icosphere(2, 0.37f);
  test::rotate(m, 0.3f, 0.2f, 0.1f, {0.013f, -0.021f, 0.007f});
  expect_matches_brute_force(m, box);
}

// Closed, oriented, and within a voxel of the input both ways.
void expect_round_trip(const TriMesh& m, const GridBox& box, double volume, double vol_tol,
                       int64_t max_nonmanifold = 0) {
  const DualGrid g = voxelize_dual_grid(m, box);
  const TriMesh out = dual_grid_to_mesh(g, box);
  ASSERT_GT(out.num_faces(), 0);
  EXPECT_TRUE(closed_and_oriented(out, max_nonmanifold));
  EXPECT_NEAR(test::signed_volume(out), volume, vol_tol);
  const float voxel = box.voxel_size()[0];
  EXPECT_LT(test::max_vertex_distance(out, m), 0.87f * voxel);
  EXPECT_LT(test::max_surface_distance(m, out, 2001, 3), voxel);
}

TEST(MeshDualGrid, SphereDecodesClosedAndOriented) {
  GridBox box;
  box.size = {37, 37, 37};
  TriMesh m = icosphere(3, 0.4f);
  test::rotate(m, 0.1f, 0.2f, 0.3f, {0.01f, 0.02f, -0.03f});
  const double v = test::signed_volume(m);
  expect_round_trip(m, box, v, 0.02 * v);
  box.size = {64, 64, 64};
  expect_round_trip(m, box, v, 0.01 * v);
}

TEST(MeshDualGrid, TorusDecodesClosedAndOriented) {
  GridBox box;
  box.size = {37, 37, 37};
  TriMesh m = torus(0.3f, 0.12f, 61, 29);
  test::rotate(m, 0.7f, 0.1f, 0.2f);
  const double v = test::signed_volume(m);
  expect_round_trip(m, box, v, 0.05 * v);
}

TEST(MeshDualGrid, RotatedCubeKeepsItsCorners) {
  GridBox box;
  box.size = {37, 37, 37};
  TriMesh m = box_mesh({-0.25f, -0.2f, -0.15f}, {0.2f, 0.25f, 0.3f});
  test::rotate(m, 0.3f, 0.5f, 0.7f);
  const double v = test::signed_volume(m);
  // A sharp edge seen at a slant crosses a few lattice faces diagonally: four faces meet on
  // the dual edge through such a face (o-voxel's meshes have them too; the clean-up repairs).
  expect_round_trip(m, box, v, 0.02 * v, 12);
  // The planes' QEF puts the vertex of a corner's voxel near the corner (the regularisation
  // pulls it a little toward the pieces' centroid: the voxel's centre is 0.3-0.6 voxel away).
  const DualGrid g = voxelize_dual_grid(m, box);
  const TriMesh out = dual_grid_to_mesh(g, box);
  const Vec3 vs = box.voxel_size();
  for (int64_t c = 0; c < 8; ++c) {
    const Vec3 p = m.vertex(c);
    int32_t cell[3];
    for (int k = 0; k < 3; ++k)
      cell[k] = static_cast<int32_t>(std::floor((p[k] - box.lo[k]) / vs[k]));
    int64_t found = -1;
    for (int64_t i = 0; i < g.num_voxels(); ++i)
      if (std::equal(cell, cell + 3, &g.coords[3 * i])) found = i;
    ASSERT_GE(found, 0);
    EXPECT_LT(length(out.vertex(found) - p), 0.25f * vs[0]) << "corner " << c;
  }
}

TEST(MeshDualGrid, DualVerticesLieOnAPlane) {
  // Two triangles of one tilted plane: every dual vertex minimises on the plane itself.
  TriMesh m;
  m.positions = {-2, -2, 0.1f, 2, -2, -0.3f, 2, 2, 0.05f, -2, 2, 0.45f};
  m.faces = {0, 1, 2, 0, 2, 3};
  GridBox box;
  box.size = {15, 17, 19};
  const DualGrid g = voxelize_dual_grid(m, box);
  const TriMesh out = dual_grid_to_mesh(g, box);
  ASSERT_GT(g.num_voxels(), 200);
  EXPECT_LT(test::max_vertex_distance(out, m), 2e-5f);
  float worst = 0;
  Bvh bvh(m);
  for (int64_t i = 0; i < out.num_vertices(); ++i)
    worst = std::max(worst, bvh.closest(out.vertex(i)).distance);
  EXPECT_LT(worst, 2e-5f);
}

TEST(MeshDualGrid, SurfaceOnLatticePlanesAndVerticesDecodesClosed) {
  // A cube whose faces lie on lattice planes and an octahedron whose vertices are lattice
  // vertices: every crossing is a tie, broken the same way everywhere.
  GridBox box;
  box.lo = {0, 0, 0};
  box.hi = {13, 13, 13};
  box.size = {13, 13, 13};
  TriMesh cube = box_mesh({3, 4, 2}, {9, 10, 11});
  const DualGrid g = voxelize_dual_grid(cube, box);
  const TriMesh out = dual_grid_to_mesh(g, box);
  EXPECT_TRUE(closed_and_oriented(out));
  // On the faces exactly; the vertices of voxels inside along the edges, where two or three
  // planes meet, are pulled a little inward by the regularisation.
  EXPECT_LT(test::max_vertex_distance(out, cube), 0.1f);
  EXPECT_NEAR(test::signed_volume(out), 6 * 6 * 9, 5);
  TriMesh octa;
  octa.positions = {6, 6, 2, 10, 6, 6, 6, 10, 6, 2, 6, 6, 6, 2, 6, 6, 6, 10};
  octa.faces = {0, 2, 1, 0, 3, 2, 0, 4, 3, 0, 1, 4, 5, 1, 2, 5, 2, 3, 5, 3, 4, 5, 4, 1};
  ASSERT_GT(test::signed_volume(octa), 0);
  const TriMesh out2 = dual_grid_to_mesh(voxelize_dual_grid(octa, box), box);
  EXPECT_TRUE(closed_and_oriented(out2));
  EXPECT_NEAR(test::signed_volume(out2), test::signed_volume(octa),
              0.15 * test::signed_volume(octa));
}

TEST(MeshDualGrid, ResultsDoNotDependOnTheThreadCount) {
  GridBox box;
  box.size = {41, 39, 43};
  TriMesh m = torus(0.3f, 0.1f, 47, 23);
  test::rotate(m, 0.2f, 0.9f, 0.4f);
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const DualGrid a = voxelize_dual_grid(m, box);
  const TriMesh ma = dual_grid_to_mesh(a, box);
  omp_set_num_threads(3);
  const DualGrid b = voxelize_dual_grid(m, box);
  const TriMesh mb = dual_grid_to_mesh(b, box);
  omp_set_num_threads(threads);
  EXPECT_EQ(a.coords, b.coords);
  EXPECT_EQ(a.dual_vertices, b.dual_vertices);
  EXPECT_EQ(a.intersected, b.intersected);
  EXPECT_EQ(ma.positions, mb.positions);
  EXPECT_EQ(ma.faces, mb.faces);
}

TEST(MeshDualGrid, SurfaceOutsideTheBoxIsDropped) {
  GridBox box;
  box.size = {9, 9, 9};
  const DualGrid none = voxelize_dual_grid(icosphere(1, 0.2f, {3, 0, 0}), box);
  EXPECT_EQ(none.num_voxels(), 0);
  const TriMesh empty = dual_grid_to_mesh(none, box);
  EXPECT_EQ(empty.num_vertices(), 0);
  EXPECT_EQ(empty.num_faces(), 0);
  // Half in: voxels only inside the grid, and an open mesh (the cut is not closed).
  const DualGrid half = voxelize_dual_grid(icosphere(2, 0.3f, {0.45f, 0, 0}), box);
  ASSERT_GT(half.num_voxels(), 0);
  for (int64_t i = 0; i < 3 * half.num_voxels(); ++i) {
    EXPECT_GE(half.coords[i], 0);
    EXPECT_LT(half.coords[i], 9);
  }
  EXPECT_FALSE(closed_and_oriented(dual_grid_to_mesh(half, box)));
}

// ---- Decoder ------------------------------------------------------------------------------

// Reference decoder: a std::map of coordinates, quads as o-voxel lists them, the first split
// unless triangle (q0, q1, q2) has a zero normal, flag 2 reversing the winding.
TriMesh reference_decode(const DualGrid& g, const GridBox& box) {
  const int off[3][4][3] = {{{0, 0, 0}, {0, 0, 1}, {0, 1, 1}, {0, 1, 0}},
                            {{0, 0, 0}, {1, 0, 0}, {1, 0, 1}, {0, 0, 1}},
                            {{0, 0, 0}, {0, 1, 0}, {1, 1, 0}, {1, 0, 0}}};
  std::map<std::array<int32_t, 3>, int32_t> at;
  TriMesh m;
  const Vec3 vs = box.voxel_size();
  for (int64_t i = 0; i < g.num_voxels(); ++i) {
    at[{g.coords[3 * i], g.coords[3 * i + 1], g.coords[3 * i + 2]}] = static_cast<int32_t>(i);
    for (int k = 0; k < 3; ++k)
      m.positions.push_back((float(g.coords[3 * i + k]) + g.dual_vertices[3 * i + k]) * vs[k] +
                            box.lo[k]);
  }
  for (int64_t i = 0; i < g.num_voxels(); ++i)
    for (int a = 0; a < 3; ++a) {
      if (!g.intersected[3 * i + a]) continue;
      int32_t q[4];
      bool all = true;
      for (int j = 0; j < 4; ++j) {
        auto it = at.find({g.coords[3 * i] + off[a][j][0], g.coords[3 * i + 1] + off[a][j][1],
                           g.coords[3 * i + 2] + off[a][j][2]});
        all = all && it != at.end();
        if (all) q[j] = it->second;
      }
      if (!all) continue;
      const Vec3 n = cross(m.vertex(q[1]) - m.vertex(q[0]), m.vertex(q[2]) - m.vertex(q[0]));
      std::vector<int32_t> t = dot(n, n) > 0
                                   ? std::vector<int32_t>{q[0], q[1], q[2], q[0], q[2], q[3]}
                                   : std::vector<int32_t>{q[0], q[1], q[3], q[3], q[1], q[2]};
      if (g.intersected[3 * i + a] == 2) std::swap(t[1], t[2]), std::swap(t[4], t[5]);
      m.faces.insert(m.faces.end(), t.begin(), t.end());
    }
  return m;
}

TEST(MeshDualGrid, DecoderMatchesAReferenceOnRandomGrids) {
  std::mt19937 rng(17);
  GridBox box;
  box.lo = {-1, -0.5f, 0.25f};
  box.hi = {1, 0.75f, 1};
  box.size = {7, 9, 5};
  for (int trial = 0; trial < 5; ++trial) {
    DualGrid g;
    for (int x = 0; x < 7; ++x)
      for (int y = 0; y < 9; ++y)
        for (int z = 0; z < 5; ++z) {
          if (rng() % 10 < 3) continue;  // 70% present, unordered below
          g.coords.insert(g.coords.end(), {x, y, z});
          for (int k = 0; k < 3; ++k) {
            g.dual_vertices.push_back(float(rng() % 1000) / 999);
            g.intersected.push_back(static_cast<uint8_t>(rng() % 3));
          }
        }
    // Shuffle the voxel order: the decoder must not rely on sorting.
    const int64_t n = g.num_voxels();
    for (int64_t i = n - 1; i > 0; --i) {
      const int64_t j = rng() % (i + 1);
      for (int k = 0; k < 3; ++k) {
        std::swap(g.coords[3 * i + k], g.coords[3 * j + k]);
        std::swap(g.dual_vertices[3 * i + k], g.dual_vertices[3 * j + k]);
        std::swap(g.intersected[3 * i + k], g.intersected[3 * j + k]);
      }
    }
    const TriMesh got = dual_grid_to_mesh(g, box);
    const TriMesh want = reference_decode(g, box);
    EXPECT_EQ(got.positions, want.positions);
    EXPECT_EQ(got.faces, want.faces);
    EXPECT_GT(got.num_faces(), 50);
  }
}

TEST(MeshDualGrid, DegenerateFirstTriangleTakesTheOtherSplit) {
  // A z-edge quad whose first three vertices are collinear (exactly, in float).
  DualGrid g;
  g.coords = {0, 0, 0, 0, 1, 0, 1, 1, 0, 1, 0, 0};
  g.dual_vertices = {0.5f, 0.5f, 0.5f, 0.75f, 0.25f, 0.5f, 0.0f, 1.0f, 0.5f, 0.5f, 0.5f, 0.5f};
  g.intersected = {0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  GridBox box;
  box.lo = {0, 0, 0};
  box.hi = {2, 2, 1};
  box.size = {2, 2, 1};
  TriMesh m = dual_grid_to_mesh(g, box);
  EXPECT_EQ(m.faces, (std::vector<int32_t>{0, 1, 3, 3, 1, 2}));
  g.intersected[2] = 2;
  m = dual_grid_to_mesh(g, box);
  EXPECT_EQ(m.faces, (std::vector<int32_t>{0, 3, 1, 3, 2, 1}));
  g.dual_vertices[4] = 0.3f;  // no longer collinear: the first split
  m = dual_grid_to_mesh(g, box);
  EXPECT_EQ(m.faces, (std::vector<int32_t>{0, 2, 1, 0, 3, 2}));
}

TEST(MeshDualGrid, RefusesBadInput) {
  using s3d::test::error_contains;
  GridBox box;
  box.size = {8, 8, 8};
  const TriMesh sphere = icosphere(1, 0.3f);
  EXPECT_TRUE(error_contains([&] { voxelize_dual_grid(TriMesh{}, box); }, {"no faces"}));
  GridBox bad = box;
  bad.size = {8, 0, 8};
  EXPECT_TRUE(error_contains([&] { voxelize_dual_grid(sphere, bad); }, {"grid size", "axis 1"}));
  bad.size = {8, 8, 70000};
  EXPECT_TRUE(error_contains([&] { voxelize_dual_grid(sphere, bad); }, {"grid size", "70000"}));
  bad = box;
  bad.hi[2] = bad.lo[2];
  EXPECT_TRUE(error_contains([&] { voxelize_dual_grid(sphere, bad); }, {"axis 2", "hi > lo"}));
  GridBox huge;  // a triangle across the whole of a 65536^3 grid: refused, not allocated
  huge.size = {65536, 65536, 65536};
  TriMesh big;
  big.positions = {-0.5f, -0.5f, -0.5f, 0.5f, 0.5f, -0.5f, 0.5f, -0.5f, 0.5f};
  big.faces = {0, 1, 2};
  EXPECT_TRUE(error_contains([&] { voxelize_dual_grid(big, huge); }, {"blocks", "coarser grid"}));
  bad = box;
  bad.lo[0] = std::nanf("");
  EXPECT_TRUE(error_contains([&] { dual_grid_to_mesh(DualGrid{}, bad); }, {"axis 0"}));

  DualGrid g = voxelize_dual_grid(sphere, box);
  ASSERT_GT(g.num_voxels(), 10);
  DualGrid h = g;
  h.dual_vertices.pop_back();
  EXPECT_TRUE(error_contains([&] { dual_grid_to_mesh(h, box); }, {"dual vertex values"}));
  h = g;
  h.coords[3 * 5 + 1] = 8;
  EXPECT_TRUE(error_contains([&] { dual_grid_to_mesh(h, box); }, {"voxel 5", "outside"}));
  h = g;
  h.coords[3 * 5 + 1] = -1;
  EXPECT_TRUE(error_contains([&] { dual_grid_to_mesh(h, box); }, {"voxel 5", "outside"}));
  h = g;
  h.dual_vertices[3 * 7] = std::numeric_limits<float>::infinity();
  EXPECT_TRUE(error_contains([&] { dual_grid_to_mesh(h, box); }, {"voxel 7", "non-finite"}));
  h = g;
  h.intersected[3 * 4 + 2] = 3;
  EXPECT_TRUE(error_contains([&] { dual_grid_to_mesh(h, box); }, {"voxel 4", "flag 3"}));
  h = g;
  std::copy(&h.coords[3 * 2], &h.coords[3 * 3], &h.coords[3 * 9]);
  EXPECT_TRUE(error_contains([&] { dual_grid_to_mesh(h, box); }, {"voxel 9 repeats", "voxel 2"}));
}

}  // namespace
}  // namespace s3d::mesh
