// mesh/simplify: the face budget is a hard bound, the output is clean and indexed, and the
// surface stays close to the input (sampled against the analytic torus it came from).
#include "mesh/simplify.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "expect_error.h"
#include "mesh/clean.h"
#include "mesh/clean_test_util.h"

namespace s3d::mesh {
namespace {

using namespace s3d::mesh::test;

// Largest distance to the torus of points spread over each face (corners, edge midpoints,
// centroid), and the total area.
std::pair<double, double> torus_error_and_area(const TriMesh& m, double R, double r) {
  double worst = 0, area = 0;
  const float w[7][3] = {{1, 0, 0}, {0, 1, 0}, {0, 0, 1}, {.5f, .5f, 0},
                         {0, .5f, .5f}, {.5f, 0, .5f}, {1 / 3.f, 1 / 3.f, 1 / 3.f}};
  for (int64_t f = 0; f < m.num_faces(); ++f) {
    const Vec3 a = m.vertex(m.faces[3 * f]), b = m.vertex(m.faces[3 * f + 1]),
               c = m.vertex(m.faces[3 * f + 2]);
    for (const auto& s : w) {
      worst = std::max(worst, torus_distance(a * s[0] + b * s[1] + c * s[2], R, r));
    }
    area += face_area(m, f);
  }
  return {worst, area};
}

void expect_clean(const TriMesh& m) {
  const MeshStats s = mesh_stats(m);
  EXPECT_EQ(s.degenerate_faces, 0);
  std::vector<int> used(m.num_vertices(), 0);
  for (int32_t v : m.faces) used[v] = 1;
  EXPECT_EQ(std::count(used.begin(), used.end(), 0), 0) << "unreferenced vertices";
}

TEST(MeshSimplify, TorusMeetsTheBudgetAndKeepsItsShape) {
  const double R = 1.0, r = 0.35, pi = 3.14159265358979;
  const TriMesh in = torus(91, 37, R, r);  // 6734 faces
  const auto [in_err, in_area] = torus_error_and_area(in, R, r);
  for (int64_t target : {3001, 1201, 401}) {
    TriMesh m = in;
    simplify(m, target);
    EXPECT_LE(m.num_faces(), target);
    EXPECT_GE(m.num_faces(), target * 9 / 10) << "stopped far below the budget";
    expect_clean(m);
    const MeshStats s = mesh_stats(m);
    EXPECT_EQ(s.boundary_edges, 0);  // closed in, closed out
    EXPECT_EQ(s.non_manifold_edges, 0);
    EXPECT_EQ(s.components, 1);
    EXPECT_EQ(inconsistent_edges(m), 0);
    // Every output vertex is an input vertex (so on the torus); the faces between them
    // stay near it, and the area near the torus's 4 pi^2 R r.
    const auto [err, area] = torus_error_and_area(m, R, r);
    const double limit = target >= 1000 ? 0.02 : 0.08;
    EXPECT_LT(err, limit) << target << " faces (input's own error " << in_err << ")";
    EXPECT_NEAR(area / (4 * pi * pi * R * r), 1.0, 0.05) << target;
    EXPECT_GT(signed_volume(m), 0);
  }
}

TEST(MeshSimplify, OpenNoisyGridAndSeveralParts) {
  TriMesh m = grid(41, 29);  // 2240 faces, open
  for (size_t i = 2; i < m.positions.size(); i += 3) {
    const float x = m.positions[i - 2], y = m.positions[i - 1];
    m.positions[i] = 0.01f * std::sin(0.7f * x) * std::cos(0.9f * y);
  }
  TriMesh t = torus(33, 17, 1.f, 0.3f, 0.01f, 3);
  translate(t, 60, 0, 0);
  append(m, t);
  const int64_t target = 777;
  simplify(m, target);
  EXPECT_LE(m.num_faces(), target);
  EXPECT_GT(m.num_faces(), target / 2);
  expect_clean(m);
}

TEST(MeshSimplify, FallsBackWhenCollapsesStall) {
  // A "book": many faces on one edge, each with its own third vertex, repeated along a line.
  // Every edge is a border or non-manifold, which edge collapse will not touch.
  TriMesh m;
  for (int book = 0; book < 7; ++book) {
    const int32_t base = static_cast<int32_t>(m.num_vertices());
    m.positions.insert(m.positions.end(), {float(3 * book), 0, 0, float(3 * book), 0, 1});
    for (int page = 0; page < 11; ++page) {
      const float a = 0.5f * page;
      m.positions.insert(m.positions.end(), {3.f * book + std::cos(a), std::sin(a), 0.5f});
      m.faces.insert(m.faces.end(), {base, base + 1, base + 2 + page});
    }
  }
  const std::vector<float> before = m.positions;
  simplify(m, 30);
  EXPECT_LE(m.num_faces(), 30);
  EXPECT_GT(m.num_faces(), 0);
  expect_clean(m);
  // Positions are input positions (the simplifiers only pick among the input vertices).
  for (int64_t v = 0; v < m.num_vertices(); ++v) {
    bool found = false;
    for (size_t u = 0; u < before.size() && !found; u += 3) {
      found = before[u] == m.positions[3 * v] && before[u + 1] == m.positions[3 * v + 1] &&
              before[u + 2] == m.positions[3 * v + 2];
    }
    EXPECT_TRUE(found) << "vertex " << v;
  }
}

TEST(MeshSimplify, UnweldedFacesFallBackToClustering) {
  // Every face with its own three vertices: edge collapse sees only borders and stalls at
  // once; clustering by position still reaches the budget near the surface.
  const TriMesh welded = torus(91, 37);
  TriMesh m;
  for (int64_t f = 0; f < welded.num_faces(); ++f) {
    for (int k = 0; k < 3; ++k) {
      const Vec3 p = welded.vertex(welded.faces[3 * f + k]);
      m.positions.insert(m.positions.end(), p.begin(), p.end());
      m.faces.push_back(static_cast<int32_t>(3 * f + k));
    }
  }
  simplify(m, 1000);
  EXPECT_LE(m.num_faces(), 1000);
  EXPECT_GT(m.num_faces(), 500);
  expect_clean(m);
  const auto [err, area] = torus_error_and_area(m, 1.0, 0.35);
  EXPECT_LT(err, 0.05);
  EXPECT_GT(area, 0.5 * 4 * 3.14159265358979 * 3.14159265358979 * 0.35);
}

TEST(MeshSimplify, WithinBudgetLeavesTheMeshAsItIs) {
  TriMesh m = torus(9, 5);
  m.positions.insert(m.positions.end(), {7, 7, 7});  // unreferenced: still left alone
  const TriMesh before = m;
  simplify(m, m.num_faces());
  EXPECT_EQ(m.faces, before.faces);
  EXPECT_EQ(m.positions, before.positions);
}

TEST(MeshSimplify, BadInputsThrow) {
  TriMesh m = torus(9, 5);
  EXPECT_ERROR(simplify(m, 0), "simplify", "target_faces");
  EXPECT_ERROR(simplify(m, -5), "simplify", "target_faces");
  m.faces[4] = 1000;
  EXPECT_ERROR(simplify(m, 10), "simplify", "outside");
  TriMesh empty;
  EXPECT_ERROR(simplify(empty, 10), "simplify", "no faces");
}

}  // namespace
}  // namespace s3d::mesh
