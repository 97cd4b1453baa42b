// mesh/simplify: the face budget is a hard bound, the output is clean and indexed, and the
// surface stays close to the input (sampled against the analytic torus it came from). The
// parallel path (spatial blocks) also keeps closed inputs closed, does not depend on the
// thread count, and stays close to its input (closest points through the BVH).
#include "mesh/simplify.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "expect_error.h"
#include "mesh/bvh.h"
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

constexpr SimplifyMethod kMethods[] = {SimplifyMethod::shaped, SimplifyMethod::meshoptimizer};
const char* name(SimplifyMethod m) {
  return m == SimplifyMethod::shaped ? "shaped" : "meshoptimizer";
}

// Small blocks, so that meshes of tens of thousands of faces take the parallel path.
SimplifyOptions small_blocks(int32_t max_blocks = 64,
                             SimplifyMethod method = SimplifyMethod::shaped) {
  SimplifyOptions o;
  o.method = method;
  o.parallel_min_faces = 0;
  o.block_faces = 3000;
  o.block_budget = 400;
  o.max_blocks = max_blocks;
  return o;
}

SimplifyOptions serial_only(SimplifyMethod method = SimplifyMethod::shaped) {
  SimplifyOptions o;
  o.method = method;
  o.parallel_min_faces = std::numeric_limits<int64_t>::max();
  return o;
}

double diagonal(const TriMesh& m) {
  Vec3 lo = m.vertex(0), hi = lo;
  for (int64_t v = 1; v < m.num_vertices(); ++v) {
    for (int k = 0; k < 3; ++k) {
      lo[k] = std::min(lo[k], m.positions[3 * v + k]);
      hi[k] = std::max(hi[k], m.positions[3 * v + k]);
    }
  }
  return length(hi - lo);
}

// Mean and largest distance from `points` (xyz triples) to the surface of `to`.
std::pair<double, double> distances(const std::vector<float>& points, const TriMesh& to) {
  const Bvh bvh(to);
  const int64_t n = static_cast<int64_t>(points.size() / 3);
  std::vector<ClosestHit> hits(n);
  for (ClosestHit& h : hits) h.distance = std::numeric_limits<float>::quiet_NaN();  // poison
  bvh.closest_many(points.data(), n, hits.data());
  double sum = 0, worst = 0;
  for (const ClosestHit& h : hits) sum += h.distance, worst = std::max(worst, double(h.distance));
  return {sum / n, worst};
}

std::vector<float> centroids(const TriMesh& m) {
  std::vector<float> c;
  for (int64_t f = 0; f < m.num_faces(); ++f) {
    const Vec3 p = (m.vertex(m.faces[3 * f]) + m.vertex(m.faces[3 * f + 1]) +
                    m.vertex(m.faces[3 * f + 2])) * (1 / 3.f);
    c.insert(c.end(), p.begin(), p.end());
  }
  return c;
}

void expect_closed(const TriMesh& m) {
  const MeshStats s = mesh_stats(m);
  EXPECT_EQ(s.boundary_edges, 0);  // every edge has exactly two faces
  EXPECT_EQ(s.non_manifold_edges, 0);
  EXPECT_EQ(s.components, 1);
  EXPECT_EQ(inconsistent_edges(m), 0);
}

TEST(MeshSimplify, ParallelBlocksKeepTheTorusClosedAndClose) {
  const TriMesh in = torus(311, 157, 1.f, 0.35f, 5e-4f, 7);  // 97654 faces, noisy
  const double diag = diagonal(in);
  for (int64_t target : {7001, 2999}) {
    for (int run = 0; run < 4; ++run) {
      const bool second_round = run % 2 == 0;
      const SimplifyMethod method = kMethods[run / 2];
      SCOPED_TRACE(name(method));
      SCOPED_TRACE(second_round ? "second round of blocks" : "first round and the final pass");
      TriMesh m = in, serial = in, other = in;
      SimplifyOptions o = small_blocks(64, method);
      o.block_faces = 1000;  // so that the first round's output makes blocks again at 2999
      o.second_round = second_round;
      simplify(m, target, o);
      o.second_round = !second_round;
      simplify(other, target, o);
      EXPECT_NE(m.faces, other.faces) << "the second round did not run";
      simplify(serial, target, serial_only(method));
      EXPECT_NE(m.faces, serial.faces) << "the parallel path did not run";
      EXPECT_LE(m.num_faces(), target);
      EXPECT_GE(m.num_faces(), target * 9 / 10) << "stopped far below the budget";
      expect_clean(m);
      expect_closed(m);  // the blocks stitch exactly
      EXPECT_GT(signed_volume(m), 0);
      // Both ways: the output's faces near the input surface, and no part of the input (a
      // hole, a lost block) far from the output; about as close as the serial path.
      const auto [out_mean, out_max] = distances(centroids(m), in);
      const auto [in_mean, in_max] = distances(in.positions, m);
      const auto [serial_out_mean, serial_out_max] = distances(centroids(serial), in);
      const auto [serial_in_mean, serial_in_max] = distances(in.positions, serial);
      EXPECT_LT(out_mean, 1.2 * serial_out_mean) << target;
      EXPECT_LT(in_mean, 1.2 * serial_in_mean) << target;
      EXPECT_LT(out_max, 2 * serial_out_max) << target;
      EXPECT_LT(in_max, 2 * serial_in_max) << target;
      EXPECT_LT(in_max, 3e-3 * diag) << target;
    }
  }
}

TEST(MeshSimplify, ParallelBlocksDoNotDependOnTheThreadCount) {
  TriMesh in = torus(203, 95, 1.f, 0.35f, 0.01f, 3);  // 38570 faces
  TriMesh other = torus(57, 29, 0.5f, 0.2f, 0.01f, 5);
  translate(other, 0.4f, 0.3f, 1.1f);
  append(in, other);
  const int saved = omp_get_max_threads();
  for (SimplifyMethod method : kMethods) {
    SCOPED_TRACE(name(method));
    auto run = [&in, method](int threads) {
      omp_set_num_threads(threads);
      TriMesh m = in;
      simplify(m, 4001, small_blocks(64, method));
      return m;
    };
    const TriMesh one = run(1), three = run(3), eight = run(8);
    omp_set_num_threads(saved);
    EXPECT_LE(one.num_faces(), 4001);
    EXPECT_GT(one.num_faces(), 3600);
    EXPECT_EQ(one.faces, three.faces);
    EXPECT_EQ(one.positions, three.positions);
    EXPECT_EQ(one.faces, eight.faces);
    EXPECT_EQ(one.positions, eight.positions);
  }
}

TEST(MeshSimplify, ABlockKeepsAVertexThatAnotherBlockUses) {
  // Two tori far apart (one cut between them, two blocks) and a triangle from a vertex of
  // the left one to the right one; the triangle's centroid falls in the right block. Inside
  // the left block that vertex has no open edge, so meshoptimizer's locked border does not
  // keep it: the block locks it itself (a point face; the shaped collapse is handed the
  // block's border vertices as locked) and is simplified; were it lost, the triangle would
  // hang from a vertex the left torus no longer uses.
  TriMesh in = torus(61, 31);
  TriMesh right = torus(61, 31);
  translate(right, 10, 0, 0);
  append(in, right);
  const int32_t v = 15 * 31 + 8;
  const Vec3 at = in.vertex(v);
  const int32_t p = static_cast<int32_t>(in.num_vertices());
  in.positions.insert(in.positions.end(), {10.f, 0.f, 0.5f, 10.f, 0.2f, 0.5f});
  in.faces.insert(in.faces.end(), {v, p, p + 1});
  for (SimplifyMethod method : kMethods) {
    SCOPED_TRACE(name(method));
    TriMesh m = in;
    SimplifyOptions o = small_blocks(2, method);
    o.block_faces = 1;
    o.block_budget = 1;
    const SimplifyStats stats = simplify(m, 701, o);
    EXPECT_EQ(stats.blocks_sent_back, 0);
    EXPECT_LE(m.num_faces(), 701);
    int64_t bridges = 0;
    for (int64_t f = 0; f < m.num_faces(); ++f) {
      int32_t left = -1, far = 0;
      for (int k = 0; k < 3; ++k) {
        const Vec3 q = m.vertex(m.faces[3 * f + k]);
        if (q[0] < 2) left = m.faces[3 * f + k];
        far += q[0] > 5;
      }
      if (left < 0 || far == 0) continue;
      ++bridges;
      EXPECT_EQ(m.vertex(left), at);
      EXPECT_GT(std::count(m.faces.begin(), m.faces.end(), left), 1)
          << "the left torus dropped the triangle's vertex";
    }
    EXPECT_EQ(bridges, 1);
  }
}

// Two tori in the z = 0 plane, the smaller in the other's hole, welded along the circle where
// they touch (the outer's inner equator, the inner's outer equator): each of that circle's nu
// edges has four faces, two running each way, as where two sheets of a remeshed thin part meet.
TriMesh kissing_tori(int nu) {
  const int nv_out = 40, nv_in = 30;
  TriMesh m = torus(nu, nv_out, 1.f, 0.35f);
  const TriMesh inner = torus(nu, nv_in, 0.45f, 0.2f);  // outer equator at 0.65 = 1 - 0.35
  const int32_t base = static_cast<int32_t>(m.num_vertices());
  const size_t first = m.faces.size();
  append(m, inner);
  for (size_t i = first; i < m.faces.size(); ++i) {
    const int32_t v = m.faces[i] - base;
    if (v % nv_in == 0) m.faces[i] = v / nv_in * nv_out + nv_out / 2;
  }
  remove_unreferenced_vertices(m);
  return m;
}

TEST(MeshSimplify, BlocksStitchWhereTwoSheetsMeet) {
  // Block borders crossing the welded circle, whose edges have four faces: the blocks still
  // stitch exactly (no open edge), none is sent back, and the surface stays close.
  const TriMesh in = kissing_tori(193);
  ASSERT_EQ(mesh_stats(in).non_manifold_edges, 193);
  ASSERT_EQ(mesh_stats(in).boundary_edges, 0);
  for (int run = 0; run < 4; ++run) {
    const int32_t blocks = run % 2 == 0 ? 8 : 64;
    const SimplifyMethod method = kMethods[run / 2];
    SCOPED_TRACE(name(method));
    SCOPED_TRACE(blocks);
    TriMesh m = in;
    const SimplifyStats stats = simplify(m, 3001, small_blocks(blocks, method));
    EXPECT_EQ(stats.blocks_sent_back, 0);
    EXPECT_LE(m.num_faces(), 3001);
    EXPECT_GE(m.num_faces(), 2700);
    expect_clean(m);
    EXPECT_EQ(mesh_stats(m).boundary_edges, 0);  // the blocks stitch exactly
    const auto [in_mean, in_max] = distances(in.positions, m);
    EXPECT_LT(in_max, 2e-2 * diagonal(in));
  }
}

TEST(MeshSimplify, DefaultsTakeTheParallelPathOnLargeMeshes) {
  const TriMesh in = torus(523, 401);  // 419446 faces
  for (SimplifyMethod method : {SimplifyMethod::shaped, SimplifyMethod::meshoptimizer}) {
    SCOPED_TRACE(method == SimplifyMethod::shaped ? "shaped" : "meshoptimizer");
    SimplifyOptions defaults, serial_options = serial_only();
    defaults.method = serial_options.method = method;
    TriMesh m = in, serial = in;
    simplify(m, 20001, defaults);
    simplify(serial, 20001, serial_options);
    EXPECT_NE(m.faces, serial.faces);
    EXPECT_LE(m.num_faces(), 20001);
    EXPECT_GE(m.num_faces(), 18000);
    expect_clean(m);
    // No cracks. meshoptimizer itself leaves some edges of four faces on a mesh this size (the
    // serial path too, with neither blocks nor seams), so those are only held to the serial's;
    // the shaped collapse checks the link condition and leaves none.
    const MeshStats s = mesh_stats(m), ss = mesh_stats(serial);
    EXPECT_EQ(s.boundary_edges, 0);
    if (method == SimplifyMethod::shaped) {
      EXPECT_EQ(s.non_manifold_edges, 0);
      EXPECT_EQ(ss.non_manifold_edges, 0);
    } else {
      EXPECT_GT(ss.non_manifold_edges, 0);
      EXPECT_LE(s.non_manifold_edges, ss.non_manifold_edges);
    }
    EXPECT_EQ(s.components, 1);
    const auto [err, area] = torus_error_and_area(m, 1.0, 0.35);
    EXPECT_LT(err, 0.01);
  }
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
  TriMesh ok = torus(9, 5);
  SimplifyOptions o;
  o.max_blocks = 0;
  EXPECT_ERROR(simplify(ok, 10, o), "simplify", "max_blocks");
  o.max_blocks = 4;
  o.block_faces = 0;
  EXPECT_ERROR(simplify(ok, 10, o), "simplify", "block_faces");
  o.block_faces = 4;
  o.block_budget = -1;
  EXPECT_ERROR(simplify(ok, 10, o), "simplify", "block_budget");
  o.block_budget = 4;
  for (double bad : {90.0, 45.0, 180.5, std::nan("")}) {
    o.cap_degrees = bad;
    EXPECT_ERROR(simplify(ok, 10, o), "simplify", "cap_degrees");
  }
}

}  // namespace
}  // namespace s3d::mesh
