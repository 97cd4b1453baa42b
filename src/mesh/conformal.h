// Least-squares conformal maps (LSCM; Lévy, Petitjean, Ray and Maillot, 2002) of charts that
// no projection holds: the planar atlas's conformal charts (planar_atlas.cpp, docs/EXPORT.md
// "The atlas"). The sparse solve is Eigen's (Debian libeigen3-dev), included here only.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

namespace s3d::mesh {

// Plane coordinates for `positions` (a chart's vertices, in space) that make the triangles of
// `corners` (three local vertex indices per face) as nearly similar to their shapes in space
// as least squares allow. Only the faces with `weighted[f]` set enter the energy (a fold or a
// face without area has no shape to keep); two vertices far apart along the longest side of
// the chart's bounding box are pinned at their straight distance in space, so a flat chart
// keeps its scale and a bent one comes out smaller by its chord over its arc (the caller
// rescales). Returns false, `xy` untouched, when a vertex is in no weighted face, the
// pins coincide or the solver fails; else fills `xy` (one pair per vertex). The result is the
// same on every run (no threads inside; the solver's ordering is deterministic).
bool conformal_map(const std::vector<std::array<double, 3>>& positions,
                   const std::vector<int32_t>& corners, const std::vector<char>& weighted,
                   std::vector<std::array<double, 2>>& xy);

}  // namespace s3d::mesh
