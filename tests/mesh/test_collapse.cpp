// mesh/collapse: the shaped edge collapse keeps a flat region's triangles even and unfolded
// (what meshoptimizer's collapse, the reference, does not), never moves a vertex off the input
// vertices, keeps locked and open-border vertices where they may not go, keeps closed
// surfaces closed and manifold, and stops at its error bound.
#include "mesh/collapse.h"

#include <gtest/gtest.h>
#include <meshoptimizer.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "mesh/clean.h"
#include "mesh/clean_test_util.h"

namespace s3d::mesh {
namespace {

using namespace s3d::mesh::test;

// A flat nx x ny grid in z = 0 whose inner vertices are moved in the plane by up to `jitter`
// of a cell (seeded): the plane's quadrics cost nothing for any collapse.
TriMesh jittered_grid(int nx, int ny, float jitter, uint32_t seed) {
  TriMesh m = grid(nx, ny);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-jitter, jitter);
  for (int j = 1; j + 1 < ny; ++j) {
    for (int i = 1; i + 1 < nx; ++i) {
      m.positions[3 * (j * nx + i)] += d(rng);
      m.positions[3 * (j * nx + i) + 1] += d(rng);
    }
  }
  return m;
}

// Quality of face f: 1 for an equilateral triangle, 0 for a flat one.
double quality(const TriMesh& m, int64_t f) {
  const Vec3 a = m.vertex(m.faces[3 * f]), b = m.vertex(m.faces[3 * f + 1]),
             c = m.vertex(m.faces[3 * f + 2]);
  const double l = dot(b - a, b - a) + dot(c - b, c - b) + dot(a - c, a - c);
  return l > 0 ? 2 * std::sqrt(3.0) * length(cross(b - a, c - a)) / l : 0;
}

double quantile_quality(const TriMesh& m, double q) {
  std::vector<double> v(m.num_faces());
  for (int64_t f = 0; f < m.num_faces(); ++f) v[f] = quality(m, f);
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(q * double(v.size() - 1))];
}

// The mesh with `out` (n indices) as its faces, unused vertices dropped.
TriMesh with_faces(const TriMesh& in, const std::vector<unsigned>& out, size_t n) {
  TriMesh m = in;
  m.faces.assign(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(n));
  remove_unreferenced_vertices(m);
  return m;
}

TriMesh shaped(const TriMesh& in, size_t target_faces, float max_error,
               const CollapseOptions& o = {}, const std::vector<uint8_t>* locked = nullptr,
               float* error = nullptr) {
  std::vector<unsigned> out(in.faces.size(), 0xdeadbeefu);  // poisoned
  const size_t n = collapse_edges(out.data(), reinterpret_cast<const unsigned*>(in.faces.data()),
                                  in.faces.size(), in.positions.data(), in.num_vertices(),
                                  locked != nullptr ? locked->data() : nullptr,
                                  3 * target_faces, max_error, o, error);
  EXPECT_EQ(n % 3, 0u);
  EXPECT_LE(n, in.faces.size());
  for (size_t i = 0; i < n; ++i) EXPECT_LT(out[i], size_t(in.num_vertices())) << i;
  return with_faces(in, out, n);
}

TEST(MeshCollapse, AFlatRegionStaysEvenAndUnfolded) {
  const TriMesh in = jittered_grid(61, 47, 0.3f, 5);  // 5520 faces
  const size_t target = 601;
  const TriMesh ours = shaped(in, target, 1e-3f);
  EXPECT_LE(ours.num_faces(), int64_t(target));
  EXPECT_GE(ours.num_faces(), int64_t(target) - 2);
  // meshoptimizer on the same grid, for comparison.
  std::vector<unsigned> out(in.faces.size());
  const size_t n = meshopt_simplify(out.data(), reinterpret_cast<const unsigned*>(in.faces.data()),
                                    in.faces.size(), in.positions.data(), in.num_vertices(),
                                    3 * sizeof(float), 3 * target, 1e-3f, 0, nullptr);
  const TriMesh theirs = with_faces(in, out, n);
  const double ours_q = quantile_quality(ours, 0.1), theirs_q = quantile_quality(theirs, 0.1);
  EXPECT_GT(ours_q, 0.3) << "meshoptimizer's: " << theirs_q;
  EXPECT_GT(ours_q, 1.5 * theirs_q);
  EXPECT_GT(quantile_quality(ours, 0.5), 0.6);
  // Every face still faces +z, and the square keeps its area: its open border only slid along
  // its own straight sides.
  double area = 0;
  for (int64_t f = 0; f < ours.num_faces(); ++f) {
    const Vec3 a = ours.vertex(ours.faces[3 * f]), b = ours.vertex(ours.faces[3 * f + 1]),
               c = ours.vertex(ours.faces[3 * f + 2]);
    const Vec3 nrm = cross(b - a, c - a);
    EXPECT_GT(nrm[2], 0) << "face " << f << " folded over";
    area += 0.5 * nrm[2];
  }
  EXPECT_NEAR(area, 60.0 * 46.0, 1e-3);
}

TEST(MeshCollapse, NoCollapseFoldsAFace) {
  // Pushed as far as the collapse goes, with no error bound, on a grid jittered almost to
  // tangling: every face still faces +z (the turn check refuses the rest).
  const TriMesh in = jittered_grid(41, 31, 0.45f, 11);
  const TriMesh m = shaped(in, 1, 1e9f);
  EXPECT_LT(m.num_faces(), in.num_faces() / 10) << m.num_faces();
  for (int64_t f = 0; f < m.num_faces(); ++f) {
    const Vec3 a = m.vertex(m.faces[3 * f]), b = m.vertex(m.faces[3 * f + 1]),
               c = m.vertex(m.faces[3 * f + 2]);
    EXPECT_GT(cross(b - a, c - a)[2], 0) << "face " << f << " folded over";
  }
}

TEST(MeshCollapse, AStarsCentreStaysWhereEveryCollapseWouldFold) {
  // A flat fan around the origin over a 12-cornered star (radii 1 and 0.3 in turn), the star
  // locked: moving the centre onto any of its corners turns some face over, so nothing
  // collapses.
  TriMesh m;
  m.positions = {0, 0, 0};
  for (int k = 0; k < 12; ++k) {
    const float a = 0.523599f * k, r = k % 2 == 0 ? 1.f : 0.3f;
    m.positions.insert(m.positions.end(), {r * std::cos(a), r * std::sin(a), 0.f});
    m.faces.insert(m.faces.end(), {0, 1 + k, 1 + (k + 1) % 12});
  }
  std::vector<uint8_t> locked(13, 1);
  locked[0] = 0;
  const TriMesh out = shaped(m, 1, 1e9f, {}, &locked);
  EXPECT_EQ(out.faces, m.faces);
}

TEST(MeshCollapse, AClosedSurfaceStaysClosedAndManifold) {
  for (float noise : {0.f, 0.01f}) {
    const TriMesh in = torus(97, 41, 1.f, 0.35f, noise, 3);  // 7954 faces
    const TriMesh m = shaped(in, 999, 1.f);
    EXPECT_LE(m.num_faces(), 999);
    EXPECT_GE(m.num_faces(), 997);
    const MeshStats s = mesh_stats(m);
    EXPECT_EQ(s.boundary_edges, 0) << noise;
    EXPECT_EQ(s.non_manifold_edges, 0) << noise;
    EXPECT_EQ(s.components, 1) << noise;
    EXPECT_EQ(s.degenerate_faces, 0) << noise;
    EXPECT_EQ(inconsistent_edges(m), 0) << noise;
    EXPECT_GT(signed_volume(m), 0) << noise;
  }
}

TEST(MeshCollapse, LockedVerticesStayAndTheBorderLocks) {
  const TriMesh in = torus(53, 29, 1.f, 0.35f, 0.005f, 9);
  std::vector<uint8_t> locked(in.num_vertices(), 0);
  std::mt19937 rng(4);
  for (uint8_t& l : locked) l = rng() % 7 == 0;
  std::vector<unsigned> out(in.faces.size(), 0xdeadbeefu);
  const size_t n = collapse_edges(out.data(), reinterpret_cast<const unsigned*>(in.faces.data()),
                                  in.faces.size(), in.positions.data(), in.num_vertices(),
                                  locked.data(), 3 * 501, 1.f, CollapseOptions{}, nullptr);
  std::vector<uint8_t> used(in.num_vertices(), 0);
  for (size_t i = 0; i < n; ++i) used[out[i]] = 1;
  for (int64_t v = 0; v < in.num_vertices(); ++v) {
    if (locked[v]) {
      EXPECT_TRUE(used[v]) << "locked vertex " << v << " was collapsed";
    }
  }
  // An open grid with lock_border: its outline stays vertex for vertex.
  const TriMesh g = jittered_grid(23, 17, 0.2f, 2);
  CollapseOptions o;
  o.lock_border = true;
  const TriMesh m = shaped(g, 150, 1.f, o);
  int64_t outline = 0;
  for (int64_t v = 0; v < m.num_vertices(); ++v) {
    const float x = m.positions[3 * v], y = m.positions[3 * v + 1];
    outline += x == 0.f || y == 0.f || x == 22.f || y == 16.f;
  }
  EXPECT_EQ(outline, 2 * (23 + 17) - 4);
}

TEST(MeshCollapse, StopsAtItsErrorBound) {
  // A noisy torus: collapses cost something everywhere. A tight bound stops above the target,
  // and the error reported is within it; a loose one reaches the target.
  const TriMesh in = torus(91, 37, 1.f, 0.35f, 0.01f, 3);
  float tight_error = -1, loose_error = -1;
  const TriMesh tight = shaped(in, 500, 2e-3f, {}, nullptr, &tight_error);
  const TriMesh loose = shaped(in, 500, 1.f, {}, nullptr, &loose_error);
  EXPECT_GT(tight.num_faces(), 500);
  EXPECT_LT(tight.num_faces(), in.num_faces());
  EXPECT_GT(tight_error, 0.f);
  EXPECT_LE(tight_error, 2e-3f);
  EXPECT_LE(loose.num_faces(), 500);
  EXPECT_GT(loose_error, tight_error);
  // Nothing within a zero bound on a noisy surface: the input comes back whole, in order.
  const TriMesh none = shaped(in, 500, 0.f);
  EXPECT_EQ(none.num_faces(), in.num_faces());
}

TEST(MeshCollapse, EdgesOfThreeFacesAndRepeatedVerticesStay) {
  // Three fins on one edge (0, 1), each a strip of faces; and a point face on vertex 2.
  TriMesh m;
  m.positions = {0, 0, 0, 0, 0, 4};
  for (int fin = 0; fin < 3; ++fin) {
    const float a = 2.0944f * fin;
    for (int k = 0; k <= 4; ++k) {
      for (float r : {1.f, 2.f}) {
        m.positions.insert(m.positions.end(), {r * std::cos(a), r * std::sin(a), float(k)});
      }
    }
    const int32_t base = 2 + 10 * fin;
    m.faces.insert(m.faces.end(), {0, 1, base});
    for (int k = 0; k < 4; ++k) {
      const int32_t a0 = base + 2 * k, b0 = a0 + 1, a1 = a0 + 2, b1 = a0 + 3;
      m.faces.insert(m.faces.end(), {a0, b0, b1, a0, b1, a1});
    }
  }
  m.faces.insert(m.faces.end(), {2, 2, 2});
  const TriMesh out = shaped(m, 1, 1e9f);
  bool has01 = false, point = false;
  for (int64_t f = 0; f < out.num_faces(); ++f) {
    const int32_t* t = &out.faces[3 * f];
    point |= t[0] == t[1] && t[1] == t[2];
    for (int k = 0; k < 3; ++k) {
      has01 |= std::min(t[k], t[(k + 1) % 3]) == 0 && std::max(t[k], t[(k + 1) % 3]) == 1;
    }
  }
  EXPECT_TRUE(has01) << "the edge of three faces was collapsed";
  EXPECT_TRUE(point) << "the face with a repeated vertex was dropped";
  EXPECT_LT(out.num_faces(), m.num_faces());  // the fins' strips themselves do simplify
}

}  // namespace
}  // namespace s3d::mesh
