// Mesh clean-up, as CuMesh does it for TRELLIS.2's to_glb: each function edits the mesh in
// place and keeps it indexed (no unreferenced vertices after it returns unless it says so).
#pragma once

#include <cstdint>
#include <vector>

#include "mesh/mesh.h"

namespace s3d::mesh {

// Drops faces with a repeated vertex index, and faces whose area is below `abs_area` AND whose
// area over the squared longest edge is below `rel_area` (CuMesh's remove_degenerate_faces
// defaults: 1e-24 and 1e-12).
void remove_degenerate_faces(TriMesh& m, double abs_area = 1e-24, double rel_area = 1e-12);
// Turns flat faces (three distinct vertices in a line: no area, as remove_degenerate_faces
// sees it with its defaults) into good ones where the geometry allows: for such a face (a, b, c)
// with c inside its longest edge ab, and the one other face (b, a, d) across ab, the shared edge
// is flipped to (c, d), giving (c, a, d) and (c, d, b), which tile (b, a, d) exactly. So the
// surface, its area and its boundary stay as they were, while removing the flat face instead
// would open a slit along ab. A face is left as it is when ab has another number of faces, d is
// on the line too, or the edge (c, d) is there already. Serial, in face order, repeated while
// a pass flips something (at most four passes). Returns the number of flips.
// cap_degrees < 180 takes caps too: faces whose largest angle (at c) is above it, c just off
// the line ab. Their flip moves no vertex either; it changes the surface by less than c's
// distance from ab (under 4.4% of ab at 175 degrees), and is kept only where both new faces
// turn less than 60 degrees from (b, a, d). A cap simplification leaves on a remeshed
// surface often stands steep to the faces around it, which no chart takes: it was a chart of
// its own (of 11,840 charts on regr01 at 1,000,000 faces, 2,327 were one face inside another
// chart, 2,089 of them caps at 175 degrees).
// cap_degrees must be in (90, 180].
int64_t flip_flat_faces(TriMesh& m, double cap_degrees = 180);
// Drops every face whose vertex set equals an earlier face's (either winding); keeps the first.
void remove_duplicate_faces(TriMesh& m);
// Drops vertices no face uses; renumbers. `old_of_new`, when given, receives for each kept
// vertex its index before.
void remove_unreferenced_vertices(TriMesh& m, std::vector<int32_t>* old_of_new = nullptr);
// Fills each boundary loop whose perimeter is at most `max_perimeter` (in the mesh's units)
// with a fan around a new vertex at the loop's centroid, wound to match the surrounding faces.
// Loops are found on the manifold boundary edges (an edge used by exactly one face).
// Returns the number of holes filled.
int64_t fill_holes(TriMesh& m, double max_perimeter);
// Makes every edge used by at most two faces by splitting vertices, as CuMesh does: a vertex
// becomes one vertex per fan of its faces (faces around it joined through edges that exactly
// two faces use). The fan holding the vertex's first corner keeps its index; every other fan
// gets a new vertex (appended, position duplicated). A non-manifold edge's faces thus keep
// their manifold neighbours, and pinched (bow-tie) vertices are split too.
void repair_non_manifold_edges(TriMesh& m);
// Drops connected components (faces joined through shared edges) of total area < min_area.
void remove_small_components(TriMesh& m, double min_area);
// Flips faces so that each connected component is consistently oriented (breadth-first over
// manifold edges, the component's first face fixed).
void unify_orientation(TriMesh& m);
// Area-weighted vertex normals, unit length (a zero normal where a vertex has no area).
std::vector<float> vertex_normals(const TriMesh& m);

// Counts for tests and reports.
struct MeshStats {
  int64_t boundary_edges = 0;      // edges with one face
  int64_t non_manifold_edges = 0;  // edges with more than two faces
  int64_t components = 0;          // connected through shared edges
  int64_t degenerate_faces = 0;    // repeated index or zero area
};
MeshStats mesh_stats(const TriMesh& m);

}  // namespace s3d::mesh
