#include "mesh/mesh.h"

#include <cmath>

#include "core/error.h"

namespace s3d::mesh {

void check_mesh(const TriMesh& m, const char* what) {
  S3D_CHECK(m.positions.size() % 3 == 0 && m.faces.size() % 3 == 0, what,
            ": positions and faces must be whole triples (", m.positions.size(), " and ",
            m.faces.size(), " values)");
  S3D_CHECK(m.num_faces() > 0, what, ": the mesh has no faces");
  const int64_t V = m.num_vertices();
  for (int64_t i = 0; i < V * 3; ++i) {
    S3D_CHECK(std::isfinite(m.positions[i]), what, ": vertex ", i / 3, " has a non-finite coordinate (",
              m.positions[i], ")");
  }
  const int64_t F = m.num_faces();
  for (int64_t f = 0; f < F; ++f) {
    for (int k = 0; k < 3; ++k) {
      const int32_t v = m.faces[3 * f + k];
      S3D_CHECK(v >= 0 && v < V, what, ": face ", f, " names vertex ", v, ", outside [0, ", V,
                ")");
    }
  }
}

}  // namespace s3d::mesh
