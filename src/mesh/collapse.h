// A quadric edge collapse of our own that keeps triangles well shaped (collapse.cpp says how),
// in meshoptimizer's calling convention so that simplify.cpp can use either. Internal to the
// mesh library; simplify.h is the public entry.
#pragma once

#include <cstddef>
#include <cstdint>

namespace s3d::mesh {

struct CollapseOptions {
  // Every vertex on an open edge (one face) stays, as meshopt_SimplifyLockBorder; otherwise
  // such a vertex may only slide along its open edges.
  bool lock_border = false;
  // Weight of each edge's perpendicular plane (the plane through the edge, at right angles to
  // its face) against the face's own plane, in every vertex's quadric. On a flat region the
  // faces' planes cost nothing for any collapse; these make a collapse cost what it moves a
  // vertex along the surface, so short edges go first and triangles stay even.
  double shape_weight = 1e-3;
  // Weight of an open edge's perpendicular plane (where lock_border is false).
  double border_weight = 1.0;
  // No face may turn by more than this many degrees in one collapse.
  double max_turn_degrees = 60;
};

// Collapses edges of the triangles indices[0, index_count) (vertex ids < vertex_count, three
// floats each in `positions`) onto one of their endpoints, cheapest first (by the faces'
// planes and the shape planes together), until at most target_index_count indices are left
// or no collapse has an error of at most max_error (absolute). The error is the faces'
// planes' alone: the area-weighted root mean square distance of the kept vertex from the
// planes of the input faces merged into it. Vertices with locked[v] != 0 (locked may be
// null) never move, nor do those on an edge of three or more faces or in a face with a
// repeated vertex. Writes the surviving faces, in their input order, to dest (room for
// index_count) and returns how many indices it wrote; *result_error (when given) gets the
// largest error of a collapse made.
// The same input gives the same output on any machine and thread count (it is serial).
size_t collapse_edges(unsigned* dest, const unsigned* indices, size_t index_count,
                      const float* positions, size_t vertex_count, const uint8_t* locked,
                      size_t target_index_count, float max_error, const CollapseOptions& o,
                      float* result_error);

}  // namespace s3d::mesh
