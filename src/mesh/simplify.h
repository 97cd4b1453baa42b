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

// Which edge collapse does the work: our own shaped one (the default; collapse.h: it keeps
// triangles even and leaves few faces folded over their neighbours, which the atlas's charts
// need) or meshoptimizer's (the reference).
enum class SimplifyMethod { shaped, meshoptimizer };

// Internal: the knobs of the parallel path (spatial blocks; simplify.cpp says what it does),
// for tests and benchmarks. simplify(m, target) uses the defaults. Results depend on these,
// never on the thread count. Throws s3d::Error for a block knob < 1.
struct SimplifyOptions {
  int64_t parallel_min_faces = 200000;  // smaller inputs take the serial path
  int64_t block_faces = 60000;          // input faces per block, at least
  int64_t block_budget = 8000;          // output faces per block (share of the target), at least
  // Blocks at most. Each block's locked border is a seam that the seam pass and the second
  // round thin out. Before the second round, more blocks meant a worse surface (on a 2.3M-face
  // horse remeshed to 500,000 faces, the Hausdorff distance to the input was 1.61e-3 of the
  // diagonal with 64 blocks and 1.34e-3 with 16). With it, 64 blocks gave smaller distances
  // both ways (max and mean) than 16 on remeshed bunny, cat and horse at 500,000 and 1,000,000
  // faces (bunny at 1,000,000: max 1.15e-4 against 2.00e-4 of the diagonal, mean 5.0e-6
  // against 6.7e-6), in 0.6-0.9x the time: meshoptimizer's cost per face grows with the
  // block (one thread: 0.75 s for each of 16 blocks of 735,000 faces, 0.26 s for each of 32).
  int32_t max_blocks = 64;
  // A second round of blocks, cut across other directions, over the first round's output
  // before the serial final pass (simplify.cpp); false: the final pass takes all of it.
  bool second_round = true;
  // Faces whose largest angle is above this many degrees (caps: a corner almost on the
  // opposite edge) have that edge flipped afterwards like flat faces (flip_flat_faces,
  // clean.h); 180: flat faces only (the reference).
  double cap_degrees = 175;
  SimplifyMethod method = SimplifyMethod::shaped;
};
// What the parallel path did, for tests and reports.
struct SimplifyStats {
  // Blocks (of any round) left unsimplified because they lost a vertex that another block
  // uses (simplify.cpp: the locked borders).
  int64_t blocks_sent_back = 0;
  int64_t final_pass_faces = 0;    // faces handed to the serial final pass (0: none)
  int64_t flat_faces_flipped = 0;  // flat faces and caps flipped (flip_flat_faces, clean.h)
};
SimplifyStats simplify(TriMesh& m, int64_t target_faces, const SimplifyOptions& options);

}  // namespace s3d::mesh
