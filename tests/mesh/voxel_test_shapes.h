// Shapes and mesh checks shared by the voxel stages' tests (dual grid, remesh): closed,
// outward-oriented meshes, and the properties their outputs are held to.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <numeric>
#include <random>
#include <utility>
#include <vector>

#include "mesh/bvh.h"
#include "mesh/mesh.h"

namespace s3d::mesh::test {

// An icosahedron subdivided `levels` times, pushed onto a sphere: closed, outward.
inline TriMesh icosphere(int levels, float radius, Vec3 centre = {0, 0, 0}) {
  const float t = (1 + std::sqrt(5.0f)) / 2;
  std::vector<Vec3> v = {{-1, t, 0},  {1, t, 0},  {-1, -t, 0}, {1, -t, 0}, {0, -1, t},  {0, 1, t},
                         {0, -1, -t}, {0, 1, -t}, {t, 0, -1},  {t, 0, 1},  {-t, 0, -1}, {-t, 0, 1}};
  std::vector<int32_t> f = {0, 11, 5,  0, 5,  1, 0, 1, 7, 0, 7,  10, 0, 10, 11, 1, 5, 9, 5, 11,
                            4, 11, 10, 2, 10, 7, 6, 7, 1, 8, 3,  9,  4, 3,  4,  2, 3, 2, 6, 3,
                            6, 8,  3,  8, 9,  4, 9, 5, 2, 4, 11, 6,  2, 10, 8,  6, 7, 9, 8, 1};
  for (int l = 0; l < levels; ++l) {
    std::map<std::pair<int32_t, int32_t>, int32_t> mid;
    auto midpoint = [&](int32_t a, int32_t b) {
      const auto key = std::minmax(a, b);
      auto it = mid.find(key);
      if (it != mid.end()) return it->second;
      v.push_back((v[a] + v[b]) * 0.5f);
      return mid[key] = static_cast<int32_t>(v.size() - 1);
    };
    std::vector<int32_t> g;
    for (size_t i = 0; i < f.size(); i += 3) {
      const int32_t a = f[i], b = f[i + 1], c = f[i + 2];
      const int32_t ab = midpoint(a, b), bc = midpoint(b, c), ca = midpoint(c, a);
      g.insert(g.end(), {a, ab, ca, b, bc, ab, c, ca, bc, ab, bc, ca});
    }
    f.swap(g);
  }
  TriMesh m;
  for (const Vec3& p : v) {
    const Vec3 q = centre + p * (radius / length(p));
    m.positions.insert(m.positions.end(), q.begin(), q.end());
  }
  m.faces = f;
  return m;
}

// Axis-aligned box [lo, hi]: 8 vertices, 12 faces, outward.
inline TriMesh box_mesh(Vec3 lo, Vec3 hi) {
  TriMesh m;
  for (int i = 0; i < 8; ++i)
    m.positions.insert(m.positions.end(),
                       {i & 1 ? hi[0] : lo[0], i & 2 ? hi[1] : lo[1], i & 4 ? hi[2] : lo[2]});
  m.faces = {0, 2, 1, 1, 2, 3, 4, 5, 6, 5, 7, 6, 0, 1, 4, 1, 5, 4,
             2, 6, 3, 3, 6, 7, 0, 4, 2, 2, 4, 6, 1, 3, 5, 3, 7, 5};
  return m;
}

// Torus around the z axis: major radius R, minor r; closed, outward.
inline TriMesh torus(float R, float r, int nu, int nv, Vec3 centre = {0, 0, 0}) {
  TriMesh m;
  for (int i = 0; i < nu; ++i)
    for (int j = 0; j < nv; ++j) {
      const float u = 6.2831853f * i / nu, w = 6.2831853f * j / nv;
      m.positions.insert(m.positions.end(), {centre[0] + (R + r * std::cos(w)) * std::cos(u),
                                             centre[1] + (R + r * std::cos(w)) * std::sin(u),
                                             centre[2] + r * std::sin(w)});
    }
  for (int i = 0; i < nu; ++i)
    for (int j = 0; j < nv; ++j) {
      const int a = i * nv + j, b = ((i + 1) % nu) * nv + j;
      const int c = i * nv + (j + 1) % nv, d = ((i + 1) % nu) * nv + (j + 1) % nv;
      m.faces.insert(m.faces.end(), {a, b, d, a, d, c});
    }
  return m;
}

// Applies a rotation (three angles) then a shift to every vertex.
inline void rotate(TriMesh& m, float ax, float ay, float az, Vec3 shift = {0, 0, 0}) {
  for (int64_t v = 0; v < m.num_vertices(); ++v) {
    float* p = &m.positions[3 * v];
    float y = p[1] * std::cos(ax) - p[2] * std::sin(ax),
          z = p[1] * std::sin(ax) + p[2] * std::cos(ax);
    p[1] = y, p[2] = z;
    float x = p[0] * std::cos(ay) + p[2] * std::sin(ay);
    z = -p[0] * std::sin(ay) + p[2] * std::cos(ay);
    p[0] = x, p[2] = z;
    x = p[0] * std::cos(az) - p[1] * std::sin(az), y = p[0] * std::sin(az) + p[1] * std::cos(az);
    p[0] = x + shift[0], p[1] = y + shift[1], p[2] = z + shift[2];
  }
}

inline double signed_volume(const TriMesh& m) {
  double vol = 0;
  for (int64_t f = 0; f < m.num_faces(); ++f) {
    const Vec3 a = m.vertex(m.faces[3 * f]), b = m.vertex(m.faces[3 * f + 1]),
               c = m.vertex(m.faces[3 * f + 2]);
    vol += (double(a[0]) * (double(b[1]) * c[2] - double(b[2]) * c[1]) -
            double(a[1]) * (double(b[0]) * c[2] - double(b[2]) * c[0]) +
            double(a[2]) * (double(b[0]) * c[1] - double(b[1]) * c[0])) /
           6;
  }
  return vol;
}

// Closed and consistently oriented: every directed edge has exactly as many faces as its
// reverse (no boundary, opposite traversals), and no face repeats an index. Manifold when each
// directed edge has one face; up to `max_nonmanifold` edges may have four (dual contouring's
// ambiguous lattice faces, where a thin wedge of a sharp shape crosses a face diagonally).
inline ::testing::AssertionResult closed_and_oriented(const TriMesh& m,
                                                      int64_t max_nonmanifold = 0) {
  std::map<std::pair<int32_t, int32_t>, int> directed;
  for (int64_t f = 0; f < m.num_faces(); ++f) {
    const int32_t* t = &m.faces[3 * f];
    if (t[0] == t[1] || t[1] == t[2] || t[2] == t[0])
      return ::testing::AssertionFailure() << "face " << f << " repeats a vertex";
    for (int k = 0; k < 3; ++k) ++directed[{t[k], t[(k + 1) % 3]}];
  }
  int64_t nonmanifold = 0;
  for (const auto& [e, n] : directed) {
    auto it = directed.find({e.second, e.first});
    if (it == directed.end() || it->second != n)
      return ::testing::AssertionFailure()
             << "edge " << e.first << "->" << e.second << " traversed " << n
             << " times, the other way " << (it == directed.end() ? 0 : it->second);
    if (n > 2)
      return ::testing::AssertionFailure()
             << "edge " << e.first << "-" << e.second << " has " << 2 * n << " faces";
    nonmanifold += n == 2 && e.first < e.second;
  }
  if (nonmanifold > max_nonmanifold)
    return ::testing::AssertionFailure() << nonmanifold << " edges with four faces";
  return ::testing::AssertionSuccess() << nonmanifold << " edges with four faces";
}

// Number of connected components of the faces (through shared vertices).
inline int components(const TriMesh& m) {
  std::vector<int32_t> parent(m.num_vertices());
  std::iota(parent.begin(), parent.end(), 0);
  auto root = [&](int32_t v) {
    while (parent[v] != v) v = parent[v] = parent[parent[v]];
    return v;
  };
  for (int64_t f = 0; f < m.num_faces(); ++f)
    for (int k = 1; k < 3; ++k) parent[root(m.faces[3 * f + k])] = root(m.faces[3 * f]);
  std::vector<char> seen(m.num_vertices(), 0);
  int n = 0;
  for (int64_t f = 0; f < m.num_faces(); ++f) {
    const int32_t r = root(m.faces[3 * f]);
    if (!seen[r]) seen[r] = 1, ++n;
  }
  return n;
}

// Largest distance from a referenced vertex of `a` to surface `b`.
inline float max_vertex_distance(const TriMesh& a, const TriMesh& b) {
  Bvh bvh(b);
  std::vector<char> used(a.num_vertices(), 0);
  for (int32_t v : a.faces) used[v] = 1;
  float worst = 0;
  for (int64_t v = 0; v < a.num_vertices(); ++v)
    if (used[v]) worst = std::max(worst, bvh.closest(a.vertex(v)).distance);
  return worst;
}

// Largest distance from random points of surface `a` to surface `b`.
inline float max_surface_distance(const TriMesh& a, const TriMesh& b, int samples, uint32_t seed) {
  Bvh bvh(b);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(0, 1);
  float worst = 0;
  for (int s = 0; s < samples; ++s) {
    const int64_t f = static_cast<int64_t>(rng() % a.num_faces());
    float x = u(rng), y = u(rng);
    if (x + y > 1) x = 1 - x, y = 1 - y;
    const Vec3 p = a.vertex(a.faces[3 * f]) * (1 - x - y) + a.vertex(a.faces[3 * f + 1]) * x +
                   a.vertex(a.faces[3 * f + 2]) * y;
    worst = std::max(worst, bvh.closest(p).distance);
  }
  return worst;
}

}  // namespace s3d::mesh::test
