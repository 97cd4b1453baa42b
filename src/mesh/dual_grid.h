// TRELLIS.2's O-Voxel shape representation, the "flexible dual grid": a sparse set of voxels of
// a regular grid over an axis-aligned box, each with a dual vertex inside it (in voxel units,
// [0, 1]^3 from the voxel's low corner) and three flags saying whether the surface crosses the
// grid edge along x, y and z that starts at the voxel's low corner. Its mesh is what the shape
// decoder hands to to_glb: one quad per flagged edge whose four surrounding voxels are all
// present, split into the two triangles whose normals agree best.
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
  std::vector<uint8_t> intersected;   // 3 per voxel: the edges along x, y, z at the low corner
  int64_t num_voxels() const { return static_cast<int64_t>(coords.size() / 3); }
};

// Every voxel the surface passes through; its dual vertex minimises the squared distances to
// the planes of the surface pieces inside it (regularised toward their centroid); an edge is
// flagged when the surface crosses it an odd number of times (sign change of the crossing
// count). Voxels sorted by (x, y, z).
DualGrid voxelize_dual_grid(const TriMesh& surface, const GridBox& box);

// The decoder's mesh extraction (flexible_dual_grid_to_mesh with no split weights).
TriMesh dual_grid_to_mesh(const DualGrid& grid, const GridBox& box);

}  // namespace s3d::mesh
