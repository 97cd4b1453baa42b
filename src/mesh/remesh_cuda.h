// The remesh (remesh.h) on the GPU, for a BVH on the device: the CPU's mesh bit for bit
// (remesh_cuda.cu says how). Private to the mesh layer; remesh_narrow_band_dc chooses.
#pragma once

#include <cstdint>

#include "mesh/bvh.h"
#include "mesh/mesh.h"
#include "mesh/remesh.h"

namespace s3d::mesh::detail {

// Options checked by the caller; `base` the coarsest resolution, eps the band's distance.
TriMesh remesh_on_device(const Bvh& bvh, const RemeshOptions& options, int32_t base, float eps,
                         RemeshStats& stats);

// Throws s3d::Error when a level of the band search would hold more than its limit of voxels
// (`children` candidates at resolution `res`). Defined in remesh.cpp, shared by both paths.
void check_level_size(int64_t children, int32_t res);

}  // namespace s3d::mesh::detail
