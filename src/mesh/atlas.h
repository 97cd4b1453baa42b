// UV atlas: charts, their parameterization and their packing into the unit square
// (TRELLIS.2's to_glb: CuMesh's normal-cone chart clustering, then xatlas per chart). Two
// methods (docs/EXPORT.md): our own planar charts packed at exactly the texture size (the
// default), and xatlas, compiled from its source (the reference: the original's library).
#pragma once

#include <cstdint>
#include <vector>

#include "mesh/mesh.h"

namespace s3d::mesh {

// conformal: the planar atlas with conformal charts first (planar_unwrap).
enum class AtlasMethod : uint8_t { planar, xatlas, conformal };

struct ChartOptions {
  AtlasMethod method = AtlasMethod::planar;
  float cone_half_angle_rad = 1.5707964f;  // mesh_cluster_threshold_cone_half_angle_rad
  int32_t refine_iterations = 0;           // mesh_cluster_refine_iterations
  int32_t global_iterations = 1;           // mesh_cluster_global_iterations
  float smooth_strength = 1;               // mesh_cluster_smooth_strength
  int32_t texture_size = 2048;             // the packer's resolution (texels)
  // planar: charts' geometry at least padding + 1 texels apart, so that bilinear lookups
  // never mix two charts; xatlas: its PackOptions::padding.
  int32_t padding = 1;
  int32_t threads = 0;                     // xatlas: 0: all cores (planar: OpenMP's setting)
  // planar: a chart's smoothed face normals stay within min(this, cone_half_angle_rad) of its
  // seed's, and no face's own normal turns more than 75 degrees from the chart's projection
  // axis, so the projection never flips a face and most faces shrink by at most cos(cone).
  float planar_cone_rad = 0.7853982f;
  // planar: the packing without its shortcuts, as their reference: the gap search asks
  // every column of a chart again after each lift, tallest band first (instead of remembering
  // how far up each column's answer holds, 12% faster on regr01 at 1,000,000 faces / 4096,
  // and asking first the bands that refused last, 37% faster there), and every scale
  // tried is packed to its end (instead of giving up a try once a larger scale has fitted:
  // 2.3x less packing time on two cores there). The same atlas, bit for bit.
  bool pack_reference = false;
  // xatlas's cost grows with the square of a chart's face count, and it grows the charts of
  // one connected piece on one thread (atlas.cpp): charts are capped at this many mean face
  // areas, and meshes cut into spatial groups of at most this many faces (seams between
  // them) that grow in parallel. 0 turns either off.
  int32_t faces_per_chart = 1000;
  int32_t faces_per_group = 8192;
};

struct UvMesh {
  std::vector<float> positions;    // 3 per output vertex
  std::vector<float> uvs;          // 2 per output vertex, in [0, 1]
  std::vector<int32_t> faces;      // 3 per face, into the output vertices
  std::vector<int32_t> vertex_of;  // per output vertex: the input vertex it copies
  int32_t num_charts = 0;
  int64_t num_vertices() const { return static_cast<int64_t>(uvs.size() / 2); }
  int64_t num_faces() const { return static_cast<int64_t>(faces.size() / 3); }
};

// Every input face appears once in the output (same order is not promised); vertices are
// split along chart seams. Throws s3d::Error on an unusable mesh. Dispatches on
// options.method to one of the two below.
UvMesh uv_unwrap(const TriMesh& m, const ChartOptions& options);

// Charts grown over edge-adjacent faces whose smoothed normals stay within planar_cone_rad of
// the seed face's (small leftovers merged into a neighbour); each projected onto the plane of its mean normal, turned to its smallest bounding
// rectangle, and packed at one scale (texels per unit length, the same for every chart) into
// exactly texture_size^2 with `padding` + 1 texels between charts; a chart whose projection
// overlaps itself is split until it does not, except where the overlapping faces are
// neighbours on the surface (a fold within a face or two, whose shared texels the bake gives
// nearly the same value from either). planar_atlas.cpp.
UvMesh planar_unwrap(const TriMesh& m, const ChartOptions& options);
// xatlas over the whole mesh (atlas.cpp).
UvMesh xatlas_unwrap(const TriMesh& m, const ChartOptions& options);

// Throws s3d::Error naming the first option out of range.
void check_chart_options(const ChartOptions& options);
// The checks both methods make first: the mesh (check_mesh), the options, 32-bit indices.
void check_atlas_input(const TriMesh& m, const ChartOptions& options);

// Atlas figures for reports and tests: the fraction of the unit square covered by charts
// (rasterised at `resolution`), and the number of faces whose UV triangle is flipped or empty.
struct AtlasStats {
  double utilization = 0;
  int64_t flipped_or_empty = 0;
};
AtlasStats atlas_stats(const UvMesh& m, int32_t resolution);

}  // namespace s3d::mesh
