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
  // Drop the surfaces around cavities: every quad whose outer side (the corner of its edge
  // outside the band) lies in space outside the band that no path outside the band joins to
  // the grid's border (a flood fill over the band search's own levels, remesh_rules.h). They
  // can never be seen from outside the mesh: the inner shell of a solid, the two inner sides of
  // a closed wall. Should the fill reach no quad's outer side at all (the band covers the whole
  // border), every quad stays and RemeshStats::cavities_kept_all says so.
  bool drop_cavities = false;
  // On the GPU when the BVH is on the device (Bvh::use_device): the same mesh bit for bit.
  // false: the CPU reference path.
  bool use_device = true;
};

// What a run did and how long each phase took (seconds), for reports and benchmarks.
struct RemeshStats {
  int64_t voxels = 0;         // at the finest level
  int64_t grid_vertices = 0;  // their corners, each once (one distance query each)
  int64_t udf_queries = 0;    // all levels and the corners
  double refine_s = 0;        // coarse-to-fine band search (its distance queries included)
  double vertex_udf_s = 0;    // the corners' distances
  double contour_s = 0;       // dual vertices, quads, triangles
  double project_s = 0;       // project_back
  int64_t cavity_quads = 0;   // quads drop_cavities dropped
  bool cavities_kept_all = false;  // drop_cavities would have dropped every quad: none dropped
  double cavities_s = 0;      // drop_cavities' fill (its band-search bookkeeping not included)
};

// `bvh` is over the input surface. The result is the boundary of the band {udf < band voxels},
// faces wound outward from the band (so a closed input gives two shells, the inner one facing
// inward); where the band reaches the cube's faces it is left open; an empty mesh when the band
// misses the cube. Throws s3d::Error for a resolution that does not halve to 32 or below
// through even numbers (or above 16384), a scale or band <= 0, a project_back outside [0, 1], a
// non-finite center, and when a level of the band search would hold more than 2^27 voxels;
// on the GPU path also when device memory runs out (the caller may retry on the CPU).
TriMesh remesh_narrow_band_dc(const Bvh& bvh, const RemeshOptions& options,
                              RemeshStats* stats = nullptr);

}  // namespace s3d::mesh
