// The planar atlas's charts as its two parts share them (internal: planar_atlas.cpp makes,
// parameterizes and splits the charts; atlas_packing.cpp places them in the texture). Not
// installed, not part of the API (atlas.h is).
#pragma once

#include <array>
#include <cstdint>
#include <vector>

namespace s3d::mesh::atlas {

using D3 = std::array<double, 3>;

// One chart: its faces, its vertices (input indices, ascending; one more than once where a
// chart of several groups has a seam inside, parameterize()), the corners as local vertex
// indices, and the local vertices' planar coordinates in world units, the smallest bounding
// rectangle's corner at the origin, its long side along x.
struct Chart {
  std::vector<int32_t> faces;
  std::vector<int32_t> verts;
  std::vector<int32_t> corners;
  std::vector<double> xy;
  D3 seed_axis{0, 0, 1};
  double w = 0, h = 0;
  double area = 0;  // of its faces, in the plane
  // A conformal chart (conformal_charts): its plane coordinates, per corner (six per face),
  // as the conformal map laid it out; its pieces keep theirs (a piece of a valid layout is
  // valid). Empty for a projected chart.
  std::vector<double> fixed;
  bool conformal() const { return !fixed.empty(); }
};

// Where a packed chart goes: its margin box's corner in texels, and its quarter turns.
struct Placement {
  double x = 0, y = 0;  // texels: the chart's margin box corner
  int turns = 0;  // quarter turns counter-clockwise (rotations, so the winding is kept)
};

// The largest common scale (texels per unit length) at which every chart fits a size^2
// texture with `padding` texels between charts, and where each chart goes (`out`, by chart).
// reference: ChartOptions::pack_reference (the gap search that asks every column again, and
// every scale tried packed to its end). `finished`, when given, counts the tries of the skyline
// that ran to their end (fitted or failed) rather than being given up.
// Throws when the charts do not fit even at the smallest scale.
double pack(const std::vector<Chart>& charts, int32_t size, int32_t padding, bool reference,
            std::vector<Placement>& out, int* finished = nullptr);

// The UV (in [0, 1]) of each of the chart's local vertices, placed at `p` and `scale`.
std::vector<float> chart_uvs(const Chart& c, const Placement& p, double scale, int32_t size,
                             int32_t padding);

}  // namespace s3d::mesh::atlas
