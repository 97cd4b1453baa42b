// The BVH's closest-point queries against brute force over every face, on random odd-sized
// meshes (a noisy sphere, scattered triangles, coincident faces), points inside, on and far
// from the surface; and its tree, which must be a valid tree and the same bits for any thread
// count.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/cuda_util.h"
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
    int64_t best_face = -1;  // the first face at the least distance: the tree's tie rule
    for (int64_t f = 0; f < m.num_faces(); ++f) {
      float uvw[3];
      const float d2 = closest_point_on_triangle(p, m.vertex(m.faces[3 * f]),
                                                 m.vertex(m.faces[3 * f + 1]),
                                                 m.vertex(m.faces[3 * f + 2]), uvw);
      if (d2 < best) best = d2, best_face = f;
    }
    ASSERT_EQ(hits[i].face, best_face) << "query " << i;
    ASSERT_EQ(hits[i].distance, std::sqrt(best)) << "query " << i;
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

// Without noise, far points find a sphere's vertices, each shared by several faces at the same
// distance: the tree's answer is the first of them, as brute force's, whatever box rounding.
TEST(MeshBvh, TiesAtSharedVerticesGoToTheLowestFaceAsBruteForce) {
  expect_matches_brute_force(uv_sphere(3, 4, 0.4f, 0.0f, 2), 4001, 1.0f, 14);
  expect_matches_brute_force(uv_sphere(9, 13, 0.5f, 0.0f, 6), 2001, 4.0f, 15);
  expect_matches_brute_force(uv_sphere(31, 41, 0.5f, 0.0f, 7), 2001, 0.7f, 16);
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
  EXPECT_THROW(Bvh(bad, BvhBuild::device), Error);  // the mesh is checked before the device
}

// Without a usable CUDA device a tree cannot be built there: an error the export counts as a
// fallback (tests/gpu checks the device build itself).
TEST(MeshBvh, DeviceBuildWithoutADeviceIsAnError) {
  if (s3d::cuda_available()) GTEST_SKIP() << "a CUDA device is usable here";
  const TriMesh m = uv_sphere(5, 7, 0.4f, 0.0f, 1);
  try {
    Bvh b(m, BvhBuild::device);
    FAIL() << "built on a device that is not there";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no usable CUDA device"), std::string::npos) << e.what();
  }
  const Bvh host(m);
  EXPECT_TRUE(host.has_host_tree());
  EXPECT_FALSE(host.on_device());
}

// Appends `part` to `m`, its vertices moved by `offset`.
void append(TriMesh& m, const TriMesh& part, const Vec3& offset) {
  const auto base = static_cast<int32_t>(m.num_vertices());
  for (int64_t v = 0; v < part.num_vertices(); ++v)
    for (int k = 0; k < 3; ++k) m.positions.push_back(part.positions[3 * v + k] + offset[k]);
  for (int32_t i : part.faces) m.faces.push_back(base + i);
}

// 150,001 faces in several components: a noisy sphere with a hole, a soup of scattered
// triangles (every 97th degenerate, a segment) off to one side, and 301 copies of one face.
// Big enough that the build's top ranges are split by every thread at once and the ones below
// by tasks, not just by one thread.
TriMesh several_components() {
  TriMesh m;
  append(m, uv_sphere(200, 301, 0.4f, 0.01f, 31, 5), {0, 0, 0});  // 117,390 faces
  TriMesh soup = random_soup(32310, 32, 0.5f, 0.02f);
  for (int64_t f = 0; f < soup.num_faces(); f += 97) {
    const int32_t a = soup.faces[3 * f], c = soup.faces[3 * f + 2];
    for (int k = 0; k < 3; ++k) soup.positions[3 * c + k] = soup.positions[3 * a + k];
  }
  append(m, soup, {1.2f, 0.3f, -0.1f});
  TriMesh copies;
  copies.positions = {0, 0, 0, 0.1f, 0, 0, 0, 0.1f, 0};
  for (int i = 0; i < 301; ++i) copies.faces.insert(copies.faces.end(), {0, 1, 2});
  append(m, copies, {-0.9f, 0.2f, 0.6f});
  return m;
}

// Sets OpenMP's thread count for a scope and puts the old one back, even when a test fails.
struct ThreadCount {
  const int before = omp_get_max_threads();
  explicit ThreadCount(int n) { omp_set_num_threads(n); }
  ~ThreadCount() { omp_set_num_threads(before); }
};

TEST(MeshBvh, TreeIsTheSameForAnyThreadCount) {
  const TriMesh m = several_components();
  ASSERT_EQ(m.num_faces(), 150001);
  std::vector<Bvh::Node> nodes;
  std::vector<int32_t> order;
  {
    const ThreadCount one(1);
    const Bvh bvh(m);
    nodes = bvh.nodes();
    order = bvh.order();
  }
  // Three threads do not divide the chunks evenly; eight are more than this machine may have.
  for (int threads : {2, 3, 8}) {
    const ThreadCount many(threads);
    const Bvh bvh(m);
    ASSERT_EQ(bvh.nodes().size(), nodes.size()) << threads << " threads";
    EXPECT_EQ(std::memcmp(bvh.nodes().data(), nodes.data(), nodes.size() * sizeof nodes[0]), 0)
        << threads << " threads";
    EXPECT_EQ(bvh.order(), order) << threads << " threads";
  }
}

// What check_subtree found.
struct TreeWalk {
  int32_t next = 0;     // where the next leaf must start in order()
  int deepest = 0;
  int64_t outside = 0;  // corners outside their leaf's box, child boxes outside their parent's
};

// Walks the subtree of node i at `depth`: leaves must cover order() in sequence and each box
// must hold its faces' corners and its children's boxes. Returns the subtree's faces.
int64_t check_subtree(const Bvh& bvh, int32_t i, int depth, TreeWalk& w) {
  const auto& nodes = bvh.nodes();
  const Bvh::Node& n = nodes.at(i);
  w.deepest = std::max(w.deepest, depth);
  const auto outside = [&](const float lo[3], const float hi[3]) {
    for (int k = 0; k < 3; ++k) w.outside += lo[k] < n.lo[k] || hi[k] > n.hi[k];
  };
  if (n.left < 0) {
    EXPECT_EQ(n.first, w.next) << "leaf " << i;
    EXPECT_GT(n.count, 0) << "leaf " << i;
    w.next = n.first + n.count;
    const TriMesh& m = bvh.mesh();
    for (int32_t j = n.first; j < n.first + n.count; ++j)
      for (int c = 0; c < 3; ++c) {
        const Vec3 p = m.vertex(m.faces[3 * bvh.order().at(j) + c]);
        outside(p.data(), p.data());
      }
    return n.count;
  }
  // Depth-first numbering puts children after their parent, left first; this also rules out
  // cycles, so the walk ends.
  if (n.left <= i || n.right <= n.left) {
    ADD_FAILURE() << "node " << i << " has children " << n.left << " and " << n.right;
    return 0;
  }
  for (const int32_t c : {n.left, n.right}) outside(nodes.at(c).lo, nodes.at(c).hi);
  return check_subtree(bvh, n.left, depth + 1, w) + check_subtree(bvh, n.right, depth + 1, w);
}

TEST(MeshBvh, TreeCoversEveryFaceOnceInBoxesThatHoldThem) {
  const TriMesh m = several_components();
  const Bvh bvh(m);
  std::vector<int32_t> sorted = bvh.order();
  std::sort(sorted.begin(), sorted.end());
  for (int32_t f = 0; f < m.num_faces(); ++f) ASSERT_EQ(sorted[f], f);
  TreeWalk w;
  EXPECT_EQ(check_subtree(bvh, 0, 0, w), m.num_faces());
  EXPECT_EQ(w.next, m.num_faces());
  EXPECT_EQ(w.outside, 0);
  EXPECT_LE(w.deepest, 48 + 31);  // what the queries' fixed stacks hold
  // Every node but the one leaf of 301 coincident faces has at most 4; the tree is a full
  // binary one, so leaves are one more than the splits.
  int leaves = 0, big = 0;
  for (const Bvh::Node& n : bvh.nodes()) {
    leaves += n.left < 0;
    if (n.left < 0 && n.count > 4) {
      ++big;
      EXPECT_EQ(n.count, 301);
    }
  }
  EXPECT_EQ(big, 1);
  EXPECT_EQ(2 * leaves - 1, static_cast<int>(bvh.nodes().size()));
}

TEST(MeshBvh, ClosestPointMatchesBruteForceOnSeveralComponents) {
  // The queries search the tree the threads built, so they check its boxes too.
  expect_matches_brute_force(several_components(), 41, 1.6f, 14);
}

}  // namespace
}  // namespace s3d::mesh
