// UV unwrapping with xatlas (atlas.h), the reference method, and the dispatch between it and
// the planar atlas (planar_atlas.cpp). The whole mesh goes to xatlas as one mesh: its chart
// growing stands in for CuMesh's normal-cone clustering, and its LSCM / piecewise
// parameterisation and packer do the rest, as in to_glb.
//
// How atlas.h's ChartOptions map onto xatlas's:
// - cone_half_angle_rad -> normalDeviationWeight. xatlas grows a chart while the summed cost
//   of a face stays under maxCost (2); the normal term is weight * (1 - cos(angle to the
//   chart's normal)). Choosing weight = maxCost / (1 - cos(cone)) makes the normal term alone
//   reach maxCost at the cone's edge: 90 degrees gives 2, xatlas's own default. xatlas also
//   never takes a face past 1 - cos = 0.707 (about 73 degrees), whatever the weight.
// - global_iterations -> maxIterations (rounds of seeding and growing); at least 1.
// - refine_iterations, smooth_strength: no equivalent (xatlas fills holes and merges charts
//   inside every round); accepted and checked, otherwise unused.
// - faces_per_chart -> maxChartArea (that many mean face areas); faces_per_group -> spatial
//   groups passed as materials. Both keep ComputeCharts near linear and parallel (below).
// - texture_size, padding -> PackOptions resolution and padding, bilinear on. blockAlign off:
//   on a 200k-face mesh (16 cores) it packed no faster (1.23 s against 1.19 s) and a little
//   looser (utilisation 0.589 against 0.592). texelsPerUnit stays 0, so xatlas estimates the
//   scale for about that resolution and packs into one atlas that it grows as needed (it
//   comes out larger than asked, e.g. 2550 x 2557 for 2048, and not quite square); the UVs
//   are divided by the atlas's own width and height, so the padding shrinks by that ratio in
//   the final texture.
// - threads: xatlas runs its own pool of std::thread::hardware_concurrency() - 1 workers plus
//   the caller, with no run-time setting (only XA_MULTITHREADED=0 at compile time, which makes
//   it serial), so `threads` is not honoured. Its output does not depend on the scheduling.
#include "mesh/atlas.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "core/error.h"
#include "mesh/bake.h"
#include "xatlas.h"

namespace s3d::mesh {
void check_atlas_input(const TriMesh& m, const ChartOptions& options) {
  check_mesh(m, "uv_unwrap");
  check_chart_options(options);
  S3D_CHECK(m.num_vertices() < (int64_t(1) << 31) && m.num_faces() * 3 < (int64_t(1) << 31),
            "uv_unwrap: the mesh is too large for 32-bit indices (", m.num_vertices(),
            " vertices, ", m.num_faces(), " faces)");
}

namespace {

struct AtlasDeleter {
  void operator()(xatlas::Atlas* a) const { xatlas::Destroy(a); }
};
using AtlasPtr = std::unique_ptr<xatlas::Atlas, AtlasDeleter>;

}  // namespace

void check_chart_options(const ChartOptions& o) {
  S3D_CHECK(std::isfinite(o.cone_half_angle_rad) && o.cone_half_angle_rad > 0 &&
                o.cone_half_angle_rad <= 3.1415927f,
            "uv_unwrap: cone_half_angle_rad must be in (0, pi], got ", o.cone_half_angle_rad);
  S3D_CHECK(o.refine_iterations >= 0, "uv_unwrap: refine_iterations must be >= 0, got ",
            o.refine_iterations);
  S3D_CHECK(o.global_iterations >= 0 && o.global_iterations <= 1000,
            "uv_unwrap: global_iterations must be in [0, 1000], got ", o.global_iterations);
  S3D_CHECK(std::isfinite(o.smooth_strength) && o.smooth_strength >= 0,
            "uv_unwrap: smooth_strength must be finite and >= 0, got ", o.smooth_strength);
  S3D_CHECK(o.texture_size >= 8 && o.texture_size <= 32768,
            "uv_unwrap: texture_size must be in [8, 32768], got ", o.texture_size);
  S3D_CHECK(o.padding >= 0 && o.padding <= o.texture_size / 8,
            "uv_unwrap: padding must be in [0, texture_size / 8], got ", o.padding);
  S3D_CHECK(o.threads >= 0, "uv_unwrap: threads must be >= 0, got ", o.threads);
  S3D_CHECK(o.faces_per_chart >= 0 && o.faces_per_group >= 0,
            "uv_unwrap: faces_per_chart and faces_per_group must be >= 0, got ", o.faces_per_chart,
            " and ", o.faces_per_group);
  S3D_CHECK(std::isfinite(o.planar_cone_rad) && o.planar_cone_rad > 0.01f &&
                o.planar_cone_rad < 1.5f,
            "uv_unwrap: planar_cone_rad must be in (0.01, 1.5) radians, got ", o.planar_cone_rad);
  S3D_CHECK(o.method == AtlasMethod::planar || o.method == AtlasMethod::xatlas ||
                o.method == AtlasMethod::conformal,
            "uv_unwrap: unknown atlas method ", int(o.method));
}

namespace {

// xatlas grows a chart face by face and refits, reprojects and re-checks the whole chart at
// every step, so a chart of S faces costs O(S^2): with 90-degree cones the charts of a 1M-face
// mesh hold tens of thousands of faces and ComputeCharts would run for hours. Hence
// ChartOptions::faces_per_chart (a cap on a chart's area, in mean face areas: xatlas's
// maxChartArea) and faces_per_group (materials, which charts never cross, so that xatlas's
// pool grows the groups' charts in parallel; one connected piece is otherwise one task).
double surface_area(const TriMesh& m) {
  double area = 0;
#pragma omp parallel for schedule(static) reduction(+ : area) if (m.num_faces() > 16384)
  for (int64_t f = 0; f < m.num_faces(); ++f) {
    const Vec3 a = m.vertex(m.faces[3 * f]), b = m.vertex(m.faces[3 * f + 1]),
               c = m.vertex(m.faces[3 * f + 2]);
    area += 0.5 * double(length(cross(b - a, c - a)));
  }
  return area;
}

// Recursive median cuts of the face centroids along the longest axis, until every group has at
// most `limit` faces. Ties break on the face index, so the groups are reproducible.
std::vector<uint32_t> spatial_groups(const TriMesh& m, int64_t limit) {
  const int64_t F = m.num_faces();
  std::vector<float> centroid(3 * F);
  for (int64_t f = 0; f < F; ++f)
    for (int k = 0; k < 3; ++k)
      centroid[3 * f + k] =
          (m.positions[3 * m.faces[3 * f] + k] + m.positions[3 * m.faces[3 * f + 1] + k] +
           m.positions[3 * m.faces[3 * f + 2] + k]) /
          3.0f;
  std::vector<int32_t> order(F);
  for (int64_t f = 0; f < F; ++f) order[f] = static_cast<int32_t>(f);
  std::vector<uint32_t> group(F, 0);
  std::vector<std::pair<int64_t, int64_t>> todo = {{0, F}};
  uint32_t next = 0;
  while (!todo.empty()) {
    const auto [lo, hi] = todo.back();
    todo.pop_back();
    if (hi - lo <= limit) {
      for (int64_t i = lo; i < hi; ++i) group[order[i]] = next;
      ++next;
      continue;
    }
    float bmin[3] = {INFINITY, INFINITY, INFINITY}, bmax[3] = {-INFINITY, -INFINITY, -INFINITY};
    for (int64_t i = lo; i < hi; ++i)
      for (int k = 0; k < 3; ++k) {
        bmin[k] = std::min(bmin[k], centroid[3 * order[i] + k]);
        bmax[k] = std::max(bmax[k], centroid[3 * order[i] + k]);
      }
    int axis = 0;
    for (int k = 1; k < 3; ++k)
      if (bmax[k] - bmin[k] > bmax[axis] - bmin[axis]) axis = k;
    const int64_t mid = lo + (hi - lo) / 2;
    std::nth_element(order.begin() + lo, order.begin() + mid, order.begin() + hi,
                     [&](int32_t a, int32_t b) {
                       const float ca = centroid[3 * a + axis], cb = centroid[3 * b + axis];
                       return ca < cb || (ca == cb && a < b);
                     });
    todo.push_back({mid, hi});
    todo.push_back({lo, mid});
  }
  return group;
}

xatlas::ChartOptions to_xatlas(const ChartOptions& o, double mean_face_area) {
  xatlas::ChartOptions c;
  const float deviation = 1.0f - std::cos(o.cone_half_angle_rad);
  c.normalDeviationWeight = c.maxCost / std::max(deviation, 1e-4f);
  c.maxIterations = static_cast<uint32_t>(std::max(1, o.global_iterations));
  if (o.faces_per_chart > 0)
    c.maxChartArea = static_cast<float>(mean_face_area * double(o.faces_per_chart));
  return c;
}

xatlas::PackOptions to_xatlas_pack(const ChartOptions& o) {
  xatlas::PackOptions p;
  p.resolution = static_cast<uint32_t>(o.texture_size);
  p.padding = static_cast<uint32_t>(o.padding);
  p.bilinear = true;
  p.blockAlign = false;
  return p;
}

// xatlas prints warnings through printf by default; the layer reports through exceptions.
void silence_xatlas() {
  static std::once_flag once;
  std::call_once(once, [] { xatlas::SetPrint(nullptr, false); });
}

UvMesh gather(const TriMesh& m, const xatlas::Atlas& a) {
  S3D_CHECK(a.meshCount == 1 && a.atlasCount <= 1, "uv_unwrap: xatlas returned ", a.meshCount,
            " meshes in ", a.atlasCount, " atlases, expected one");
  S3D_CHECK(a.width > 0 && a.height > 0 && a.chartCount > 0,
            "uv_unwrap: no face of the mesh has an area that can be charted (", m.num_faces(),
            " faces)");
  const xatlas::Mesh& xm = a.meshes[0];
  S3D_CHECK(int64_t(xm.indexCount) == m.num_faces() * 3, "uv_unwrap: xatlas returned ",
            xm.indexCount / 3, " faces for ", m.num_faces());
  UvMesh out;
  const int64_t V = xm.vertexCount;
  out.positions.resize(3 * V);
  out.uvs.resize(2 * V);
  out.vertex_of.resize(V);
  const float sx = 1.0f / static_cast<float>(a.width), sy = 1.0f / static_cast<float>(a.height);
#pragma omp parallel for schedule(static) if (V > 16384)
  for (int64_t v = 0; v < V; ++v) {
    const xatlas::Vertex& xv = xm.vertexArray[v];
    const int64_t src = xv.xref;
    out.vertex_of[v] = static_cast<int32_t>(src);
    for (int k = 0; k < 3; ++k) out.positions[3 * v + k] = m.positions[3 * src + k];
    // Ignored faces (zero area) keep xatlas's (0, 0); rounding can put a corner a hair past 1.
    out.uvs[2 * v] = std::clamp(xv.uv[0] * sx, 0.0f, 1.0f);
    out.uvs[2 * v + 1] = std::clamp(xv.uv[1] * sy, 0.0f, 1.0f);
  }
  out.faces.assign(xm.indexArray, xm.indexArray + xm.indexCount);
  out.num_charts = static_cast<int32_t>(a.chartCount);
  return out;
}

}  // namespace

UvMesh uv_unwrap(const TriMesh& m, const ChartOptions& options) {
  check_chart_options(options);
  return options.method == AtlasMethod::xatlas ? xatlas_unwrap(m, options)
                                               : planar_unwrap(m, options);
}

UvMesh xatlas_unwrap(const TriMesh& m, const ChartOptions& options) {
  check_atlas_input(m, options);
  silence_xatlas();
  AtlasPtr atlas(xatlas::Create());
  xatlas::MeshDecl decl;
  decl.vertexPositionData = m.positions.data();
  decl.vertexPositionStride = 3 * sizeof(float);
  decl.vertexCount = static_cast<uint32_t>(m.num_vertices());
  decl.indexData = m.faces.data();
  decl.indexCount = static_cast<uint32_t>(m.faces.size());
  decl.indexFormat = xatlas::IndexFormat::UInt32;
  std::vector<uint32_t> groups;
  if (options.faces_per_group > 0 && m.num_faces() > options.faces_per_group) {
    groups = spatial_groups(m, options.faces_per_group);
    decl.faceMaterialData = groups.data();
  }
  const xatlas::AddMeshError err = xatlas::AddMesh(atlas.get(), decl);
  S3D_CHECK(err == xatlas::AddMeshError::Success, "uv_unwrap: xatlas refused the mesh (",
            xatlas::StringForEnum(err), ")");
  xatlas::ComputeCharts(atlas.get(), to_xatlas(options, surface_area(m) / double(m.num_faces())));
  xatlas::PackCharts(atlas.get(), to_xatlas_pack(options));
  return gather(m, *atlas);
}

AtlasStats atlas_stats(const UvMesh& m, int32_t resolution) {
  // rasterize_uv (bake.cpp) checks the mesh and the resolution.
  const UvRaster raster = rasterize_uv(m, resolution);
  int64_t covered = 0;
  for (const int32_t f : raster.face) covered += f >= 0;
  AtlasStats s;
  s.utilization = double(covered) / (double(resolution) * resolution);
  // xatlas's packer turns a chart by swapping u and v, which mirrors it, so orientation is
  // judged per chart: a face is flipped when it disagrees with the majority of its chart.
  // Charts are recovered as the faces connected through shared output vertices (seams split
  // vertices, so no vertex is shared between charts).
  const int64_t F = m.num_faces();
  std::vector<int32_t> parent(F);
  for (int64_t f = 0; f < F; ++f) parent[f] = static_cast<int32_t>(f);
  auto root = [&](int32_t f) {
    while (parent[f] != f) f = parent[f] = parent[parent[f]];
    return f;
  };
  std::vector<int32_t> first_face(m.num_vertices(), -1);
  std::vector<int8_t> sign(F);
  int64_t empty = 0;
  for (int64_t f = 0; f < F; ++f) {
    const int32_t* t = &m.faces[3 * f];
    const float* a = &m.uvs[2 * t[0]];
    const float* b = &m.uvs[2 * t[1]];
    const float* c = &m.uvs[2 * t[2]];
    const double area = (double(b[0]) - a[0]) * (double(c[1]) - a[1]) -
                        (double(b[1]) - a[1]) * (double(c[0]) - a[0]);
    sign[f] = area > 0 ? 1 : (area < 0 ? -1 : 0);
    empty += area == 0;
    for (int k = 0; k < 3; ++k) {
      int32_t& owner = first_face[t[k]];
      if (owner < 0)
        owner = static_cast<int32_t>(f);
      else
        parent[root(static_cast<int32_t>(f))] = root(owner);
    }
  }
  std::vector<int64_t> positive(F, 0), negative(F, 0);
  for (int64_t f = 0; f < F; ++f) {
    const int32_t r = root(static_cast<int32_t>(f));
    positive[r] += sign[f] > 0;
    negative[r] += sign[f] < 0;
  }
  int64_t flipped = 0;
  for (int64_t f = 0; f < F; ++f)
    if (parent[f] == f) flipped += std::min(positive[f], negative[f]);
  s.flipped_or_empty = empty + flipped;
  return s;
}

}  // namespace s3d::mesh
