// Simplification to a face budget (TRELLIS.2's to_glb: CuMesh's GPU edge collapse; here
// meshoptimizer's quadric edge collapse on the CPU, docs/EXPORT.md says why).
#pragma once

#include <cstdint>

#include "mesh/mesh.h"

namespace s3d::mesh {

// Leaves the mesh untouched when it has at most `target_faces` faces; otherwise collapses
// edges until it has at most `target_faces` (never more: if the simplifier stalls above the
// target with its error bound, the bound is relaxed and it runs again). Unreferenced vertices
// are removed. Throws s3d::Error for target_faces < 1.
void simplify(TriMesh& m, int64_t target_faces);

// Internal: the knobs of the parallel path (spatial blocks; simplify.cpp says what it does),
// for tests and benchmarks. simplify(m, target) uses the defaults. Results depend on these,
// never on the thread count. Throws s3d::Error for a block knob < 1.
struct SimplifyOptions {
  int64_t parallel_min_faces = 200000;  // smaller inputs take the serial path
  int64_t block_faces = 60000;          // input faces per block, at least
  int64_t block_budget = 8000;          // output faces per block (share of the target), at least
  // Blocks at most. Each block's locked border is a seam the later passes thin out less
  // well: on a 2.3M-face horse remeshed to 500,000 faces, the Hausdorff distance to the input
  // was 1.61e-3 of the diagonal with 64 blocks, 1.57e-3 with 24, 1.34e-3 with 16, 1.28e-3
  // with 8 and 1.36e-3 serial; 16 keeps a 16-core machine busy.
  int32_t max_blocks = 16;
};
void simplify(TriMesh& m, int64_t target_faces, const SimplifyOptions& options);

}  // namespace s3d::mesh
