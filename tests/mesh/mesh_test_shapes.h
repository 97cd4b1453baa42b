// Random odd meshes shared by the GLB export's tests (BVH, atlas, dual grid, the GPU suite): a
// noisy UV sphere and a soup of scattered triangles, both seeded so that each call's geometry
// is the same on every run.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>

#include "mesh/mesh.h"

namespace s3d::mesh::test {

// A UV sphere about the origin: `rings` + 1 rings of `segments` vertices from +z to -z (the
// poles repeated per segment), each at `radius` plus uniform noise in [-noise, noise] drawn
// from mt19937(seed), vertex by vertex. Each quad is split into two triangles; the faces of
// the first `skip_rings` rings are left out (a hole at +z). With `pole_slivers` the pole quads
// keep their sliver triangle (two pole vertices and one ring vertex); without, the poles are
// plain triangle fans.
inline TriMesh uv_sphere(int rings, int segments, float radius, float noise, uint32_t seed,
                         int skip_rings = 0, bool pole_slivers = true) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> n(-noise, noise);
  TriMesh m;
  for (int r = 0; r <= rings; ++r) {
    const float th = 3.14159265f * r / rings;
    for (int s = 0; s < segments; ++s) {
      const float ph = 6.2831853f * s / segments;
      const float rad = radius + n(rng);
      m.positions.insert(m.positions.end(),
                         {rad * std::sin(th) * std::cos(ph), rad * std::sin(th) * std::sin(ph),
                          rad * std::cos(th)});
    }
  }
  for (int r = skip_rings; r < rings; ++r)
    for (int s = 0; s < segments; ++s) {
      const int a = r * segments + s, b = r * segments + (s + 1) % segments;
      const int c = a + segments, d = b + segments;
      if (pole_slivers || r > 0) m.faces.insert(m.faces.end(), {a, c, b});
      if (pole_slivers || r < rings - 1) m.faces.insert(m.faces.end(), {b, c, d});
    }
  return m;
}

// `faces` unconnected triangles: each corner within `size` (per axis, uniform) of a centre
// uniform in [-spread, spread]^3, drawn from mt19937(seed).
inline TriMesh random_soup(int faces, uint32_t seed, float spread, float size) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-spread, spread), s(-size, size);
  TriMesh m;
  for (int f = 0; f < faces; ++f) {
    const float c[3] = {u(rng), u(rng), u(rng)};
    for (int k = 0; k < 3; ++k) {
      for (int j = 0; j < 3; ++j) m.positions.push_back(c[j] + s(rng));
      m.faces.push_back(3 * f + k);
    }
  }
  return m;
}

}  // namespace s3d::mesh::test
