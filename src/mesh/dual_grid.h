// TRELLIS.2's O-Voxel shape representation, the "flexible dual grid": a sparse set of voxels of
// a regular grid over an axis-aligned box, each with a dual vertex inside it (in voxel units,
// [0, 1]^3 from the voxel's low corner) and three flags saying whether the surface crosses the
// grid edge along x, y and z that spans the voxel at its HIGH corner in the two other axes
// (for x: grid vertex (x, y+1, z+1) to (x+1, y+1, z+1)), as o-voxel defines them. Its mesh is
// what the shape decoder hands to to_glb: one quad per flagged edge whose four surrounding
// voxels are all present, split in two triangles as o-voxel splits it (dual_grid.cpp).
//
// voxelize_dual_grid is the encoder side (o-voxel's mesh_to_flexible_dual_grid, written anew:
// docs/EXPORT.md), used by the export judge to turn real meshes into decoder-like inputs.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "mesh/mesh.h"

namespace s3d::mesh {

struct GridBox {
  Vec3 lo{-0.5f, -0.5f, -0.5f};
  Vec3 hi{0.5f, 0.5f, 0.5f};
  std::array<int32_t, 3> size{64, 64, 64};  // voxels per axis
  Vec3 voxel_size() const {
    return {(hi[0] - lo[0]) / size[0], (hi[1] - lo[1]) / size[1], (hi[2] - lo[2]) / size[2]};
  }
};

struct DualGrid {
  std::vector<int32_t> coords;        // 3 per voxel: x, y, z in [0, size)
  std::vector<float> dual_vertices;   // 3 per voxel, in voxel units from the voxel's low corner
  // 3 per voxel, the edges along x, y, z: 0 not crossed; 1 crossed (what the decoder network
  // gives; the quad faces -axis, o-voxel's winding); 2 crossed by a surface facing +axis
  // (winding reversed). voxelize_dual_grid writes 1 and 2 so that its meshes come out oriented.
  std::vector<uint8_t> intersected;
  int64_t num_voxels() const { return static_cast<int64_t>(coords.size() / 3); }
};

// Every voxel whose closed box the surface touches; its dual vertex minimises the squared
// distances to the planes of the surface pieces inside it, weighted by their areas and
// regularised toward their centroid (weight 0.1), within the voxel; an edge is flagged when the
// surface crosses it an odd number of times (exact, with consistent tie-breaking: a watertight
// surface inside the box gives a closed mesh). Voxels sorted by (x, y, z). Surface outside the
// box is dropped (an empty grid when none is inside). Throws s3d::Error on an unusable mesh or
// box (a size outside 1..65536, bounds not finite or hi <= lo).
DualGrid voxelize_dual_grid(const TriMesh& surface, const GridBox& box);

// The decoder's mesh extraction (flexible_dual_grid_to_mesh with no split weights): vertex i is
// voxel i's dual vertex, (coord + dual) * voxel_size + lo, referenced or not; faces in voxel,
// then axis order. An empty grid gives an empty mesh. Throws s3d::Error on arrays of unequal
// lengths, a voxel outside the grid or repeated, a non-finite dual vertex, a flag above 2.
TriMesh dual_grid_to_mesh(const DualGrid& grid, const GridBox& box);

}  // namespace s3d::mesh
