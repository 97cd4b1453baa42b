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

}  // namespace s3d::mesh
