// The BVH's closest-point queries against brute force over every face, on random odd-sized
// meshes (a noisy sphere, scattered triangles, coincident faces), points inside, on and far
// from the surface.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "core/error.h"
#include "mesh/bvh.h"
#include "mesh_test_shapes.h"

namespace s3d::mesh {
namespace {

using test::random_soup;
using test::uv_sphere;

void expect_matches_brute_force(const TriMesh& m, int queries, float spread, uint32_t seed) {
  Bvh bvh(m);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-spread, spread);
  std::vector<float> pts(3 * queries);
  for (auto& x : pts) x = u(rng);
  std::vector<ClosestHit> hits(queries);
  for (auto& h : hits) h.distance = std::numeric_limits<float>::quiet_NaN(), h.face = -7;
  bvh.closest_many(pts.data(), queries, hits.data());
  for (int i = 0; i < queries; ++i) {
    const Vec3 p{pts[3 * i], pts[3 * i + 1], pts[3 * i + 2]};
    float best = std::numeric_limits<float>::max();
    for (int64_t f = 0; f < m.num_faces(); ++f) {
      float uvw[3];
      best = std::min(best, closest_point_on_triangle(p, m.vertex(m.faces[3 * f]),
                                                      m.vertex(m.faces[3 * f + 1]),
                                                      m.vertex(m.faces[3 * f + 2]), uvw));
    }
    ASSERT_GE(hits[i].face, 0) << i;
    ASSERT_LT(hits[i].face, m.num_faces());
    EXPECT_NEAR(hits[i].distance, std::sqrt(best), 1e-6f) << "query " << i;
    // The barycentric point reproduces the distance.
    const auto* f = &m.faces[3 * hits[i].face];
    const Vec3 q = m.vertex(f[0]) * hits[i].uvw[0] + m.vertex(f[1]) * hits[i].uvw[1] +
                   m.vertex(f[2]) * hits[i].uvw[2];
    EXPECT_NEAR(length(q - p), hits[i].distance, 1e-5f);
    EXPECT_NEAR(hits[i].uvw[0] + hits[i].uvw[1] + hits[i].uvw[2], 1.0f, 1e-5f);
    for (float w : hits[i].uvw) EXPECT_GE(w, -1e-6f);
  }
}

TEST(MeshBvh, ClosestPointMatchesBruteForceOnASoup) {
  expect_matches_brute_force(random_soup(517, 3, 1.0f, 0.1f), 301, 1.3f, 11);
}

TEST(MeshBvh, ClosestPointMatchesBruteForceOnASphere) {
  expect_matches_brute_force(uv_sphere(23, 37, 0.5f, 0.02f, 5), 257, 0.8f, 12);
  expect_matches_brute_force(uv_sphere(9, 13, 0.5f, 0.02f, 6), 129, 4.0f, 13);  // far points
}

TEST(MeshBvh, CoincidentFacesTieToTheLowestIndex) {
  TriMesh m;
  m.positions = {0, 0, 0, 1, 0, 0, 0, 1, 0};
  for (int i = 0; i < 9; ++i) m.faces.insert(m.faces.end(), {0, 1, 2});  // nine copies
  Bvh bvh(m);
  const ClosestHit h = bvh.closest({0.2f, 0.2f, 0.5f});
  EXPECT_EQ(h.face, 0);
  EXPECT_NEAR(h.distance, 0.5f, 1e-6f);
}

TEST(MeshBvh, ManyFacesAtOnePointBuildAShallowTree) {
  // Every centroid equal: the build must still split (median) and answer.
  TriMesh m;
  m.positions = {0, 0, 0, 1, 0, 0, 0, 1, 0, 0.5f, 0.5f, 0.5f};
  for (int i = 0; i < 1001; ++i) m.faces.insert(m.faces.end(), {0, 1, 2});
  Bvh bvh(m);
  EXPECT_EQ(bvh.closest({0.1f, 0.1f, -2}).face, 0);
}

TEST(MeshBvh, RefusesAnUnusableMesh) {
  TriMesh empty;
  EXPECT_THROW(Bvh{empty}, Error);
  TriMesh bad;
  bad.positions = {0, 0, 0, 1, 0, 0, 0, 1, 0};
  bad.faces = {0, 1, 3};
  EXPECT_THROW(Bvh{bad}, Error);
  bad.faces = {0, 1, 2};
  bad.positions[4] = std::numeric_limits<float>::infinity();
  EXPECT_THROW(Bvh{bad}, Error);
}

}  // namespace
}  // namespace s3d::mesh
