#include "mesh/mesh.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>

#include "core/error.h"

namespace s3d::mesh {
void check_mesh(const TriMesh& m, const char* what) {
  S3D_CHECK(m.positions.size() % 3 == 0 && m.faces.size() % 3 == 0, what,
            ": positions and faces must be whole triples (", m.positions.size(), " and ",
            m.faces.size(), " values)");
  S3D_CHECK(m.num_faces() > 0, what, ": the mesh has no faces");
  // Every stage checks its input, several of them the decoded mesh of millions of faces: the
  // scans run on all threads, and the first offender (the lowest index) is the one named.
  const int64_t V = m.num_vertices(), F = m.num_faces();
  int64_t bad_value = INT64_MAX, bad_index = INT64_MAX;
#pragma omp parallel for schedule(static) reduction(min : bad_value) if (V >= kParallelMin)
  for (int64_t i = 0; i < V * 3; ++i)
    if (!std::isfinite(m.positions[i])) bad_value = std::min(bad_value, i);
  S3D_CHECK(bad_value == INT64_MAX, what, ": vertex ", bad_value / 3,
            " has a non-finite coordinate (",
            bad_value == INT64_MAX ? 0.0f : m.positions[bad_value], ")");
#pragma omp parallel for schedule(static) reduction(min : bad_index) if (F >= kParallelMin)
  for (int64_t i = 0; i < F * 3; ++i)
    if (m.faces[i] < 0 || m.faces[i] >= V) bad_index = std::min(bad_index, i);
  S3D_CHECK(bad_index == INT64_MAX, what, ": face ", bad_index / 3, " names vertex ",
            bad_index == INT64_MAX ? 0 : m.faces[bad_index], ", outside [0, ", V, ")");
}

}  // namespace s3d::mesh
