// The narrow-band dual-contouring remesh: against a straightforward reference (maps instead of
// sorted sweeps), and the band's shape: a sphere gives two closed, oriented shells at r + eps
// and r - eps, pulled onto the sphere by project_back; an open plate gives one closed shell.
#include <gtest/gtest.h>
#include <omp.h>

#include <array>
#include <cmath>
#include <map>

#include "../expect_error.h"
#include "mesh/remesh.h"
#include "voxel_test_shapes.h"

namespace s3d::mesh {
namespace {

using test::closed_and_oriented;
using test::icosphere;

// ---- Reference ----------------------------------------------------------------------------

using Key = std::array<int32_t, 3>;

// drop_cavities written out on the dense lattice: every lattice point of the grid with a
// non-negative value, joined to its six neighbours that have one too, flooded breadth-first
// from those on the grid's border; a quad goes when its edge's non-negative end was not
// reached, unless that would take every quad.
template <class Value>
void drop_unreached_quads(const std::vector<Key>& vox, int res, Value&& val,
                          std::vector<std::array<int, 3>>& dir) {
  const int n = res + 1;
  const auto at = [n](int x, int y, int z) { return (int64_t(x) * n + y) * n + z; };
  std::vector<int8_t> state(int64_t(n) * n * n, 0);  // 0: in the band, 1: outside, 2: reached
  std::vector<Key> queue;
  for (int x = 0; x < n; ++x)
    for (int y = 0; y < n; ++y)
      for (int z = 0; z < n; ++z) {
        if (val(x, y, z) < 0) continue;
        state[at(x, y, z)] = 1;
        if (x == 0 || y == 0 || z == 0 || x == res || y == res || z == res) {
          state[at(x, y, z)] = 2;
          queue.push_back({x, y, z});
        }
      }
  for (size_t q = 0; q < queue.size(); ++q)
    for (int a = 0; a < 3; ++a)
      for (int s = -1; s <= 1; s += 2) {
        Key k = queue[q];
        k[a] += s;
        if (k[a] < 0 || k[a] > res || state[at(k[0], k[1], k[2])] != 1) continue;
        state[at(k[0], k[1], k[2])] = 2;
        queue.push_back(k);
      }
  std::vector<std::array<int, 3>> kept = dir;
  bool any = false;
  for (size_t i = 0; i < vox.size(); ++i)
    for (int a = 0; a < 3; ++a) {
      if (!dir[i][a]) continue;
      Key outer{vox[i][0] + 1, vox[i][1] + 1, vox[i][2] + 1};  // the edge's high end
      if (dir[i][a] == -1) outer[a] -= 1;
      const bool reached = state[at(outer[0], outer[1], outer[2])] == 2;
      if (!reached) kept[i][a] = 0;
      any = any || reached;
    }
  if (any) dir = kept;
}

TriMesh reference_remesh(const Bvh& bvh, const RemeshOptions& o) {
  const int off[8][3] = {{0, 0, 0}, {1, 0, 0}, {0, 1, 0}, {1, 1, 0},
                         {0, 0, 1}, {1, 0, 1}, {0, 1, 1}, {1, 1, 1}};
  const float eps = static_cast<float>(double(o.band) * o.scale / o.resolution);
  int res = o.resolution;
  while (res > 32) res /= 2;
  std::vector<Key> vox;
  for (int x = 0; x < res; ++x)
    for (int y = 0; y < res; ++y)
      for (int z = 0; z < res; ++z) vox.push_back({x, y, z});
  for (;;) {
    std::vector<Key> kept;
    const float limit = static_cast<float>(0.87 * double(o.scale) / res);
    for (const Key& c : vox) {
      Vec3 p;
      for (int k = 0; k < 3; ++k)
        p[k] = ((float(c[k]) + 0.5f) / float(res) - 0.5f) * o.scale + o.center[k];
      if (std::abs(bvh.closest(p).distance - eps) < limit) kept.push_back(c);
    }
    if (res >= o.resolution) {
      vox = kept;
      break;
    }
    res *= 2;
    vox.clear();
    for (const Key& c : kept)
      for (const auto& d : off) vox.push_back({2 * c[0] + d[0], 2 * c[1] + d[1], 2 * c[2] + d[2]});
  }
  std::map<Key, int32_t> index;
  for (size_t i = 0; i < vox.size(); ++i) index[vox[i]] = static_cast<int32_t>(i);
  std::map<Key, float> value;
  auto val = [&](int x, int y, int z) {
    const Key k{x, y, z};
    auto it = value.find(k);
    if (it != value.end()) return it->second;
    Vec3 p;
    for (int j = 0; j < 3; ++j)
      p[j] = (float(k[j]) / float(o.resolution) - 0.5f) * o.scale + o.center[j];
    return value[k] = bvh.closest(p).distance - eps;
  };
  // Dual vertices and sign changes, CuMesh's loops written out.
  const size_t n = vox.size();
  std::vector<std::array<float, 3>> dual(n);
  std::vector<std::array<int, 3>> dir(n);
  for (size_t i = 0; i < n; ++i) {
    const Key& c = vox[i];
    float sum[3] = {0, 0, 0};
    int count = 0;
    for (int a = 0; a < 3; ++a)
      for (int u = 0; u <= 1; ++u)
        for (int v = 0; v <= 1; ++v) {
          int d1[3] = {0, 0, 0};
          if (a == 0) d1[1] = u, d1[2] = v;
          if (a == 1) d1[0] = u, d1[2] = v;
          if (a == 2) d1[0] = u, d1[1] = v;
          int d2[3] = {d1[0], d1[1], d1[2]};
          d2[a] = 1;
          const float v1 = val(c[0] + d1[0], c[1] + d1[1], c[2] + d1[2]);
          const float v2 = val(c[0] + d2[0], c[1] + d2[1], c[2] + d2[2]);
          const bool change = (v1 < 0) != (v2 < 0);
          if (change) {
            const float t = -v1 / (v2 - v1);
            for (int k = 0; k < 3; ++k) sum[k] += k == a ? float(c[k]) + t : float(c[k] + d1[k]);
            ++count;
          }
          if (u == 1 && v == 1) dir[i][a] = change ? (v1 < 0 ? 1 : -1) : 0;
        }
    for (int k = 0; k < 3; ++k) dual[i][k] = count ? sum[k] / float(count) : float(c[k]) + 0.5f;
  }
  if (o.drop_cavities) drop_unreached_quads(vox, o.resolution, val, dir);
  const int nbr[3][4][3] = {{{0, 0, 0}, {0, 0, 1}, {0, 1, 1}, {0, 1, 0}},
                            {{0, 0, 0}, {1, 0, 0}, {1, 0, 1}, {0, 0, 1}},
                            {{0, 0, 0}, {0, 1, 0}, {1, 1, 0}, {1, 0, 0}}};
  std::vector<std::array<int32_t, 5>> quads;  // four voxels and the direction
  for (size_t i = 0; i < n; ++i)
    for (int a = 0; a < 3; ++a) {
      if (!dir[i][a]) continue;
      std::array<int32_t, 5> q;
      bool all = true;
      for (int j = 0; j < 4 && all; ++j) {
        auto it = index.find(
            {vox[i][0] + nbr[a][j][0], vox[i][1] + nbr[a][j][1], vox[i][2] + nbr[a][j][2]});
        all = it != index.end();
        if (all) q[j] = it->second;
      }
      q[4] = dir[i][a];
      if (all) quads.push_back(q);
    }
  std::vector<int32_t> remap(n, -1);
  for (const auto& q : quads)
    for (int j = 0; j < 4; ++j) remap[q[j]] = 0;
  TriMesh m;
  for (size_t i = 0, next = 0; i < n; ++i) {
    if (remap[i] < 0) continue;
    remap[i] = static_cast<int32_t>(next++);
    for (int k = 0; k < 3; ++k)
      m.positions.push_back((dual[i][k] / float(o.resolution) - 0.5f) * o.scale + o.center[k]);
  }
  for (const auto& q : quads) {
    int32_t v[4];
    for (int j = 0; j < 4; ++j) v[j] = remap[q[j]];
    // Facing +axis (q[4] == 1): the quad's winding reversed. The diagonal v0-v2 unless the
    // first triangle is degenerate.
    std::vector<int32_t> t = q[4] == 1 ? std::vector<int32_t>{v[0], v[2], v[1], v[0], v[3], v[2]}
                                       : std::vector<int32_t>{v[0], v[1], v[2], v[0], v[2], v[3]};
    const Vec3 nrm = cross(m.vertex(t[1]) - m.vertex(t[0]), m.vertex(t[2]) - m.vertex(t[0]));
    if (!(dot(nrm, nrm) > 0))
      t = q[4] == 1 ? std::vector<int32_t>{v[0], v[3], v[1], v[3], v[2], v[1]}
                    : std::vector<int32_t>{v[0], v[1], v[3], v[3], v[1], v[2]};
    m.faces.insert(m.faces.end(), t.begin(), t.end());
  }
  return m;
}

TriMesh plate(float half, float z) {
  TriMesh m;
  m.positions = {-half, -half * 0.9f, z,         half,  -half * 0.9f, z + 0.02f,
                 half,  half * 0.9f,  z - 0.01f, -half, half * 0.9f,  z + 0.005f};
  m.faces = {0, 1, 2, 0, 2, 3};
  return m;
}

TEST(MeshRemesh, MatchesTheReferenceExactly) {
  // A sphere and a plate in one mesh; two resolutions (no refinement, and one level of it).
  TriMesh m = icosphere(2, 0.23f, {0.05f, -0.03f, 0.02f});
  const TriMesh p = plate(0.2f, 0.31f);
  const int32_t base = static_cast<int32_t>(m.num_vertices());
  m.positions.insert(m.positions.end(), p.positions.begin(), p.positions.end());
  for (int32_t v : p.faces) m.faces.push_back(base + v);
  Bvh bvh(m);
  RemeshOptions o;
  o.center = {0.01f, 0.02f, -0.015f};
  o.scale = 0.9f;
  o.band = 1.3f;
  for (int32_t res : {27, 58, 116})
    for (bool drop : {false, true}) {
      o.resolution = res;
      o.drop_cavities = drop;
      RemeshStats st;
      const TriMesh got = remesh_narrow_band_dc(bvh, o, &st);
      const TriMesh want = reference_remesh(bvh, o);
      ASSERT_GT(want.num_faces(), 100);
      EXPECT_EQ(got.positions, want.positions) << res << " drop " << drop;
      EXPECT_EQ(got.faces, want.faces) << res << " drop " << drop;
      EXPECT_GT(st.voxels, 0);
      EXPECT_GT(st.grid_vertices, st.voxels);
      EXPECT_GE(st.udf_queries, st.grid_vertices + st.voxels);
      // The sphere's inner shell is a cavity's; the plate encloses nothing.
      EXPECT_EQ(st.cavity_quads > 0, drop) << res;
      EXPECT_FALSE(st.cavities_kept_all);
    }
}

// The sphere tests' grid: the unit cube at 64^3, a band of one voxel.
RemeshOptions sphere_grid() {
  RemeshOptions o;
  o.scale = 1;
  o.resolution = 64;
  o.band = 1;
  return o;
}

TEST(MeshRemesh, SphereGivesTwoShellsAtTheBandsEdges) {
  const float r = 0.3f;
  const TriMesh sphere = icosphere(4, r);
  Bvh bvh(sphere);
  RemeshOptions o = sphere_grid();
  const TriMesh out = remesh_narrow_band_dc(bvh, o);
  EXPECT_TRUE(closed_and_oriented(out));
  EXPECT_EQ(test::components(out), 2);
  const float eps = 1.0f / 64, half = 0.5f / 64;
  // Every vertex on one of the two shells; each shell's faces wound away from the band.
  TriMesh outer, inner;
  outer.positions = inner.positions = out.positions;
  for (int64_t f = 0; f < out.num_faces(); ++f) {
    const float rad = length(out.vertex(out.faces[3 * f]));
    TriMesh& shell = rad > r ? outer : inner;
    shell.faces.insert(shell.faces.end(), &out.faces[3 * f], &out.faces[3 * f + 3]);
  }
  for (int64_t v = 0; v < out.num_vertices(); ++v) {
    const float rad = length(out.vertex(v));
    EXPECT_LT(std::abs(rad - (rad > r ? r + eps : r - eps)), half) << v;
  }
  EXPECT_TRUE(closed_and_oriented(outer));
  EXPECT_TRUE(closed_and_oriented(inner));
  const double pi = 3.14159265358979;
  EXPECT_NEAR(test::signed_volume(outer), 4 * pi / 3 * std::pow(r + eps, 3), 0.003);
  EXPECT_NEAR(test::signed_volume(inner), -4 * pi / 3 * std::pow(r - eps, 3), 0.003);

  // project_back pulls the vertices onto the sphere (1) or halfway (0.5).
  o.project_back = 1;
  const TriMesh on = remesh_narrow_band_dc(bvh, o);
  EXPECT_EQ(on.faces, out.faces);
  EXPECT_LT(test::max_vertex_distance(on, sphere), 1e-5f);
  o.project_back = 0.5f;
  const TriMesh mid = remesh_narrow_band_dc(bvh, o);
  Bvh sbvh(sphere);
  for (int64_t v = 0; v < mid.num_vertices(); ++v) {
    const float d0 = sbvh.closest(out.vertex(v)).distance;
    EXPECT_NEAR(sbvh.closest(mid.vertex(v)).distance, 0.5f * d0, 2e-5f) << v;
  }
}

// The faces of m as position triples, in order.
std::vector<std::array<float, 9>> triangles(const TriMesh& m) {
  std::vector<std::array<float, 9>> t(m.num_faces());
  for (int64_t f = 0; f < m.num_faces(); ++f)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 3; ++k) t[f][3 * j + k] = m.vertex(m.faces[3 * f + j])[k];
  return t;
}

TEST(MeshRemesh, DropCavitiesLeavesTheSpheresOuterShell) {
  // The sphere's band encloses the space inside r - eps: drop_cavities leaves out the shell
  // around it, every one of its quads, and nothing else, in the default's order.
  const float r = 0.3f;
  Bvh bvh(icosphere(4, r));
  RemeshOptions o = sphere_grid();
  const TriMesh both = remesh_narrow_band_dc(bvh, o);
  std::vector<std::array<float, 9>> outer;
  for (const auto& t : triangles(both))
    if (std::hypot(t[0], t[1], t[2]) > r) outer.push_back(t);
  ASSERT_GT(both.num_faces() - static_cast<int64_t>(outer.size()), 1 << 13);
  o.drop_cavities = true;
  RemeshStats st;
  const TriMesh out = remesh_narrow_band_dc(bvh, o, &st);
  EXPECT_EQ(triangles(out), outer);
  EXPECT_EQ(2 * st.cavity_quads, both.num_faces() - static_cast<int64_t>(outer.size()));
  EXPECT_EQ(test::components(out), 1);
  EXPECT_TRUE(closed_and_oriented(out));
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  const TriMesh one = remesh_narrow_band_dc(bvh, o);
  omp_set_num_threads(saved);
  EXPECT_EQ(one.faces, out.faces);  // one thread and all of them: the same mesh
  EXPECT_EQ(one.positions, out.positions);
}

TEST(MeshRemesh, DropCavitiesSeesInsideThroughAnOpeningNotThroughAPinhole) {
  // A sphere with its cap cut off (an opening 0.22 across, fourteen voxels): the space inside
  // is joined to the outside, so every surface stays. With one face taken out instead (a hole
  // narrower than the band), the band closes it and the inside is a cavity again.
  const float r = 0.3f;
  const TriMesh sphere = icosphere(4, r);
  TriMesh open = sphere, pinhole = sphere;
  open.faces.clear(), pinhole.faces.clear();
  bool cut = false;
  for (int64_t f = 0; f < sphere.num_faces(); ++f) {
    const int32_t* v = &sphere.faces[3 * f];
    const float zmin = std::min({sphere.vertex(v[0])[2], sphere.vertex(v[1])[2],
                                 sphere.vertex(v[2])[2]});
    if (zmin < 0.2f) open.faces.insert(open.faces.end(), v, v + 3);
    if (zmin < 0.29f || cut) pinhole.faces.insert(pinhole.faces.end(), v, v + 3);
    else cut = true;
  }
  ASSERT_TRUE(cut);
  RemeshOptions o = sphere_grid();
  o.resolution = 128;  // 32 -> 64 -> 128: the fill walks two coarser levels
  for (const TriMesh* m : {&open, &pinhole}) {
    Bvh bvh(*m);
    o.drop_cavities = false;
    const TriMesh all = remesh_narrow_band_dc(bvh, o);
    o.drop_cavities = true;
    RemeshStats st;
    const TriMesh kept = remesh_narrow_band_dc(bvh, o, &st);
    if (m == &open) {
      EXPECT_EQ(st.cavity_quads, 0);
      EXPECT_EQ(kept.faces, all.faces);
      EXPECT_EQ(test::components(kept), 1);
    } else {
      EXPECT_GT(2 * st.cavity_quads, all.num_faces() / 3);
      EXPECT_EQ(test::components(kept), 1);
      for (int64_t v = 0; v < kept.num_vertices(); ++v)
        EXPECT_GT(length(kept.vertex(v)), r) << v;
    }
    EXPECT_FALSE(st.cavities_kept_all);
  }
}

TEST(MeshRemesh, DropCavitiesKeepsEverythingWhenNothingReachesTheBorder) {
  // A cube as large as the grid: its band covers the whole border, so no space outside the
  // band reaches it and every quad would go. None does, and the stats say so.
  const TriMesh cube = test::box_mesh({-0.5f, -0.5f, -0.5f}, {0.5f, 0.5f, 0.5f});
  Bvh bvh(cube);
  RemeshOptions o = sphere_grid();
  const TriMesh all = remesh_narrow_band_dc(bvh, o);
  ASSERT_GT(all.num_faces(), 0);
  o.drop_cavities = true;
  RemeshStats st;
  const TriMesh kept = remesh_narrow_band_dc(bvh, o, &st);
  EXPECT_TRUE(st.cavities_kept_all);
  EXPECT_EQ(st.cavity_quads, 0);
  EXPECT_EQ(kept.faces, all.faces);
  EXPECT_EQ(kept.positions, all.positions);
}

TEST(MeshRemesh, OpenPlateGivesOneClosedShell) {
  const TriMesh p = plate(0.25f, 0.013f);
  Bvh bvh(p);
  RemeshOptions o;
  o.scale = 0.8f;
  o.resolution = 48;
  o.band = 1.5f;
  const TriMesh out = remesh_narrow_band_dc(bvh, o);
  EXPECT_TRUE(closed_and_oriented(out));
  EXPECT_EQ(test::components(out), 1);
  // A slab of thickness 2 eps around the plate (plus its rounded rim).
  const float eps = 1.5f * 0.8f / 48;
  const double area = 0.5 * 0.45;
  EXPECT_GT(test::signed_volume(out), 2 * eps * area);
  EXPECT_LT(test::signed_volume(out), 2 * eps * area * 1.3);
  Bvh pb(p);
  for (int64_t v = 0; v < out.num_vertices(); ++v)
    EXPECT_NEAR(pb.closest(out.vertex(v)).distance, eps, 0.5f * 0.8f / 48) << v;
}

TEST(MeshRemesh, ResultsDoNotDependOnTheThreadCount) {
  const TriMesh t = test::torus(0.25f, 0.08f, 37, 19);
  Bvh bvh(t);
  RemeshOptions o;
  o.resolution = 80;
  o.project_back = 0.7f;
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const TriMesh a = remesh_narrow_band_dc(bvh, o);
  omp_set_num_threads(3);
  const TriMesh b = remesh_narrow_band_dc(bvh, o);
  omp_set_num_threads(threads);
  ASSERT_GT(a.num_faces(), 1000);
  EXPECT_EQ(a.positions, b.positions);
  EXPECT_EQ(a.faces, b.faces);
}

TEST(MeshRemesh, BandOutsideTheCubeGivesAnEmptyMesh) {
  Bvh bvh(icosphere(1, 0.1f, {3, 3, 3}));
  RemeshOptions o;
  o.resolution = 32;
  const TriMesh out = remesh_narrow_band_dc(bvh, o);
  EXPECT_EQ(out.num_vertices(), 0);
  EXPECT_EQ(out.num_faces(), 0);
}

TEST(MeshRemesh, RefusesBadOptions) {
  using s3d::test::error_contains;
  Bvh bvh(icosphere(1, 0.3f));
  auto run = [&](auto edit) {
    return [&bvh, edit] {
      RemeshOptions o;
      o.resolution = 64;
      edit(o);
      remesh_narrow_band_dc(bvh, o);
    };
  };
  EXPECT_TRUE(error_contains(run([](RemeshOptions& o) { o.resolution = 66; }),
                             {"resolution 66", "33 is odd"}));
  EXPECT_TRUE(error_contains(run([](RemeshOptions& o) { o.resolution = 0; }), {"resolution 0"}));
  EXPECT_TRUE(
      error_contains(run([](RemeshOptions& o) { o.resolution = 1 << 15; }), {"resolution 32768"}));
  EXPECT_TRUE(error_contains(run([](RemeshOptions& o) { o.band = 0; }), {"band 0"}));
  EXPECT_TRUE(error_contains(run([](RemeshOptions& o) { o.band = std::nanf(""); }), {"band"}));
  EXPECT_TRUE(error_contains(run([](RemeshOptions& o) { o.scale = -1; }), {"scale -1"}));
  EXPECT_TRUE(
      error_contains(run([](RemeshOptions& o) { o.project_back = 1.5f; }), {"project_back 1.5"}));
  EXPECT_TRUE(
      error_contains(run([](RemeshOptions& o) { o.project_back = -0.1f; }), {"project_back"}));
  EXPECT_TRUE(error_contains(run([](RemeshOptions& o) { o.center[1] = INFINITY; }), {"center[1]"}));
}

}  // namespace
}  // namespace s3d::mesh
