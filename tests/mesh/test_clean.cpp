// mesh/clean: each pass against a brute-force reference or a stated property, on small odd
// meshes (holes, pinches, non-manifold fans, several components, flipped and degenerate faces).
#include "mesh/clean.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <tuple>

#include "expect_error.h"
#include "mesh/clean_test_util.h"

namespace s3d::mesh {
namespace {

using namespace s3d::mesh::test;

// A random soup for the reference comparisons: a noisy torus with some faces duplicated
// (rotated or reversed), some removed, some repeated-index faces and a few glued onto
// existing edges (non-manifold), then shuffled.
TriMesh messy_mesh(uint32_t seed, int nu = 9, int nv = 7) {
  TriMesh m = torus(nu, nv, 1.f, 0.35f, 0.05f, seed);
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int64_t> face(0, m.num_faces() - 1);
  std::vector<int64_t> drop;
  const int n = std::max(1, nu * nv / 20);
  for (int i = 0; i < n; ++i) drop.push_back(face(rng));
  std::vector<int32_t> extra;
  for (int i = 0; i < 2 * n; ++i) {
    const int64_t f = face(rng);
    const int32_t a = m.faces[3 * f], b = m.faces[3 * f + 1], c = m.faces[3 * f + 2];
    switch (i % 3) {
      case 0: extra.insert(extra.end(), {b, c, a}); break;  // rotated duplicate
      case 1: extra.insert(extra.end(), {a, c, b}); break;  // reversed duplicate
      default: extra.insert(extra.end(), {a, b, a}); break; // repeated index
    }
  }
  for (int i = 0; i < n; ++i) {  // a new vertex hung on an existing edge
    const int64_t f = face(rng);
    const int32_t v = static_cast<int32_t>(m.num_vertices());
    const Vec3 p = m.vertex(m.faces[3 * f]);
    m.positions.insert(m.positions.end(), {p[0] + 0.1f, p[1] - 0.2f, p[2] + 0.3f});
    extra.insert(extra.end(), {m.faces[3 * f + 1], m.faces[3 * f], v});
  }
  remove_face_list(m, drop);
  m.faces.insert(m.faces.end(), extra.begin(), extra.end());
  // Shuffle the faces so that duplicates come before and after their originals.
  std::vector<std::array<int32_t, 3>> tri(m.num_faces());
  for (int64_t f = 0; f < m.num_faces(); ++f) {
    tri[f] = {m.faces[3 * f], m.faces[3 * f + 1], m.faces[3 * f + 2]};
  }
  std::shuffle(tri.begin(), tri.end(), rng);
  m.faces.clear();
  for (const auto& t : tri) m.faces.insert(m.faces.end(), t.begin(), t.end());
  return m;
}

TEST(MeshClean, RemoveDegenerateFacesKeepsOnlyProperFaces) {
  TriMesh m;
  m.positions = {0, 0, 0,  1, 0, 0,  0, 1, 0,          // 0-2: a unit right triangle
                 2, 0, 0,                               // 3: collinear with 0, 1
                 0.5f, 2e-26f, 0,                       // 4: tiny sliver over 0-1
                 1e-13f, 0, 0,  0, 1e-13f, 0,           // 5, 6: tiny but well shaped
                 0.5f, 1e-10f, 0,                       // 7: thin sliver, area 5e-11
                 9, 9, 9};                              // 8: used by dropped faces only
  m.faces = {0, 1, 2,   // kept
             0, 1, 3,   // collinear: zero area
             0, 1, 4,   // area 1e-26 < 1e-24 and tiny against its edge: dropped
             0, 5, 6,   // area 5e-27 < 1e-24 but not thin: kept (both bounds must hold)
             0, 1, 7,   // thin but area 5e-11 >= 1e-24: kept
             0, 0, 8,   // repeated index
             8, 2, 8};  // repeated index
  remove_degenerate_faces(m);
  ASSERT_EQ(m.num_faces(), 3);
  // Vertices 3, 4 and 8 are left unused and removed; the rest keep their order.
  const std::vector<float> expect_pos = {0, 0, 0, 1, 0, 0, 0, 1, 0, 1e-13f, 0, 0,
                                         0, 1e-13f, 0, 0.5f, 1e-10f, 0};
  EXPECT_EQ(m.positions, expect_pos);
  EXPECT_EQ(m.faces, (std::vector<int32_t>{0, 1, 2, 0, 3, 4, 0, 1, 5}));
  EXPECT_EQ(mesh_stats(m).degenerate_faces, 0);

  // A larger absolute bound drops the small well-shaped face; a relative bound of 0 keeps
  // every face with distinct indices.
  TriMesh a = m;
  remove_degenerate_faces(a, 1e-20, 1.0);
  EXPECT_EQ(a.num_faces(), 2);
  TriMesh b = m;
  remove_degenerate_faces(b, 1.0, 0.0);
  EXPECT_EQ(b.num_faces(), 3);
}

TEST(MeshClean, RemoveDuplicateFacesMatchesQuadraticReference) {
  for (uint32_t seed : {3u, 8u, 21u}) {
    TriMesh m = messy_mesh(seed);
    // Reference: a face goes when an earlier face has the same vertex multiset.
    std::vector<int32_t> expect;
    auto key = [&m](int64_t f) {
      std::array<int32_t, 3> k{m.faces[3 * f], m.faces[3 * f + 1], m.faces[3 * f + 2]};
      std::sort(k.begin(), k.end());
      return k;
    };
    int64_t dups = 0;
    for (int64_t f = 0; f < m.num_faces(); ++f) {
      bool dup = false;
      for (int64_t g = 0; g < f && !dup; ++g) dup = key(g) == key(f);
      dups += dup;
      if (!dup) expect.insert(expect.end(), m.faces.begin() + 3 * f, m.faces.begin() + 3 * f + 3);
    }
    ASSERT_GT(dups, 0);
    const std::vector<float> pos = m.positions;
    remove_duplicate_faces(m);
    // No vertex loses its last face (duplicates share their vertices), so indices stay.
    EXPECT_EQ(m.faces, expect) << "seed " << seed;
    EXPECT_EQ(m.positions, pos);
  }
}

TEST(MeshClean, RemoveUnreferencedVerticesRenumbersInOrder) {
  TriMesh m;
  for (int v = 0; v < 9; ++v) m.positions.insert(m.positions.end(), {float(v), float(v * v), -1.f});
  m.faces = {7, 2, 5, 5, 2, 8, 0, 7, 5};
  std::vector<int32_t> old_of_new(13, -77);  // poisoned: every entry must be rewritten
  remove_unreferenced_vertices(m, &old_of_new);
  EXPECT_EQ(old_of_new, (std::vector<int32_t>{0, 2, 5, 7, 8}));
  EXPECT_EQ(m.faces, (std::vector<int32_t>{3, 1, 2, 2, 1, 4, 0, 3, 2}));
  ASSERT_EQ(m.num_vertices(), 5);
  for (int64_t v = 0; v < 5; ++v) {
    const float old = float(old_of_new[v]);
    EXPECT_EQ(m.vertex(v), (Vec3{old, old * old, -1.f}));
  }
  // Nothing unreferenced: unchanged, identity map.
  const TriMesh before = m;
  remove_unreferenced_vertices(m, &old_of_new);
  EXPECT_EQ(m.faces, before.faces);
  EXPECT_EQ(m.positions, before.positions);
  EXPECT_EQ(old_of_new, (std::vector<int32_t>{0, 1, 2, 3, 4}));
}

TEST(MeshClean, FillHolesClosesTheOpenCube) {
  TriMesh m = cube();
  remove_face_list(m, {10, 11});  // the z = 1 side: a square hole of perimeter 4
  ASSERT_EQ(mesh_stats(m).boundary_edges, 4);
  TriMesh too_small = m;
  EXPECT_EQ(fill_holes(too_small, 3.999), 0);
  EXPECT_EQ(too_small.faces, m.faces);

  EXPECT_EQ(fill_holes(m, 4.0), 1);  // at most the bound: filled
  ASSERT_EQ(m.num_faces(), 14);
  ASSERT_EQ(m.num_vertices(), 9);
  EXPECT_EQ(m.vertex(8), (Vec3{0.5f, 0.5f, 1.f}));
  const MeshStats s = mesh_stats(m);
  EXPECT_EQ(s.boundary_edges, 0);
  EXPECT_EQ(s.non_manifold_edges, 0);
  EXPECT_EQ(s.components, 1);
  EXPECT_EQ(inconsistent_edges(m), 0);
  EXPECT_DOUBLE_EQ(signed_volume(m), 1.0);  // outward, like the cube's other faces
  for (int64_t f = 10; f < 14; ++f) EXPECT_EQ(m.faces[3 * f + 2], 8);
  // Closed now: a second pass finds nothing.
  EXPECT_EQ(fill_holes(m, 1e9), 0);
}

TEST(MeshClean, FillHolesPicksHolesByPerimeterAndSplitsPinches) {
  TriMesh m = grid(11, 9);
  auto cell = [](int i, int j) { return int64_t(2 * (j * 10 + i)); };
  // Isolated holes: one cell (perimeter 4), two cells side by side (6); a pinch: cells (6, 5)
  // and (7, 6) meet at one vertex (two loops of 4 through it).
  remove_face_list(m, {cell(1, 1), cell(1, 1) + 1, cell(3, 2), cell(3, 2) + 1, cell(4, 2),
                       cell(4, 2) + 1, cell(6, 5), cell(6, 5) + 1, cell(7, 6), cell(7, 6) + 1});
  const int64_t outer = 2 * 10 + 2 * 8;
  ASSERT_EQ(count_edges(m, 1, 1), outer + 4 + 6 + 8);
  TriMesh a = m;
  EXPECT_EQ(fill_holes(a, 5.0), 3);  // the 6-edge hole stays
  EXPECT_EQ(count_edges(a, 1, 1), outer + 6);
  EXPECT_EQ(inconsistent_edges(a), 0);
  EXPECT_EQ(count_edges(a, 3, 1000), 0);

  EXPECT_EQ(fill_holes(m, 7.0), 4);  // the outer rim (perimeter 36) stays
  EXPECT_EQ(count_edges(m, 1, 1), outer);
  EXPECT_EQ(inconsistent_edges(m), 0);
  EXPECT_EQ(m.num_vertices(), 11 * 9 + 4);
  // The pinch vertex (7, 6) was not merged away: each of its loops got its own centre.
  EXPECT_EQ(m.vertex(99 + 2), (Vec3{6.5f, 5.5f, 0.f}));
  EXPECT_EQ(m.vertex(99 + 3), (Vec3{7.5f, 6.5f, 0.f}));
}

TEST(MeshClean, FillHolesKeepsLoopsDirectedThroughPinches) {
  // Four cells removed around a kept one, each touching the next at one of its corners: four
  // vertices where four boundary edges meet. Whatever loops the walk picks, each must run
  // along the rim's direction, or the fans around it would disagree with each other.
  // Going straight through such a vertex (into the opposite edge) would mix directions; the
  // vertices are renumbered at random so that index order alone would sometimes do it.
  for (uint32_t seed = 0; seed < 12; ++seed) {
    TriMesh m = grid(8, 6);
    auto cell = [](int i, int j) { return int64_t(2 * (j * 7 + i)); };
    remove_face_list(m, {cell(2, 2), cell(2, 2) + 1, cell(4, 2), cell(4, 2) + 1, cell(3, 1),
                         cell(3, 1) + 1, cell(3, 3), cell(3, 3) + 1});
    std::vector<int32_t> perm(m.num_vertices());
    std::iota(perm.begin(), perm.end(), 0);
    std::mt19937 rng(seed);
    std::shuffle(perm.begin(), perm.end(), rng);
    TriMesh p = m;
    for (int64_t v = 0; v < m.num_vertices(); ++v) {
      for (int c = 0; c < 3; ++c) p.positions[3 * perm[v] + c] = m.positions[3 * v + c];
    }
    for (int32_t& v : p.faces) v = perm[v];
    const int64_t outer = 2 * 7 + 2 * 5;
    ASSERT_EQ(count_edges(p, 1, 1), outer + 16);
    const int64_t filled = fill_holes(p, 16.0);
    EXPECT_GE(filled, 2);
    EXPECT_EQ(count_edges(p, 1, 1), outer) << "seed " << seed;
    EXPECT_EQ(inconsistent_edges(p), 0) << "seed " << seed;
    EXPECT_EQ(count_edges(p, 3, 1000), 0) << "seed " << seed;
  }
}

TEST(MeshClean, FillHolesFollowsEachNeighbourWhenWindingIsMixed) {
  TriMesh m = grid(7, 7);
  auto cell = [](int i, int j) { return int64_t(2 * (j * 6 + i)); };
  remove_face_list(m, {cell(3, 3), cell(3, 3) + 1});
  const int64_t F = m.num_faces();
  std::mt19937 rng(5);
  for (int64_t f = 0; f < F; ++f) {
    if (rng() % 2) std::swap(m.faces[3 * f + 1], m.faces[3 * f + 2]);
  }
  const TriMesh before = m;
  EXPECT_EQ(fill_holes(m, 4.0), 1);
  ASSERT_EQ(m.num_faces(), F + 4);
  // Each new face runs its rim edge opposite to the face that had it.
  for (int64_t f = F; f < F + 4; ++f) {
    const int a = m.faces[3 * f], b = m.faces[3 * f + 1];
    int opposite = 0;
    for (int64_t g = 0; g < F; ++g) {
      for (int k = 0; k < 3; ++k) {
        opposite += before.faces[3 * g + k] == b && before.faces[3 * g + (k + 1) % 3] == a;
      }
    }
    EXPECT_EQ(opposite, 1) << "new face " << f;
  }
  EXPECT_EQ(count_edges(m, 1, 1), 4 * 6);
}

TEST(MeshClean, FillHolesSkipsWhatCannotClose) {
  // Three faces on edge 0-1: that edge is no boundary, so vertices 0 and 1 each end three
  // boundary edges. One loop of four closes; the last two edges (a path) cannot.
  TriMesh m;
  m.positions = {0, 0, 0, 1, 0, 0, 0.5f, 1, 0, 0.5f, -1, 0, 0.5f, 0, 1};
  m.faces = {0, 1, 2, 1, 0, 3, 0, 1, 4};
  EXPECT_EQ(fill_holes(m, 100.0), 1);
  EXPECT_EQ(m.num_faces(), 3 + 4);
  EXPECT_EQ(count_edges(m, 1, 1), 2);
  EXPECT_EQ(count_edges(m, 3, 3), 1);
}

double total_area(const TriMesh& m) {
  double a = 0;
  for (int64_t f = 0; f < m.num_faces(); ++f) a += face_area(m, f);
  return a;
}

// A square of two triangles over the x axis, (b, a, d) above and two below meeting at c, the
// midpoint of ab, plus the flat face (a, b, c) in the slit between them.
TriMesh slit_square() {
  TriMesh m;
  m.positions = {0, 0, 0, 2, 0, 0, 1, 0, 0, 1, 1, 0, 1, -1, 0};  // a, b, c, d, e
  m.faces = {0, 1, 2,   // flat: c inside ab
             1, 0, 3,   // (b, a, d)
             0, 2, 4,   // (a, c, e)
             2, 1, 4};  // (c, b, e)
  return m;
}

TEST(MeshClean, FlipFlatFacesClosesTheSlit) {
  TriMesh m = slit_square();
  ASSERT_EQ(mesh_stats(m).degenerate_faces, 1);
  TriMesh removed = m;
  remove_degenerate_faces(removed);
  ASSERT_EQ(mesh_stats(removed).boundary_edges, 7);  // removing it opens the slit
  EXPECT_EQ(flip_flat_faces(m), 1);
  const MeshStats s = mesh_stats(m);
  EXPECT_EQ(s.degenerate_faces, 0);
  EXPECT_EQ(s.boundary_edges, 4);  // the square's outline only
  EXPECT_EQ(s.non_manifold_edges, 0);
  EXPECT_EQ(inconsistent_edges(m), 0);
  EXPECT_EQ(m.num_faces(), 4);
  EXPECT_NEAR(total_area(m), 2.0, 1e-12);
  EXPECT_EQ(m.positions, slit_square().positions);  // no vertex moves
}

TEST(MeshClean, FlipFlatFacesLeavesWhatCannotFlip) {
  {  // the edge (c, d) is there already: a flip would make it non-manifold
    TriMesh m = slit_square();
    m.positions.insert(m.positions.end(), {1, 2, 0});  // f, above d
    m.faces.insert(m.faces.end(), {2, 3, 5});
    const TriMesh before = m;
    EXPECT_EQ(flip_flat_faces(m), 0);
    EXPECT_EQ(m.faces, before.faces);
  }
  {  // d on the line too: the flipped faces would be flat
    TriMesh m = slit_square();
    m.positions[3 * 3 + 1] = 0;
    m.positions[3 * 3] = 3;
    const TriMesh before = m;
    EXPECT_EQ(flip_flat_faces(m), 0);
    EXPECT_EQ(m.faces, before.faces);
  }
  {  // no face across the long edge
    TriMesh m = slit_square();
    m.faces.erase(m.faces.begin() + 3, m.faces.begin() + 6);
    const TriMesh before = m;
    EXPECT_EQ(flip_flat_faces(m), 0);
    EXPECT_EQ(m.faces, before.faces);
  }
}

// A cap: the slit square's face (a, b, c) with c lifted off the line ab (out of the square's
// plane, so the face stands steep, as simplification leaves them on a remeshed surface). Its
// largest angle is about 176.6 degrees: a cap at 175 (the default), not at 180 (flat only).
TriMesh capped_square(float lift) {
  TriMesh m = slit_square();
  m.positions[3 * 2 + 2] = lift;
  return m;
}

TEST(MeshClean, FlipCapsTurnsACapIntoTheFaceAcross) {
  TriMesh m = capped_square(0.03f);
  ASSERT_EQ(mesh_stats(m).degenerate_faces, 0);  // no flat face: only the cap rule takes it
  TriMesh flat_only = m;
  EXPECT_EQ(flip_flat_faces(flat_only, 180), 0);
  EXPECT_EQ(flat_only.faces, m.faces);
  EXPECT_EQ(flip_flat_faces(m, 175), 1);
  const MeshStats s = mesh_stats(m);
  EXPECT_EQ(s.degenerate_faces, 0);
  EXPECT_EQ(s.boundary_edges, 4);
  EXPECT_EQ(s.non_manifold_edges, 0);
  EXPECT_EQ(inconsistent_edges(m), 0);
  EXPECT_EQ(m.num_faces(), 4);
  EXPECT_EQ(m.positions, capped_square(0.03f).positions);  // no vertex moves
  // Every face now faces as the square does (-z): the steep face is gone.
  for (int64_t f = 0; f < m.num_faces(); ++f) {
    const int32_t* t = &m.faces[3 * f];
    const float* p = m.positions.data();
    const float ux = p[3 * t[1]] - p[3 * t[0]], uy = p[3 * t[1] + 1] - p[3 * t[0] + 1];
    const float vx = p[3 * t[2]] - p[3 * t[0]], vy = p[3 * t[2] + 1] - p[3 * t[0] + 1];
    EXPECT_LT(ux * vy - uy * vx, 0.f) << "face " << f;
  }
}

TEST(MeshClean, FlipCapsLeavesACapWhoseFlipWouldTurnAFace) {
  // The face across is low (d near b, just off the line): flipping to (c, d) would stand the
  // new faces up at about 70 degrees from it, so the cap stays.
  TriMesh m = capped_square(0.03f);
  m.positions[3 * 3] = 1.98f;
  m.positions[3 * 3 + 1] = 0.02f;
  const TriMesh before = m;
  EXPECT_EQ(flip_flat_faces(m, 175), 0);
  EXPECT_EQ(m.faces, before.faces);
  // A higher lift is no cap at 175 degrees (its largest angle is about 174.3).
  TriMesh low = capped_square(0.05f);
  EXPECT_EQ(flip_flat_faces(low, 175), 0);
}

TEST(MeshClean, FlipCapsRefusesAnAngleOutOfRange) {
  TriMesh m = capped_square(0.03f);
  EXPECT_ERROR(flip_flat_faces(m, 90), "cap_degrees must be in (90, 180]");
  EXPECT_ERROR(flip_flat_faces(m, 180.5), "cap_degrees must be in (90, 180]");
}

TEST(MeshClean, FlipFlatFacesOnATorusWithSlits) {
  // A closed noisy torus, odd-sized, with flat faces put into it: face (a, b, x) split at the
  // midpoint c of ab into (a, c, x) and (c, b, x), and the flat (a, b, c) filling the slit
  // against the face across ab. Every one flips: closed again, no flat face, the area kept.
  for (uint32_t seed : {1u, 2u, 3u}) {
    SCOPED_TRACE(seed);
    TriMesh m = torus(37, 23, 1.f, 0.35f, 0.02f, seed);
    // On a grid of 2^-10, so that the midpoint of two vertices is exact and on their line.
    for (float& p : m.positions) p = std::round(p * 1024.f) / 1024.f;
    const double area = total_area(m);
    std::mt19937 rng(seed);
    std::vector<uint8_t> touched(m.num_faces(), 0);
    int64_t flat = 0;
    const int64_t F = m.num_faces();
    for (int64_t f = rng() % 7; f < F; f += 5 + rng() % 11) {
      // Faces 2i and 2i + 1 share a grid cell; the cell's diagonal is their shared edge. Take
      // an edge of f whose face across is untouched, through the star of its first vertex.
      const int k = static_cast<int>(rng() % 3);
      const int32_t a = m.faces[3 * f + k], b = m.faces[3 * f + (k + 1) % 3],
                    x = m.faces[3 * f + (k + 2) % 3];
      int64_t across = -1;
      for (int64_t g = 0; g < F; ++g) {
        const int32_t* t = &m.faces[3 * g];
        for (int j = 0; j < 3; ++j)
          if (t[j] == b && t[(j + 1) % 3] == a) across = g;
      }
      if (touched[f] || across < 0 || touched[across]) continue;
      touched[f] = touched[across] = 1;
      const int32_t c = static_cast<int32_t>(m.num_vertices());
      for (int j = 0; j < 3; ++j) {
        m.positions.push_back(0.5f * (m.positions[3 * a + j] + m.positions[3 * b + j]));
      }
      m.faces[3 * f + 0] = a, m.faces[3 * f + 1] = c, m.faces[3 * f + 2] = x;
      m.faces.insert(m.faces.end(), {c, b, x, a, b, c});
      ++flat;
    }
    ASSERT_GT(flat, 20);
    const MeshStats before = mesh_stats(m);
    ASSERT_EQ(before.degenerate_faces, flat);
    ASSERT_EQ(before.boundary_edges, 0);
    const double area_before = total_area(m);
    EXPECT_EQ(flip_flat_faces(m), flat);
    const MeshStats s = mesh_stats(m);
    EXPECT_EQ(s.degenerate_faces, 0);
    EXPECT_EQ(s.boundary_edges, 0);
    EXPECT_EQ(s.non_manifold_edges, 0);
    EXPECT_EQ(inconsistent_edges(m), 0);
    EXPECT_NEAR(total_area(m), area_before, 1e-9 * area);
  }
}

TEST(MeshClean, RepairNonManifoldEdgesSplitsAThreeFaceFan) {
  TriMesh m;
  m.positions = {0, 0, 0, 1, 0, 0, 0.5f, 1, 0, 0.5f, -1, 0, 0.5f, 0, 1};
  m.faces = {0, 1, 2, 1, 0, 3, 0, 1, 4};
  ASSERT_EQ(mesh_stats(m).non_manifold_edges, 1);
  const auto corners = face_positions(m);
  const std::vector<int32_t> faces_before = m.faces;
  repair_non_manifold_edges(m);
  const MeshStats s = mesh_stats(m);
  EXPECT_EQ(s.non_manifold_edges, 0);
  EXPECT_EQ(s.boundary_edges, 9);
  // Every corner keeps its position; 0 and 1 keep their index in the first face.
  EXPECT_EQ(face_positions(m), corners);
  EXPECT_EQ(m.num_vertices(), 5 + 4);
  EXPECT_EQ(m.faces[0], 0);
  EXPECT_EQ(m.faces[1], 1);
  for (int32_t v : m.faces) EXPECT_TRUE(v >= 0 && v < m.num_vertices());
  EXPECT_NE(m.faces, faces_before);
}

TEST(MeshClean, RepairNonManifoldEdgesSeparatesTwoCubesOnAnEdge) {
  // Two cubes sharing the edge x = 1, y = 1 (4 faces on it): each cube stays closed.
  TriMesh m = cube();
  TriMesh c2 = cube();
  translate(c2, 1, 1, 0);
  append(m, c2);
  // Weld c2's corners 0 (1,1,0) and 4 (1,1,1) onto the first cube's 3 and 7.
  for (int32_t& v : m.faces) {
    if (v == 8) v = 3;
    if (v == 12) v = 7;
  }
  remove_unreferenced_vertices(m);
  ASSERT_EQ(m.num_vertices(), 14);
  ASSERT_EQ(mesh_stats(m).non_manifold_edges, 1);
  const auto corners = face_positions(m);
  repair_non_manifold_edges(m);
  EXPECT_EQ(face_positions(m), corners);
  EXPECT_EQ(m.num_vertices(), 16);
  const MeshStats s = mesh_stats(m);
  EXPECT_EQ(s.non_manifold_edges, 0);
  EXPECT_EQ(s.boundary_edges, 0);  // each cube kept its faces around the old edge
  EXPECT_EQ(s.components, 2);
  EXPECT_EQ(inconsistent_edges(m), 0);
}

TEST(MeshClean, RepairNonManifoldEdgesOnRandomMeshes) {
  for (uint32_t seed : {4u, 9u}) {
    TriMesh m = messy_mesh(seed);
    remove_degenerate_faces(m);
    remove_duplicate_faces(m);
    ASSERT_GT(mesh_stats(m).non_manifold_edges, 0);
    const auto corners = face_positions(m);
    repair_non_manifold_edges(m);
    EXPECT_EQ(face_positions(m), corners);
    EXPECT_EQ(count_edges(m, 3, 1000), 0) << "seed " << seed;
    // Nothing left to split: a second pass changes nothing.
    const TriMesh once = m;
    repair_non_manifold_edges(m);
    EXPECT_EQ(m.faces, once.faces);
    EXPECT_EQ(m.positions, once.positions);
  }
  // A closed manifold is left exactly as it was.
  TriMesh t = torus(7, 5);
  const TriMesh before = t;
  repair_non_manifold_edges(t);
  EXPECT_EQ(t.faces, before.faces);
  EXPECT_EQ(t.positions, before.positions);
}

TEST(MeshClean, RemoveSmallComponentsByArea) {
  // A cube (area 6), a 2 x 1 grid (area 2), a 5 x 4 grid (area 20) and a triangle (area
  // 0.5) that touches the cube only at a vertex, which does not join them.
  TriMesh m = cube();
  TriMesh g1 = grid(3, 2), g2 = grid(6, 5);
  translate(g1, 5, 0, 0);
  translate(g2, -9, 0, 0);
  append(m, g1);
  append(m, g2);
  m.positions.insert(m.positions.end(), {1, 1, 2, 1, 2, 2});
  const int32_t v = static_cast<int32_t>(m.num_vertices());
  m.faces.insert(m.faces.end(), {7, v - 2, v - 1});  // shares only vertex 7 with the cube
  const std::vector<int> comp = brute_components(m);
  std::map<int, double> area;
  for (int64_t f = 0; f < m.num_faces(); ++f) area[comp[f]] += face_area(m, f);
  ASSERT_EQ(area.size(), 4u);
  EXPECT_EQ(mesh_stats(m).components, 4);
  for (double min_area : {0.25, 1.0, 2.0, 4.0, 100.0}) {
    std::vector<std::array<float, 9>> expect;
    const auto all = face_positions(m);
    for (int64_t f = 0; f < m.num_faces(); ++f) {
      if (area[comp[f]] >= min_area) expect.push_back(all[f]);
    }
    TriMesh r = m;
    remove_small_components(r, min_area);
    EXPECT_EQ(face_positions(r), expect) << "min_area " << min_area;
    // Indexed: no vertex is left without a face.
    std::vector<int> used(r.num_vertices(), 0);
    for (int32_t w : r.faces) used[w] = 1;
    EXPECT_EQ(std::count(used.begin(), used.end(), 0), 0);
  }
}

TEST(MeshClean, UnifyOrientationRestoresRandomFlips) {
  TriMesh m = torus(11, 7, 1.f, 0.4f, 0.05f, 7);
  TriMesh other = cube();
  translate(other, 5, 0, 0);
  append(m, other);
  const TriMesh good = m;
  std::mt19937 rng(11);
  int64_t flipped = 0;
  for (int64_t f = 0; f < m.num_faces(); ++f) {
    // Each component's first face (0 and the cube's 154) stays: BFS keeps it as it is.
    if (f == 0 || f == 154 || rng() % 3 != 0) continue;
    std::swap(m.faces[3 * f + 1], m.faces[3 * f + 2]);
    ++flipped;
  }
  ASSERT_GT(flipped, 20);
  ASSERT_GT(inconsistent_edges(m), 0);
  unify_orientation(m);
  EXPECT_EQ(m.faces, good.faces);
  EXPECT_EQ(inconsistent_edges(m), 0);
  EXPECT_GT(signed_volume(m), 0);

  // Flipping the first face flips its whole component instead.
  TriMesh c = cube();
  std::swap(c.faces[1], c.faces[2]);
  unify_orientation(c);
  EXPECT_EQ(inconsistent_edges(c), 0);
  EXPECT_DOUBLE_EQ(signed_volume(c), -1.0);
}

TEST(MeshClean, UnifyOrientationTerminatesOnAMobiusStrip) {
  // A strip of 9 quads closed with a half twist: no consistent winding exists.
  TriMesh m;
  const int n = 9;
  for (int i = 0; i < n; ++i) {
    const double u = 2 * 3.14159265358979 * i / n;
    for (int s : {-1, 1}) {
      const double w = 0.3 * s;
      m.positions.insert(m.positions.end(),
                         {float((1 + w * std::cos(u / 2)) * std::cos(u)),
                          float((1 + w * std::cos(u / 2)) * std::sin(u)),
                          float(w * std::sin(u / 2))});
    }
  }
  for (int i = 0; i < n; ++i) {
    const int a = 2 * i, b = 2 * i + 1;
    int c = 2 * ((i + 1) % n), d = c + 1;
    if (i == n - 1) std::swap(c, d);  // the twist
    m.faces.insert(m.faces.end(), {a, c, d, a, d, b});
  }
  ASSERT_EQ(count_edges(m, 2, 2), 2 * n);  // the rungs and the diagonals
  unify_orientation(m);
  // Every face but across one edge is consistent.
  EXPECT_EQ(inconsistent_edges(m), 1);
}

TEST(MeshClean, VertexNormalsAreAreaWeighted) {
  TriMesh m = messy_mesh(6);
  m.positions.insert(m.positions.end(), {5, 5, 5});  // unused: zero normal
  const std::vector<float> n = vertex_normals(m);
  ASSERT_EQ(n.size(), m.positions.size());
  std::vector<double> ref(m.positions.size(), 0.0);
  for (int64_t f = 0; f < m.num_faces(); ++f) {
    const Vec3 a = m.vertex(m.faces[3 * f]), b = m.vertex(m.faces[3 * f + 1]),
               c = m.vertex(m.faces[3 * f + 2]);
    double e0[3], e1[3];
    for (int d = 0; d < 3; ++d) {
      e0[d] = double(b[d]) - a[d];
      e1[d] = double(c[d]) - a[d];
    }
    const double x[3] = {e0[1] * e1[2] - e0[2] * e1[1], e0[2] * e1[0] - e0[0] * e1[2],
                         e0[0] * e1[1] - e0[1] * e1[0]};
    for (int k = 0; k < 3; ++k) {
      for (int d = 0; d < 3; ++d) ref[3 * m.faces[3 * f + k] + d] += x[d];
    }
  }
  for (int64_t v = 0; v < m.num_vertices(); ++v) {
    const double len = std::sqrt(ref[3 * v] * ref[3 * v] + ref[3 * v + 1] * ref[3 * v + 1] +
                                 ref[3 * v + 2] * ref[3 * v + 2]);
    for (int d = 0; d < 3; ++d) {
      const double expect = len > 0 ? ref[3 * v + d] / len : 0.0;
      EXPECT_NEAR(n[3 * v + d], expect, 1e-5) << "vertex " << v;
    }
  }
  EXPECT_EQ((Vec3{n[n.size() - 3], n[n.size() - 2], n[n.size() - 1]}), (Vec3{0, 0, 0}));
  // A flat grid's normals are +z everywhere.
  const std::vector<float> g = vertex_normals(grid(5, 3));
  for (size_t v = 0; v < g.size(); v += 3) {
    EXPECT_EQ((Vec3{g[v], g[v + 1], g[v + 2]}), (Vec3{0, 0, 1}));
  }
}

TEST(MeshClean, MeshStatsMatchesMapReference) {
  for (uint32_t seed : {2u, 13u, 31u}) {
    TriMesh m = messy_mesh(seed);
    TriMesh c = cube();
    translate(c, 4, 4, 4);
    append(m, c);
    m.positions.insert(m.positions.end(), {1, 1, 1});
    const MeshStats s = mesh_stats(m);
    EXPECT_EQ(s.boundary_edges, count_edges(m, 1, 1));
    EXPECT_EQ(s.non_manifold_edges, count_edges(m, 3, 1000));
    const std::vector<int> comp = brute_components(m);
    int64_t comps = 0;
    for (size_t f = 0; f < comp.size(); ++f) comps += comp[f] == static_cast<int>(f);
    EXPECT_EQ(s.components, comps);
    int64_t degenerate = 0;
    for (int64_t f = 0; f < m.num_faces(); ++f) {
      const int32_t* t = &m.faces[3 * f];
      degenerate += t[0] == t[1] || t[1] == t[2] || t[2] == t[0] || face_area(m, f) == 0;
    }
    ASSERT_GT(degenerate, 0);
    EXPECT_EQ(s.degenerate_faces, degenerate);
  }
}

TEST(MeshClean, ResultsDoNotDependOnThreadCount) {
  // Large enough for the passes to run on several threads (> 2^14 faces and vertices).
  const TriMesh m = messy_mesh(17, 301, 101);
  ASSERT_GT(m.num_vertices(), 1 << 14);
  auto run = [&m](int threads) {
    omp_set_num_threads(threads);
    TriMesh r = m;
    remove_duplicate_faces(r);
    remove_degenerate_faces(r);
    repair_non_manifold_edges(r);
    fill_holes(r, 10.0);
    unify_orientation(r);
    const MeshStats s = mesh_stats(r);
    std::vector<float> n = vertex_normals(r);
    return std::tuple(r.faces, r.positions, n, s.boundary_edges, s.components);
  };
  const int saved = omp_get_max_threads();
  const auto one = run(1);
  const auto four = run(4);
  omp_set_num_threads(saved);
  EXPECT_TRUE(one == four);
}

TEST(MeshClean, BadInputsThrowNamingTheProblem) {
  TriMesh bad = cube();
  bad.faces[7] = 8;  // outside [0, 8)
  EXPECT_ERROR(remove_degenerate_faces(bad), "remove_degenerate_faces", "vertex 8");
  EXPECT_ERROR(remove_duplicate_faces(bad), "remove_duplicate_faces", "outside");
  EXPECT_ERROR(remove_unreferenced_vertices(bad), "remove_unreferenced_vertices", "outside");
  EXPECT_ERROR(fill_holes(bad, 1.0), "fill_holes", "outside");
  EXPECT_ERROR(repair_non_manifold_edges(bad), "repair_non_manifold_edges", "outside");
  EXPECT_ERROR(remove_small_components(bad, 1.0), "remove_small_components", "outside");
  EXPECT_ERROR(unify_orientation(bad), "unify_orientation", "outside");
  EXPECT_ERROR(vertex_normals(bad), "vertex_normals", "outside");
  EXPECT_ERROR(mesh_stats(bad), "mesh_stats", "outside");
  bad.faces[7] = -1;
  EXPECT_ERROR(mesh_stats(bad), "mesh_stats", "-1");

  TriMesh nan = cube();
  nan.positions[4] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_ERROR(vertex_normals(nan), "vertex_normals", "non-finite");
  TriMesh empty;
  EXPECT_ERROR(fill_holes(empty, 1.0), "fill_holes", "no faces");
  TriMesh ragged = cube();
  ragged.faces.pop_back();
  EXPECT_ERROR(unify_orientation(ragged), "unify_orientation", "triples");

  TriMesh ok = cube();
  EXPECT_ERROR(fill_holes(ok, -1.0), "fill_holes", "max_perimeter");
  EXPECT_ERROR(fill_holes(ok, std::nan("")), "fill_holes", "max_perimeter");
  EXPECT_ERROR(remove_small_components(ok, std::nan("")), "min_area");
  EXPECT_ERROR(remove_degenerate_faces(ok, -1.0, 0.0), "remove_degenerate_faces", "abs_area");
  // Removing every face is allowed; the next pass then reports the empty mesh.
  remove_small_components(ok, 7.0);
  EXPECT_EQ(ok.num_faces(), 0);
  EXPECT_EQ(ok.num_vertices(), 0);
  EXPECT_ERROR(mesh_stats(ok), "mesh_stats", "no faces");
}

}  // namespace
}  // namespace s3d::mesh
