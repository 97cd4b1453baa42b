// TRELLIS.2's remesh branch (CuMesh's remesh_narrow_band_dc): the iso-surface at distance
// band * voxel of the input surface's unsigned distance field, extracted by dual contouring on
// a sparse grid refined from 32^3 down to `resolution` only near the surface, then optionally
// pulled back toward the input surface.
#pragma once

#include <cstdint>

#include "mesh/bvh.h"
#include "mesh/mesh.h"

namespace s3d::mesh {

struct RemeshOptions {
  Vec3 center{0, 0, 0};
  float scale = 1;          // edge of the cube the grid covers
  int32_t resolution = 512; // a power of two times a number <= 32
  float band = 1;           // in voxels
  float project_back = 0;   // 0: none; 1: vertices moved onto the input surface
};

// `bvh` is over the input surface. Throws s3d::Error for a resolution that does not halve to
// 32 or below through even numbers, a band <= 0 or a project_back outside [0, 1].
TriMesh remesh_narrow_band_dc(const Bvh& bvh, const RemeshOptions& options);

}  // namespace s3d::mesh
