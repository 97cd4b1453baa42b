// Small meshes and brute-force references for the clean-up and simplification tests.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <map>
#include <random>
#include <set>
#include <utility>
#include <vector>

#include "mesh/mesh.h"

namespace s3d::mesh::test {

// A torus around z: nu segments around the ring, nv around the tube, wound outward.
// `noise` moves each vertex along the tube's normal by up to that much (seeded).
inline TriMesh torus(int nu, int nv, float R = 1.f, float r = 0.35f, float noise = 0.f,
                     uint32_t seed = 1) {
  TriMesh m;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> jitter(-noise, noise);
  const double pi = 3.14159265358979323846;
  for (int i = 0; i < nu; ++i) {
    for (int j = 0; j < nv; ++j) {
      const double u = 2 * pi * i / nu, v = 2 * pi * j / nv;
      const double rr = r + (noise > 0 ? jitter(rng) : 0.f);
      m.positions.push_back(static_cast<float>((R + rr * std::cos(v)) * std::cos(u)));
      m.positions.push_back(static_cast<float>((R + rr * std::cos(v)) * std::sin(u)));
      m.positions.push_back(static_cast<float>(rr * std::sin(v)));
    }
  }
  auto id = [nu, nv](int i, int j) { return ((i + nu) % nu) * nv + (j + nv) % nv; };
  for (int i = 0; i < nu; ++i) {
    for (int j = 0; j < nv; ++j) {
      const int a = id(i, j), b = id(i + 1, j), c = id(i + 1, j + 1), d = id(i, j + 1);
      m.faces.insert(m.faces.end(), {a, b, c, a, c, d});
    }
  }
  return m;
}

// Distance of p to the torus surface torus(.., R, r) describes (without noise).
inline double torus_distance(const Vec3& p, double R, double r) {
  const double ring = std::hypot(double(p[0]), double(p[1])) - R;
  return std::abs(std::hypot(ring, double(p[2])) - r);
}

// A flat grid of nx x ny vertices with unit cells in the z = 0 plane, wound toward +z; cell
// (i, j) is faces 2 * (j * (nx - 1) + i) and the one after.
inline TriMesh grid(int nx, int ny) {
  TriMesh m;
  for (int j = 0; j < ny; ++j) {
    for (int i = 0; i < nx; ++i) m.positions.insert(m.positions.end(), {float(i), float(j), 0.f});
  }
  for (int j = 0; j + 1 < ny; ++j) {
    for (int i = 0; i + 1 < nx; ++i) {
      const int a = j * nx + i, b = a + 1, c = a + nx + 1, d = a + nx;
      m.faces.insert(m.faces.end(), {a, b, c, a, c, d});
    }
  }
  return m;
}

// The unit cube [0, 1]^3, 12 faces wound outward; faces 2k, 2k + 1 make side k (side 5 is
// z = 1).
inline TriMesh cube() {
  TriMesh m;
  for (int v = 0; v < 8; ++v) {
    m.positions.insert(m.positions.end(), {float(v & 1), float((v >> 1) & 1), float(v >> 2)});
  }
  m.faces = {0, 2, 3, 0, 3, 1,   // z = 0
             0, 1, 5, 0, 5, 4,   // y = 0
             1, 3, 7, 1, 7, 5,   // x = 1
             3, 2, 6, 3, 6, 7,   // y = 1
             2, 0, 4, 2, 4, 6,   // x = 0
             4, 5, 7, 4, 7, 6};  // z = 1
  return m;
}

// Appends b's vertices and faces to a.
inline void append(TriMesh& a, const TriMesh& b) {
  const int32_t base = static_cast<int32_t>(a.num_vertices());
  a.positions.insert(a.positions.end(), b.positions.begin(), b.positions.end());
  for (int32_t v : b.faces) a.faces.push_back(v + base);
}

inline void translate(TriMesh& m, float dx, float dy, float dz) {
  for (size_t i = 0; i < m.positions.size(); i += 3) {
    m.positions[i] += dx;
    m.positions[i + 1] += dy;
    m.positions[i + 2] += dz;
  }
}

inline void remove_face_list(TriMesh& m, std::vector<int64_t> drop) {
  std::sort(drop.begin(), drop.end());
  std::vector<int32_t> faces;
  for (int64_t f = 0; f < m.num_faces(); ++f) {
    if (std::binary_search(drop.begin(), drop.end(), f)) continue;
    faces.insert(faces.end(), m.faces.begin() + 3 * f, m.faces.begin() + 3 * f + 3);
  }
  m.faces = faces;
}

// Faces per undirected edge (pairs with a < b; a face's self-edge is no edge).
inline std::map<std::pair<int, int>, int> edge_counts(const TriMesh& m) {
  std::map<std::pair<int, int>, int> c;
  for (int64_t f = 0; f < m.num_faces(); ++f) {
    for (int k = 0; k < 3; ++k) {
      const int a = m.faces[3 * f + k], b = m.faces[3 * f + (k + 1) % 3];
      if (a != b) ++c[{std::min(a, b), std::max(a, b)}];
    }
  }
  return c;
}

inline int64_t count_edges(const TriMesh& m, int faces_lo, int faces_hi) {
  int64_t n = 0;
  for (const auto& [e, c] : edge_counts(m)) n += c >= faces_lo && c <= faces_hi;
  return n;
}

// Edges with two faces that run them in the same direction (inconsistent winding).
inline int64_t inconsistent_edges(const TriMesh& m) {
  std::map<std::pair<int, int>, std::vector<std::pair<int, int>>> dirs;
  for (int64_t f = 0; f < m.num_faces(); ++f) {
    for (int k = 0; k < 3; ++k) {
      const int a = m.faces[3 * f + k], b = m.faces[3 * f + (k + 1) % 3];
      dirs[{std::min(a, b), std::max(a, b)}].push_back({a, b});
    }
  }
  int64_t n = 0;
  for (const auto& [e, d] : dirs) n += d.size() == 2 && d[0] == d[1];
  return n;
}

// Components through shared edges, by breadth-first search over all face pairs (O(F^2)):
// per face, the smallest face index of its component.
inline std::vector<int> brute_components(const TriMesh& m) {
  const int F = static_cast<int>(m.num_faces());
  auto shares_edge = [&m](int f, int g) {
    int shared = 0;
    std::set<int> a(m.faces.begin() + 3 * f, m.faces.begin() + 3 * f + 3);
    std::set<int> b(m.faces.begin() + 3 * g, m.faces.begin() + 3 * g + 3);
    for (int v : a) shared += b.count(v);
    return shared >= 2;
  };
  std::vector<int> comp(F, -1);
  for (int s = 0; s < F; ++s) {
    if (comp[s] >= 0) continue;
    std::vector<int> queue{s};
    comp[s] = s;
    for (size_t q = 0; q < queue.size(); ++q) {
      for (int g = 0; g < F; ++g) {
        if (comp[g] < 0 && shares_edge(queue[q], g)) {
          comp[g] = s;
          queue.push_back(g);
        }
      }
    }
  }
  return comp;
}

inline double face_area(const TriMesh& m, int64_t f) {
  const Vec3 a = m.vertex(m.faces[3 * f]), b = m.vertex(m.faces[3 * f + 1]),
             c = m.vertex(m.faces[3 * f + 2]);
  return 0.5 * length(cross(b - a, c - a));
}

// Six times the enclosed volume's sign-carrying sum (positive for outward winding).
inline double signed_volume(const TriMesh& m) {
  double v = 0;
  for (int64_t f = 0; f < m.num_faces(); ++f) {
    const Vec3 a = m.vertex(m.faces[3 * f]), b = m.vertex(m.faces[3 * f + 1]),
               c = m.vertex(m.faces[3 * f + 2]);
    v += double(dot(a, cross(b, c)));
  }
  return v / 6;
}

// Each face as its three corner positions, so that meshes can be compared across renumbering.
inline std::vector<std::array<float, 9>> face_positions(const TriMesh& m) {
  std::vector<std::array<float, 9>> out(m.num_faces());
  for (int64_t f = 0; f < m.num_faces(); ++f) {
    for (int k = 0; k < 3; ++k) {
      for (int c = 0; c < 3; ++c) out[f][3 * k + c] = m.positions[3 * m.faces[3 * f + k] + c];
    }
  }
  return out;
}

}  // namespace s3d::mesh::test
