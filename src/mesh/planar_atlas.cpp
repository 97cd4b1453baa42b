// The planar atlas (atlas.h, AtlasMethod::planar): our own charts, parameterization and
// packing, in place of xatlas.
//
// Why our own: TRELLIS.2's to_glb spends most of its time in xatlas (CuMesh clusters the mesh
// by normal cones, then xatlas re-charts, parameterizes and packs each cluster), and xatlas
// run over our whole mesh costs 7-20 s for 0.5-1 M faces even with its charts capped and
// grown in parallel groups; it also sizes its own atlas (2550^2 for a 2048 texture), so the
// charts lose texels when that atlas is scaled into the texture. The meshes here come out of
// dual contouring and simplification: even triangles on a smooth surface, where a chart whose
// normals stay inside a cone projects onto a plane with small, bounded stretch. So:
//
// 1. Charts: breadth-first growth over edge-adjacent faces (an edge of more than two faces
//    pairs them, face_neighbours)
//    from the lowest unassigned face, taking a face when its smoothed normal is within the
//    cone of the seed's and its own normal within 75 degrees (the hard bound that keeps the
//    projection from flipping it); then charts of a few faces merged into a neighbour (by the
//    cone where one holds them, else by the hard bound alone, or as folds: faces flipped over
//    their neighbours, mirrored). Linear in the faces and serial, so reproducible.
// 2. Parameterization: each chart projected onto a plane: that of its area-weighted mean
//    normal or of its seed's, whichever turns its most turned face less, so no face flips and
//    no face shrinks by more than cos(75 degrees) (most by at most cos(cone)); then turned to
//    its smallest bounding rectangle (one side on a convex-hull edge), long side along u.
// 3. Packing: at the largest common scale that fits exactly texture_size^2 with `padding` + 1
//    texels between charts, so that every chart has the same texels per unit length and the
//    whole texture is used: charts tallest first on a skyline of their own column profiles
//    (ragged charts interlock), the scale searched with many tries at once, starting from
//    what plain shelves of bounding boxes reach (atlas_packing.cpp).
// 4. Overlaps: a chart can still overlap itself: a surface that winds over itself within the
//    cone (layers, spirals), or folds within a face or two (the noise of a remeshed and
//    simplified surface). Folds are left alone: the faces involved are neighbours and the
//    texels they share would be baked alike from either. Any other pair of overlapping
//    triangles (found exactly in the plane, on a grid) splits its chart in two, each face going
//    with the nearer of the two; then, after packing, every chart is rasterized at the final
//    scale with the bake's own rules, and a texel centre still covered twice (by no
//    neighbours) splits again and packs anew.
// 5. Sparse charts: a chart filling little of its box (a strip bent at a knee) is split in two
//    from the ends of its long side before packing (sparse_chart_ends): a box mostly empty is
//    texture lost, whatever packs around it.
// 6. Thin charts: a chart narrower than a few texels (the rim of a thin part, a strip along a
//    crease) is mostly margin; it is attached to a neighbour chart, unfolded onto that chart's
//    plane about the crease between them (attach_thin_charts, layout()), where no face of it
//    then turns over or changes its area much.
#include <omp.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "core/error.h"
#include "mesh/atlas.h"
#include "mesh/atlas_chart.h"
#include "mesh/bake.h"
#include "mesh/conformal.h"
#include "mesh/timing.h"

namespace s3d::mesh {
namespace {

using atlas::Chart;
using atlas::D3;
using atlas::Placement;
using Pairs = std::vector<std::pair<int32_t, int32_t>>;  // seed face pairs of a chart's split

constexpr int kMaxSplitRounds = 400;  // rounds of exact splits in the plane (split_until_clean)
constexpr int kMaxPackRounds = 40;    // packings, each after splits at the packed scale
constexpr int kSmoothPasses = 2;      // rounds of normal averaging over edge neighbours
constexpr int kBorderPasses = 4;      // rounds of border smoothing (smooth_borders)
// after the others, one at a time: the few large charts the splits leave would otherwise each
// hold one thread while the rest wait.
constexpr int32_t kParallelOverlapFaces = 16384;
// A chart's faces are searched in up to this many blocks, and the first overlap of each block
// splits it in the same round (split()): one pair a round had peeled a few faces at a time
// off a chart that overlaps itself in many places (regr01 at 1,000,000 faces: 43 rounds).
constexpr int32_t kOverlapBlocks = 64;
constexpr int32_t kOverlapBlockFaces = 256;  // and blocks of at least this many faces
constexpr size_t kSmallChart = 32;    // faces; smaller charts are merged into a neighbour
constexpr size_t kTinyChart = 4;      // faces; smaller ones also by the hard bound alone
// A chart covering less than kMinFill of its bounding box, which is at least kSparseBox of
// all charts' area, is split in two from its ends (sparse_chart_ends), up to kSparseRounds
// times; less than kMinFillLarge when the box is at least kLargeBox of that area. A large
// ragged chart costs the packing more than a small one: with caps flipped (simplify.h) the
// horse's largest chart grew to 49,248 faces in a box half the texture wide, filled 0.35, and
// the texture's use fell from 0.602 to 0.564 at 500,000 / 2048; 0.45 for every chart cost
// regr01 (0.484 -> 0.461), 0.45 for boxes of 1% or more of the area costs none of the six
// meshes (docs/EXPORT.md, "Caps").
constexpr double kMinFill = 0.35;
constexpr double kMinFillLarge = 0.45;
constexpr double kLargeBox = 0.01;
constexpr double kSparseBox = 1e-3;
constexpr int kSparseRounds = 3;
// Charts narrower than kThinTexels at the scale that covers kThinShare of the texture are
// attached to a neighbour (attach_thin_charts) when unfolding turns no face over and changes
// no face's area in the plane by more than (1 - kUnfoldKeep) of its area in space.
constexpr double kThinTexels = 4;
constexpr double kThinShare = 0.5;
constexpr double kUnfoldKeep = 0.5;
// An unfolded face may grow in the plane to this share of its area in space (the shared
// vertices of a crease that is not straight pull it); projected faces keep at most all of it.
constexpr double kUnfoldMostGrowth = 1.25;
// A group whose axis is turned further than acos(kMostOpposed) from its host's (a sheet folded
// back flat) is not turned onto it: it is projected as it lies.
constexpr double kMostOpposed = -0.9;
// No face is turned further than this from its chart's projection axis (stretch <= 1 / cos).
const double kCosMaxTurn = std::cos(75.0 * M_PI / 180.0);
// Conformal charts (AtlasMethod::conformal; conformal_charts): clusters grown at the planar
// cone as the projected charts are, each face's own normal within kConformalTurnMargin more
// of the seed's (at most kConformalMostTurn, short of a fold); the faces of clusters under
// kConformalMinFaces then grown into the larger ones around them for up to
// kConformalGrowRounds rings, within kConformalMostTurn of their seed's axis. A cluster is laid
// out by the conformal map when at most kConformalMostFlips of its faces turn over, the faces
// holding all but kConformalTail of its area at either end have densities within
// kConformalSpread of each other, and no edge is stretched past kConformalMostStretch at the
// upper of those densities; else it is halved, up to kConformalHalvings times. Scaled so that
// the mean density is 1, or lower where the upper density would pass kConformalMostDensity.
// Measured on regr01, bunny and spider at 500,000 faces / 2048 (docs/EXPORT.md): a spread of
// 1.6 or 2.5, three halvings, 16 or 64 faces, a 60 or 90 degree cone each did no better.
constexpr double kConformalTurnMargin = 15.0 * M_PI / 180.0;
constexpr double kConformalMostTurn = 100.0 * M_PI / 180.0;
constexpr double kConformalSpread = 2.0;
constexpr double kConformalMostDensity = 1.25;
constexpr int kConformalHalvings = 6;
constexpr size_t kConformalMinFaces = 32;
constexpr double kConformalMostFlips = 0.01;
constexpr int kConformalGrowRounds = 16;
constexpr double kConformalTail = 0.02;
constexpr double kConformalMostStretch = 3;

D3 sub(const D3& a, const D3& b) { return {a[0] - b[0], a[1] - b[1], a[2] - b[2]}; }
D3 crossd(const D3& a, const D3& b) {
  return {a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]};
}
double dotd(const D3& a, const D3& b) { return a[0] * b[0] + a[1] * b[1] + a[2] * b[2]; }
// The length of (x, y), for chart-plane coordinates (far from overflow). Not std::hypot,
// whose glibc 2.35 symbol version alone would need glibc 2.35 (docs/PACKAGING.md, manylinux).
double length2(double x, double y) { return std::sqrt(x * x + y * y); }
D3 normalized(const D3& a) {
  const double n = std::sqrt(dotd(a, a));
  return n > 0 ? D3{a[0] / n, a[1] / n, a[2] / n} : D3{0, 0, 0};
}

// Unit face normals (zero for a face without area) and areas.
struct Faces {
  std::vector<D3> normal;
  std::vector<double> area;
  std::vector<D3> edge;  // lengths of the edges (corner k, corner k + 1)
};

Faces face_frames(const TriMesh& m) {
  const int64_t F = m.num_faces();
  Faces out;
  out.normal.resize(F);
  out.area.resize(F);
  out.edge.resize(F);
#pragma omp parallel for schedule(static) if (F > 16384)
  for (int64_t f = 0; f < F; ++f) {
    D3 p[3];
    for (int k = 0; k < 3; ++k)
      for (int j = 0; j < 3; ++j) p[k][j] = m.positions[3 * size_t(m.faces[3 * f + k]) + j];
    const D3 c = crossd(sub(p[1], p[0]), sub(p[2], p[0]));
    out.area[f] = 0.5 * std::sqrt(dotd(c, c));
    out.normal[f] = normalized(c);
    for (int k = 0; k < 3; ++k) {
      const D3 e = sub(p[(k + 1) % 3], p[k]);
      out.edge[f][k] = std::sqrt(dotd(e, e));
    }
  }
  return out;
}

// True when face g runs along the edge from a to b (a, then b, in its winding).
bool runs(const TriMesh& m, int32_t g, int32_t a, int32_t b) {
  const int32_t* t = &m.faces[3 * int64_t(g)];
  for (int k = 0; k < 3; ++k)
    if (t[k] == a && t[(k + 1) % 3] == b) return true;
  return false;
}

// f's partner among the faces of an edge (a, b) that more than two share (`around`, f among
// them): the faces running a -> b are paired with those running b -> a (a consistently wound
// sheet goes on across the edge that way), greedily, the pair whose normals agree best first,
// ties to the smaller face ids; every face of the edge computes the same pairing, so it is
// symmetric. -1 when f is left over.
int32_t edge_partner(const TriMesh& m, const Faces& faces, std::vector<int32_t>& around,
                     int32_t f, int32_t a, int32_t b) {
  std::sort(around.begin(), around.end());
  struct Pair {
    double agree;
    int32_t forward, backward;
  };
  std::vector<Pair> pairs;
  for (int32_t g : around) {
    if (!runs(m, g, a, b)) continue;
    for (int32_t h : around)
      if (runs(m, h, b, a)) pairs.push_back({dotd(faces.normal[g], faces.normal[h]), g, h});
  }
  std::sort(pairs.begin(), pairs.end(), [](const Pair& x, const Pair& y) {
    if (x.agree != y.agree) return x.agree > y.agree;
    return x.forward != y.forward ? x.forward < y.forward : x.backward < y.backward;
  });
  std::vector<int32_t> used;
  for (const Pair& p : pairs) {
    if (std::find(used.begin(), used.end(), p.forward) != used.end() ||
        std::find(used.begin(), used.end(), p.backward) != used.end())
      continue;
    if (p.forward == f) return p.backward;
    if (p.backward == f) return p.forward;
    used.push_back(p.forward);
    used.push_back(p.backward);
  }
  return -1;
}

// Per face and edge k (corners k, k+1): the face across that edge, else -1 (a border ends a
// chart). Through each vertex's star. An edge of more than two faces (two sheets of a remeshed
// thin part meeting along it: 7% of regr01's faces at 500,000) pairs its faces by
// edge_partner, so that each sheet's charts go on across it.
std::vector<int32_t> face_neighbours(const TriMesh& m, const Faces& faces) {
  const int64_t V = m.num_vertices(), F = m.num_faces();
  std::vector<int64_t> start(V + 1, 0);
  for (int32_t v : m.faces) ++start[v + 1];
  for (int64_t v = 0; v < V; ++v) start[v + 1] += start[v];
  std::vector<int32_t> star(start[V]);
  {
    std::vector<int64_t> fill(start.begin(), start.end() - 1);
    for (int64_t f = 0; f < F; ++f)
      for (int k = 0; k < 3; ++k) star[fill[m.faces[3 * f + k]]++] = static_cast<int32_t>(f);
  }
  std::vector<int32_t> nb(3 * F, -1);
#pragma omp parallel if (F > 16384)
  {
    std::vector<int32_t> around;  // the other faces of a shared edge
#pragma omp for schedule(static)
    for (int64_t f = 0; f < F; ++f) {
      for (int k = 0; k < 3; ++k) {
        const int32_t a = m.faces[3 * f + k], b = m.faces[3 * f + (k + 1) % 3];
        around.clear();
        for (int64_t i = start[a]; i < start[a + 1]; ++i) {
          const int32_t g = star[i];
          if (g == f) continue;
          const int32_t* t = &m.faces[3 * int64_t(g)];
          if (t[0] == b || t[1] == b || t[2] == b) around.push_back(g);
        }
        if (around.size() == 1) {
          nb[3 * f + k] = around[0];
        } else if (around.size() > 1) {
          around.push_back(static_cast<int32_t>(f));
          nb[3 * f + k] = edge_partner(m, faces, around, static_cast<int32_t>(f), a, b);
        }
      }
    }
  }
  return nb;
}

// Face normals averaged with their edge neighbours' (area-weighted, twice): a remeshed surface's
// normals are noisy at the scale of a face, and cones tested on raw normals break smooth
// regions into many small charts.
std::vector<D3> smoothed_normals(const Faces& faces, const std::vector<int32_t>& nb) {
  const int64_t F = static_cast<int64_t>(faces.area.size());
  std::vector<D3> cur(F), next(F);
  for (int64_t f = 0; f < F; ++f)
    for (int k = 0; k < 3; ++k) cur[f][k] = faces.area[f] * faces.normal[f][k];
  for (int pass = 0; pass < kSmoothPasses; ++pass) {
#pragma omp parallel for schedule(static) if (F > 16384)
    for (int64_t f = 0; f < F; ++f) {
      D3 s = cur[f];
      for (int e = 0; e < 3; ++e) {
        const int32_t g = nb[3 * f + e];
        if (g < 0) continue;
        for (int k = 0; k < 3; ++k) s[k] += cur[g][k];
      }
      next[f] = s;
    }
    cur.swap(next);
  }
#pragma omp parallel for schedule(static) if (F > 16384)
  for (int64_t f = 0; f < F; ++f) cur[f] = normalized(cur[f]);
  return cur;
}

// The growth's bounds: a face's smoothed normal within acos(cos_smooth) of the seed's axis and
// its own normal within acos(cos_turn) (kCosMaxTurn for the projected charts).
struct Cone {
  double cos_smooth, cos_turn;
};

// Chart of every face, and each chart's seed axis (the seed's smoothed normal).
struct Clusters {
  std::vector<int32_t> chart_of;
  std::vector<D3> seed_axis;
};

// A face may join a chart when its smoothed normal is within the cone of the seed's and its
// own normal within kMaxTurn of it (the projection's hard bound; a face without area has no
// direction to flip and joins whatever reaches it).
bool fits(const Faces& faces, const std::vector<D3>& smooth, int32_t g, const D3& axis,
          const Cone& cone) {
  if (faces.area[g] == 0) return true;
  return dotd(smooth[g], axis) >= cone.cos_smooth && dotd(faces.normal[g], axis) >= cone.cos_turn;
}

Clusters grow_charts(const Faces& faces, const std::vector<D3>& smooth,
                     const std::vector<int32_t>& nb, const Cone& cone) {
  const int64_t F = static_cast<int64_t>(faces.area.size());
  Clusters c;
  c.chart_of.assign(F, -1);
  std::vector<int32_t> queue;
  queue.reserve(1024);
  for (int64_t seed = 0; seed < F; ++seed) {
    if (c.chart_of[seed] >= 0) continue;
    const int32_t chart = static_cast<int32_t>(c.seed_axis.size());
    // A seed whose smoothed normal is edge-on to its own normal (a crease) keeps its own.
    const D3 axis = dotd(smooth[seed], faces.normal[seed]) >= kCosMaxTurn || faces.area[seed] == 0
                        ? smooth[seed]
                        : faces.normal[seed];
    c.seed_axis.push_back(axis);
    c.chart_of[seed] = chart;
    queue.assign(1, static_cast<int32_t>(seed));
    for (size_t head = 0; head < queue.size(); ++head) {
      const int32_t f = queue[head];
      for (int k = 0; k < 3; ++k) {
        const int32_t g = nb[3 * int64_t(f) + k];
        if (g < 0 || c.chart_of[g] >= 0 || !fits(faces, smooth, g, axis, cone)) continue;
        c.chart_of[g] = chart;
        queue.push_back(g);
      }
    }
  }
  return c;
}

// Charts of fewer than kSmallChart faces (leftovers the growth of a larger chart cut off from
// their neighbours) join the neighbour chart they share the most edges with, when every face
// fits that chart by the growth's own rule (cone_too); charts of fewer than kTinyChart faces
// then also when no face is turned more than kMaxTurn from that chart's axis, the cone aside
// (the projection's hard bound, so none flips), or is a fold turned more than 180 - kMaxTurn
// degrees from it. A fold is a face that simplification flipped over its neighbours (its
// normal turned more than 180 - kMaxTurn degrees from two of theirs: meshoptimizer leaves
// some, 2,469 on bunny at 1,000,000 faces); it projects mirrored, onto the neighbours it
// folds over (an overlap the overlap search leaves alone), with the same stretch bound. A
// crease (a cube's edge) is no fold. Before folds were taken, they were 53% of regr01's
// charts at 1,000,000 faces (14,986 of 28,507), each mostly margin and each a search of the
// whole texture when packed. Each chart costs padding around it in the
// texture, and a chart of a face or two is mostly margin: the second pass takes the folds a
// simplified surface leaves (faces turned far from both neighbours, which no cone holds; a
// fifth of regr01's area at 500,000 faces) into their neighbours. There it cut the charts from
// 39,027 to 22,214, raised the texture's use from 0.30 to 0.39 and cut the base-colour error by a
// quarter (with bake.h's dilation to the nearest face); letting charts of up to 31 faces in
// too gave 19,506 charts and no better texture, and broke the cone for a tenth of a noisy
// sphere's surface. In chart order, so reproducible.
bool is_fold(const Faces& faces, const std::vector<int32_t>& nb, int32_t f) {
  int opposed = 0;
  for (int k = 0; k < 3; ++k) {
    const int32_t g = nb[3 * int64_t(f) + k];
    opposed += g >= 0 && dotd(faces.normal[f], faces.normal[g]) <= -kCosMaxTurn;
  }
  return opposed >= 2;
}

void merge_small_charts(Clusters& c, const Faces& faces, const std::vector<D3>& smooth,
                        const std::vector<int32_t>& nb, const Cone& cone, bool cone_too) {
  const int64_t F = static_cast<int64_t>(c.chart_of.size());
  const int32_t n = static_cast<int32_t>(c.seed_axis.size());
  std::vector<std::vector<int32_t>> members(n);
  for (int64_t f = 0; f < F; ++f) members[c.chart_of[f]].push_back(static_cast<int32_t>(f));
  std::vector<std::pair<int32_t, int32_t>> shared;  // (neighbour chart, edges)
  for (int32_t chart = 0; chart < n; ++chart) {
    if (members[chart].empty() || members[chart].size() >= (cone_too ? kSmallChart : kTinyChart))
      continue;
    shared.clear();
    for (int32_t f : members[chart])
      for (int k = 0; k < 3; ++k) {
        const int32_t g = nb[3 * int64_t(f) + k];
        if (g >= 0 && c.chart_of[g] != chart) shared.push_back({c.chart_of[g], 1});
      }
    std::sort(shared.begin(), shared.end());
    int32_t best = -1, best_edges = 0;
    for (size_t i = 0; i < shared.size();) {
      size_t j = i;
      while (j < shared.size() && shared[j].first == shared[i].first) ++j;
      const int32_t other = shared[i].first, edges = static_cast<int32_t>(j - i);
      i = j;
      if (edges <= best_edges) continue;
      const D3& axis = c.seed_axis[other];
      const bool ok =
          std::all_of(members[chart].begin(), members[chart].end(), [&](int32_t f) {
            return faces.area[f] == 0 ||
                   (cone_too ? fits(faces, smooth, f, axis, cone)
                             : dotd(faces.normal[f], axis) >= kCosMaxTurn ||
                                   (dotd(faces.normal[f], axis) <= -kCosMaxTurn &&
                                    is_fold(faces, nb, f)));
          });
      if (ok) best = other, best_edges = edges;
    }
    if (best < 0) continue;
    for (int32_t f : members[chart]) c.chart_of[f] = best;
    members[best].insert(members[best].end(), members[chart].begin(), members[chart].end());
    members[chart].clear();
  }
  // Renumber the charts left, in order.
  std::vector<int32_t> renum(n, -1);
  std::vector<D3> axes;
  for (int32_t chart = 0; chart < n; ++chart)
    if (!members[chart].empty()) {
      renum[chart] = static_cast<int32_t>(axes.size());
      axes.push_back(c.seed_axis[chart]);
    }
  for (int64_t f = 0; f < F; ++f) c.chart_of[f] = renum[c.chart_of[f]];
  c.seed_axis.swap(axes);
}

// Andrew's monotone chain; returns the hull's points counter-clockwise, no collinear points.
std::vector<std::array<double, 2>> convex_hull(std::vector<std::array<double, 2>> p) {
  std::sort(p.begin(), p.end());
  p.erase(std::unique(p.begin(), p.end()), p.end());
  if (p.size() < 3) return p;
  auto turn = [](const auto& o, const auto& a, const auto& b) {
    return (a[0] - o[0]) * (b[1] - o[1]) - (a[1] - o[1]) * (b[0] - o[0]);
  };
  std::vector<std::array<double, 2>> h(2 * p.size());
  size_t k = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    while (k >= 2 && turn(h[k - 2], h[k - 1], p[i]) <= 0) --k;
    h[k++] = p[i];
  }
  for (size_t i = p.size() - 1, lower = k + 1; i-- > 0;) {
    while (k >= lower && turn(h[k - 2], h[k - 1], p[i]) <= 0) --k;
    h[k++] = p[i];
  }
  h.resize(k - 1);
  return h;
}

// The direction (unit, as cos and sin) of the hull edge whose bounding rectangle is smallest.
std::array<double, 2> smallest_rectangle_direction(
    const std::vector<std::array<double, 2>>& hull) {
  std::array<double, 2> best_dir = {1, 0};
  double best_area = INFINITY;
  for (size_t i = 0; i < hull.size(); ++i) {
    const auto& a = hull[i];
    const auto& b = hull[(i + 1) % hull.size()];
    const double dx = b[0] - a[0], dy = b[1] - a[1], len = length2(dx, dy);
    if (!(len > 0)) continue;
    const double c = dx / len, s = dy / len;
    double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
    for (const auto& q : hull) {
      const double x = c * q[0] + s * q[1], y = -s * q[0] + c * q[1];
      x0 = std::min(x0, x), x1 = std::max(x1, x), y0 = std::min(y0, y), y1 = std::max(y1, y);
    }
    const double area = (x1 - x0) * (y1 - y0);
    if (area < best_area) best_area = area, best_dir = {c, s};
  }
  return best_dir;
}

// The projection axis of a set of faces grown from `seed`: of their area-weighted mean normal
// and the seed's normal, the one whose most turned face is turned least (by its plane: a
// fold, facing back, is not turned). The seed's keeps every face within the cone, so the
// stretch bound 1 / cos(cone) holds; the mean is usually the better centred.
D3 projection_axis(const std::vector<int32_t>& fs, const D3& seed, const Faces& faces) {
  D3 sum{0, 0, 0};
  for (int32_t f : fs)
    for (int k = 0; k < 3; ++k) sum[k] += faces.area[f] * faces.normal[f][k];
  const D3 mean = normalized(sum);
  double worst_mean = 1, worst_seed = 1;
  for (int32_t f : fs) {
    if (faces.area[f] == 0) continue;
    worst_mean = std::min(worst_mean, std::fabs(dotd(faces.normal[f], mean)));
    worst_seed = std::min(worst_seed, std::fabs(dotd(faces.normal[f], seed)));
  }
  return worst_mean > worst_seed ? mean : seed;
}

// A projection plane: (t1, t2, axis) right-handed, so a face whose normal is within 90
// degrees of the axis keeps its counter-clockwise winding in the plane (a fold is mirrored).
struct Frame {
  D3 axis, t1, t2;
};
Frame frame_of(const D3& axis) {
  const D3 other = std::fabs(axis[0]) < 0.6 ? D3{1, 0, 0} : D3{0, 1, 0};
  const D3 t1 = normalized(crossd(other, axis));
  return {axis, t1, crossd(axis, t1)};
}
std::array<double, 2> project(const Frame& fr, const D3& q) {
  return {dotd(q, fr.t1), dotd(q, fr.t2)};
}
D3 position(const TriMesh& m, int32_t v) {
  const float* p = &m.positions[3 * size_t(v)];
  return {p[0], p[1], p[2]};
}

// The rotation that turns unit vector a onto unit vector b about their common perpendicular
// (Rodrigues), applied to q; a and b must not be opposed (a . b > -1).
D3 turn_onto(const D3& a, const D3& b, const D3& q) {
  const D3 v = crossd(a, b);
  const double c = dotd(a, b);
  const D3 vq = crossd(v, q);
  const double k = dotd(v, q) / (1 + c);
  return {q[0] * c + vq[0] + v[0] * k, q[1] * c + vq[1] + v[1] * k, q[2] * c + vq[2] + v[2] * k};
}

// Per mesh face, the chart growth gave it (its group), and each group's seed axis. A chart
// made of several groups (a host and the thin charts attached to it, attach_thin_charts) is
// laid out group by group: the host projected onto its plane, each attached group projected
// onto its own and turned onto the host's about the crease between them (unfolded), then
// moved onto the vertices it shares with what is placed already.
struct Groups {
  std::vector<int32_t> of_face;
  std::vector<D3> seed;
};

// An attached group's placement in a host frame: turned from its own axis onto the host's,
// projected, and moved so that its vertices already placed (`placed`, by local vertex) land
// where they are on average. Writes the group's unplaced vertices and marks them.
void unfold_group(const std::vector<int32_t>& fs, const std::vector<int32_t>& local,
                  const D3& axis, const Frame& host, const TriMesh& m,
                  std::vector<std::array<double, 2>>& p, std::vector<char>& placed) {
  // Each corner turned and projected once (a vertex of several faces once per face, as the
  // averages below weigh it).
  std::vector<std::array<double, 2>> turned(3 * fs.size());
  double tx = 0, ty = 0, cx = 0, cy = 0;
  int n = 0, nc = 0;
  for (size_t i = 0; i < fs.size(); ++i)
    for (int k = 0; k < 3; ++k) {
      const int32_t v = local[3 * i + k];
      const D3 q = position(m, m.faces[3 * int64_t(fs[i]) + k]);
      const auto t = turned[3 * i + k] = project(host, turn_onto(axis, host.axis, q));
      if (placed[v]) {
        tx += p[v][0] - t[0], ty += p[v][1] - t[1], ++n;
      } else {
        const auto f = project(host, q);
        cx += f[0] - t[0], cy += f[1] - t[1], ++nc;
      }
    }
  // With nothing placed to move onto, the group keeps its centre where the host's plane
  // sees it.
  const double dx = n > 0 ? tx / n : (nc > 0 ? cx / nc : 0);
  const double dy = n > 0 ? ty / n : (nc > 0 ? cy / nc : 0);
  for (size_t i = 0; i < 3 * fs.size(); ++i) {
    const int32_t v = local[i];
    if (placed[v]) continue;
    p[v] = {turned[i][0] + dx, turned[i][1] + dy};
    placed[v] = 1;
  }
}

using ByGroup = std::vector<std::pair<int32_t, int32_t>>;  // (group, local face), sorted

// The chart's faces by group, and the host group: of the most area (ties to the lower id), or
// -1 when every face is of one group.
// Most charts are of one group: that is found in one pass, without the sort (by_group is
// left empty then; layout() does not read it).
int32_t host_group(const Chart& c, const Faces& faces, const Groups& groups, ByGroup& by_group) {
  by_group.clear();
  if (std::all_of(c.faces.begin(), c.faces.end(), [&](int32_t f) {
        return groups.of_face[f] == groups.of_face[c.faces.front()];
      }))
    return -1;
  by_group.resize(c.faces.size());
  for (size_t i = 0; i < c.faces.size(); ++i)
    by_group[i] = {groups.of_face[c.faces[i]], static_cast<int32_t>(i)};
  std::sort(by_group.begin(), by_group.end());
  int32_t host = -1;
  double host_area = -1;
  for (size_t i = 0; i < by_group.size();) {
    double a = 0;
    size_t j = i;
    for (; j < by_group.size() && by_group[j].first == by_group[i].first; ++j)
      a += faces.area[c.faces[by_group[j].second]];
    if (a > host_area) host_area = a, host = by_group[i].first;
    i = j;
  }
  return host;
}

// Planar coordinates of a chart's local vertices (c.verts, c.corners set): one projection
// when its faces are of one group (host < 0), else the host group projected and the others
// unfolded onto it in ascending group order (unfold_group).
std::vector<std::array<double, 2>> layout(const Chart& c, const TriMesh& m, const Faces& faces,
                                          const Groups& groups, int32_t host,
                                          const ByGroup& by_group) {
  std::vector<std::array<double, 2>> p(c.verts.size());
  if (host < 0) {
    const Frame fr = frame_of(projection_axis(c.faces, c.seed_axis, faces));
    for (size_t i = 0; i < c.verts.size(); ++i) p[i] = project(fr, position(m, c.verts[i]));
    return p;
  }
  std::vector<int32_t> fs, local;
  auto take = [&](size_t i, size_t j) {  // the faces by_group[i, j)
    fs.clear();
    local.clear();
    for (; i < j; ++i) {
      const int32_t lf = by_group[i].second;
      fs.push_back(c.faces[lf]);
      for (int k = 0; k < 3; ++k) local.push_back(c.corners[3 * size_t(lf) + k]);
    }
  };
  auto run_end = [&](size_t i) {
    size_t j = i;
    while (j < by_group.size() && by_group[j].first == by_group[i].first) ++j;
    return j;
  };
  size_t h0 = 0;
  while (by_group[h0].first != host) ++h0;
  take(h0, run_end(h0));
  const Frame fr = frame_of(projection_axis(fs, groups.seed[host], faces));
  std::vector<char> placed(c.verts.size(), 0);
  for (int32_t v : local)
    if (!placed[v]) p[v] = project(fr, position(m, c.verts[v])), placed[v] = 1;
  for (size_t i = 0; i < by_group.size();) {
    const size_t j = run_end(i);
    const int32_t g = by_group[i].first;
    if (g != host) {
      take(i, j);
      const D3 axis = projection_axis(fs, groups.seed[g], faces);
      unfold_group(fs, local, dotd(axis, fr.axis) > kMostOpposed ? axis : fr.axis, fr, m, p,
                   placed);
    }
    i = j;
  }
  return p;
}

// Sets a chart's verts (its input vertices, once each, ascending) and corners.
void local_vertices(Chart& c, const TriMesh& m) {
  c.verts.clear();
  for (int32_t f : c.faces)
    for (int k = 0; k < 3; ++k) c.verts.push_back(m.faces[3 * int64_t(f) + k]);
  std::sort(c.verts.begin(), c.verts.end());
  c.verts.erase(std::unique(c.verts.begin(), c.verts.end()), c.verts.end());
  c.corners.resize(3 * c.faces.size());
  for (size_t i = 0; i < c.faces.size(); ++i)
    for (int k = 0; k < 3; ++k)
      c.corners[3 * i + k] = static_cast<int32_t>(
          std::lower_bound(c.verts.begin(), c.verts.end(), m.faces[3 * int64_t(c.faces[i]) + k]) -
          c.verts.begin());
}

// Sets the verts and corners of a chart of several groups: an input vertex that no face of
// the host group has is one local vertex per group that has it (parameterize()).
void seamed_vertices(Chart& c, const TriMesh& m, const Groups& groups, int32_t host) {
  std::vector<int32_t> host_verts;
  for (int32_t f : c.faces)
    if (groups.of_face[f] == host)
      for (int k = 0; k < 3; ++k) host_verts.push_back(m.faces[3 * int64_t(f) + k]);
  std::sort(host_verts.begin(), host_verts.end());
  host_verts.erase(std::unique(host_verts.begin(), host_verts.end()), host_verts.end());
  // (input vertex, the group whose copy it is, or -1) per corner.
  auto key = [&](size_t i, int k) -> std::pair<int32_t, int32_t> {
    const int32_t f = c.faces[i], v = m.faces[3 * int64_t(f) + k];
    if (groups.of_face[f] == host ||
        std::binary_search(host_verts.begin(), host_verts.end(), v))
      return {v, -1};
    return {v, groups.of_face[f]};
  };
  std::vector<std::pair<int32_t, int32_t>> keyed;
  keyed.reserve(3 * c.faces.size());
  for (size_t i = 0; i < c.faces.size(); ++i)
    for (int k = 0; k < 3; ++k) keyed.push_back(key(i, k));
  std::sort(keyed.begin(), keyed.end());
  keyed.erase(std::unique(keyed.begin(), keyed.end()), keyed.end());
  c.verts.resize(keyed.size());
  for (size_t i = 0; i < keyed.size(); ++i) c.verts[i] = keyed[i].first;
  c.corners.resize(3 * c.faces.size());
  for (size_t i = 0; i < c.faces.size(); ++i)
    for (int k = 0; k < 3; ++k)
      c.corners[3 * i + k] = static_cast<int32_t>(
          std::lower_bound(keyed.begin(), keyed.end(), key(i, k)) - keyed.begin());
}

// Fills verts, corners, xy, w and h of a chart whose faces and seed axis are set. In a chart of
// several groups, a vertex that no face of the host group has is one local vertex per group
// that has it (a seam inside the chart): two strips unfolded from one plate, meeting at its
// corner, each keep their own copy of the corner below the plate.
void parameterize(Chart& c, const TriMesh& m, const Faces& faces, const Groups& groups) {
  ByGroup by_group;
  const int32_t host = c.conformal() ? -1 : host_group(c, faces, groups, by_group);
  if (host < 0) {
    local_vertices(c, m);
  } else {
    seamed_vertices(c, m, groups, host);
  }
  std::vector<std::array<double, 2>> p;
  if (c.conformal()) {
    p.resize(c.verts.size());
    for (size_t k = 0; k < c.corners.size(); ++k)
      p[c.corners[k]] = {c.fixed[2 * k], c.fixed[2 * k + 1]};
  } else {
    p = layout(c, m, faces, groups, host, by_group);
  }
  const auto [cs, sn] = smallest_rectangle_direction(convex_hull(p));
  double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
  for (auto& q : p) {  // a rotation, so the winding is kept
    q = {cs * q[0] + sn * q[1], -sn * q[0] + cs * q[1]};
    x0 = std::min(x0, q[0]), x1 = std::max(x1, q[0]), y0 = std::min(y0, q[1]),
    y1 = std::max(y1, q[1]);
  }
  const bool turn = (y1 - y0) > (x1 - x0);  // a quarter turn puts the long side along x
  c.xy.resize(2 * p.size());
  for (size_t i = 0; i < p.size(); ++i) {
    const double x = p[i][0] - x0, y = p[i][1] - y0;
    c.xy[2 * i] = turn ? y : x;
    c.xy[2 * i + 1] = turn ? (x1 - x0) - x : y;
  }
  c.w = turn ? y1 - y0 : x1 - x0;
  c.h = turn ? x1 - x0 : y1 - y0;
  c.area = 0;
  for (size_t f = 0; f < c.faces.size(); ++f) {
    const double* a = &c.xy[2 * c.corners[3 * f]];
    const double* b = &c.xy[2 * c.corners[3 * f + 1]];
    const double* d = &c.xy[2 * c.corners[3 * f + 2]];
    c.area += 0.5 * std::fabs((b[0] - a[0]) * (d[1] - a[1]) - (b[1] - a[1]) * (d[0] - a[0]));
  }
}

// Whether two faces of a chart are neighbours on the surface: they share a vertex, or a vertex
// of one and a vertex of the other share an edge. Where such faces overlap in the plane the
// surface folds over itself within a face or two (a remeshed surface's noise), and the texels
// they share are baked from the same spot of the surface: that overlap is left alone. An
// overlap between faces farther apart (layers, spirals) splits the chart.
class Neighbourhood {
 public:
  explicit Neighbourhood(const Chart& c) : c_(c) {}
  bool near(int32_t f, int32_t g) {
    const int32_t* a = &c_.corners[3 * f];
    const int32_t* b = &c_.corners[3 * g];
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 3; ++j)
        if (a[i] == b[j]) return true;
    if (start_.empty()) build();
    for (int i = 0; i < 3; ++i)
      for (int64_t e = start_[a[i]]; e < start_[a[i] + 1]; ++e)
        for (int j = 0; j < 3; ++j)
          if (ring_[e] == b[j]) return true;
    return false;
  }

 private:
  void build() {  // each vertex's neighbours through the chart's edges (CSR)
    const size_t V = c_.verts.size();
    start_.assign(V + 1, 0);
    for (size_t f = 0; f < c_.corners.size(); ++f) start_[c_.corners[f] + 1] += 2;
    for (size_t v = 0; v < V; ++v) start_[v + 1] += start_[v];
    ring_.resize(start_[V]);
    std::vector<int64_t> fill(start_.begin(), start_.end() - 1);
    for (size_t f = 0; f + 2 < c_.corners.size(); f += 3)
      for (int k = 0; k < 3; ++k) {
        const int32_t v = c_.corners[f + k];
        ring_[fill[v]++] = c_.corners[f + (k + 1) % 3];
        ring_[fill[v]++] = c_.corners[f + (k + 2) % 3];
      }
  }
  const Chart& c_;
  std::vector<int64_t> start_;
  std::vector<int32_t> ring_;
};

// Two of the chart's faces (local indices), no neighbours, whose UV triangles share a texel
// centre (bake.h's rules), or {-1, -1}.
std::pair<int32_t, int32_t> first_overlap(const Chart& c, const std::vector<float>& uv,
                                          int32_t size) {
  float u0 = 1, u1 = 0, v0 = 1, v1 = 0;
  for (size_t i = 0; i < uv.size(); i += 2)
    u0 = std::min(u0, uv[i]), u1 = std::max(u1, uv[i]), v0 = std::min(v0, uv[i + 1]),
    v1 = std::max(v1, uv[i + 1]);
  const int64_t x0 = std::max<int64_t>(0, int64_t(std::floor(u0 * size)) - 1);
  const int64_t y0 = std::max<int64_t>(0, int64_t(std::floor(v0 * size)) - 1);
  const int64_t w = std::min<int64_t>(size, int64_t(std::ceil(u1 * size)) + 1) - x0;
  const int64_t h = std::min<int64_t>(size, int64_t(std::ceil(v1 * size)) + 1) - y0;
  if (w <= 0 || h <= 0 || c.faces.size() < 2) return {-1, -1};
  std::vector<int32_t> owner(size_t(w) * h, -1);
  std::vector<int64_t> texels;
  Neighbourhood hood(c);
  for (size_t i = 0; i < c.faces.size(); ++i) {
    texels.clear();
    covered_texels(&uv[2 * c.corners[3 * i]], &uv[2 * c.corners[3 * i + 1]],
                   &uv[2 * c.corners[3 * i + 2]], size, texels);
    for (int64_t t : texels) {
      const int64_t r = t / size - y0, col = t % size - x0;
      if (r < 0 || r >= h || col < 0 || col >= w) continue;  // cannot be: inside the bounds
      int32_t& o = owner[r * w + col];
      if (o >= 0 && !hood.near(o, static_cast<int32_t>(i))) return {o, static_cast<int32_t>(i)};
      o = static_cast<int32_t>(i);
    }
  }
  return {-1, -1};
}

// Whether two triangles' interiors meet in the plane: no edge direction of either separates
// their projections by more than `eps` (the separating axis test; for two triangles with
// disjoint interiors one of their six edge normals separates them, touching ones included).
bool triangles_meet(const double* const p[3], const double* const q[3], double eps) {
  const double* const* tri[2] = {p, q};
  for (int t = 0; t < 2; ++t)
    for (int k = 0; k < 3; ++k) {
      const double* a = tri[t][k];
      const double* b = tri[t][(k + 1) % 3];
      const double nx = b[1] - a[1], ny = a[0] - b[0];
      double lo[2] = {INFINITY, INFINITY}, hi[2] = {-INFINITY, -INFINITY};
      for (int u = 0; u < 2; ++u)
        for (int j = 0; j < 3; ++j) {
          const double d = nx * tri[u][j][0] + ny * tri[u][j][1];
          lo[u] = std::min(lo[u], d), hi[u] = std::max(hi[u], d);
        }
      const double tol = eps * length2(nx, ny);
      if (hi[0] <= lo[1] + tol || hi[1] <= lo[0] + tol) return false;
    }
  return true;
}

// Two of the chart's faces (local indices) whose planar triangles overlap, exactly (up to a
// relative 1e-9 of the chart's size), and are no neighbours, or {-1, -1}: a uniform grid of
// about one face per cell, each face tested against the later faces in the cells its bounding
// box touches.
Pairs planar_overlap(const Chart& c) {
  const int32_t n = static_cast<int32_t>(c.faces.size());
  if (n < 2 || !(c.w > 0) || !(c.h > 0)) return {};
  const double cell = std::max(std::sqrt(c.w * c.h / n), 1e-12 * std::max(c.w, c.h));
  const int32_t gx = std::min<int32_t>(4096, static_cast<int32_t>(c.w / cell) + 1);
  const int32_t gy = std::min<int32_t>(4096, static_cast<int32_t>(c.h / cell) + 1);
  const double sx = gx / c.w * (1 - 1e-12), sy = gy / c.h * (1 - 1e-12);
  std::vector<std::array<int32_t, 4>> box(n);  // cell range per face
  std::vector<std::array<double, 4>> extent(n);  // x0, x1, y0, y1 per face
  std::vector<int32_t> count(size_t(gx) * gy + 1, 0);
  auto cells_of = [&](int32_t f) {
    double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
    for (int k = 0; k < 3; ++k) {
      const double* q = &c.xy[2 * c.corners[3 * f + k]];
      x0 = std::min(x0, q[0]), x1 = std::max(x1, q[0]), y0 = std::min(y0, q[1]),
      y1 = std::max(y1, q[1]);
    }
    extent[f] = {x0, x1, y0, y1};
    auto clampi = [](double v, int32_t hi) {
      return std::clamp(static_cast<int32_t>(v), int32_t{0}, hi - 1);
    };
    return std::array<int32_t, 4>{clampi(x0 * sx, gx), clampi(x1 * sx, gx), clampi(y0 * sy, gy),
                                  clampi(y1 * sy, gy)};
  };
  for (int32_t f = 0; f < n; ++f) {
    box[f] = cells_of(f);
    for (int32_t y = box[f][2]; y <= box[f][3]; ++y)
      for (int32_t x = box[f][0]; x <= box[f][1]; ++x) ++count[size_t(y) * gx + x + 1];
  }
  for (size_t i = 1; i < count.size(); ++i) count[i] += count[i - 1];
  std::vector<int32_t> list(count.back()), fill(count.begin(), count.end() - 1);
  for (int32_t f = 0; f < n; ++f)
    for (int32_t y = box[f][2]; y <= box[f][3]; ++y)
      for (int32_t x = box[f][0]; x <= box[f][1]; ++x) list[fill[size_t(y) * gx + x]++] = f;
  const double eps = 1e-9 * std::max(c.w, c.h);
  // The first pair in face order: faces [f0, f1) searched by one thread (its own marks and
  // neighbourhood). The range is cut into blocks (of a large chart searched at once), and the
  // first pair of each block is an answer (the same for any thread count).
  auto first_in = [&](int32_t f0, int32_t f1) -> std::pair<int32_t, int32_t> {
  std::vector<int32_t> seen(n, -1);
  Neighbourhood hood(c);
  for (int32_t f = f0; f < f1; ++f) {
    const double* p[3] = {&c.xy[2 * c.corners[3 * f]], &c.xy[2 * c.corners[3 * f + 1]],
                          &c.xy[2 * c.corners[3 * f + 2]]};
    for (int32_t y = box[f][2]; y <= box[f][3]; ++y)
      for (int32_t x = box[f][0]; x <= box[f][1]; ++x)
        for (int32_t i = count[size_t(y) * gx + x]; i < count[size_t(y) * gx + x + 1]; ++i) {
          const int32_t g = list[i];
          if (g <= f || seen[g] == f) continue;
          seen[g] = f;
          // Cheap rejections first: faces sharing a vertex are neighbours (left alone), and
          // boxes apart cannot meet.
          const int32_t* a = &c.corners[3 * f];
          const int32_t* b = &c.corners[3 * g];
          if (a[0] == b[0] || a[0] == b[1] || a[0] == b[2] || a[1] == b[0] || a[1] == b[1] ||
              a[1] == b[2] || a[2] == b[0] || a[2] == b[1] || a[2] == b[2])
            continue;
          const auto& e = extent[f];
          const auto& d = extent[g];
          if (e[1] <= d[0] + eps || d[1] <= e[0] + eps || e[3] <= d[2] + eps || d[3] <= e[2] + eps)
            continue;
          const double* q[3] = {&c.xy[2 * c.corners[3 * g]], &c.xy[2 * c.corners[3 * g + 1]],
                                &c.xy[2 * c.corners[3 * g + 2]]};
          if (triangles_meet(p, q, eps) && !hood.near(f, g)) return {f, g};
        }
  }
  return {-1, -1};
  };
  const int32_t blocks =
      std::clamp((n + kOverlapBlockFaces - 1) / kOverlapBlockFaces, 1, kOverlapBlocks);
  std::vector<std::pair<int32_t, int32_t>> found(blocks, {-1, -1});
#pragma omp parallel for schedule(dynamic, 1) if (n >= kParallelOverlapFaces && !omp_in_parallel())
  for (int32_t b = 0; b < blocks; ++b)
    found[b] = first_in(static_cast<int32_t>(int64_t(n) * b / blocks),
                        static_cast<int32_t>(int64_t(n) * (b + 1) / blocks));
  Pairs out;
  for (const auto& pr : found)
    if (pr.first >= 0) out.push_back(pr);
  return out;
}

// A chart split so that the faces of each seed pair (local indices, overlapping in the
// plane) fall apart, pair after pair: the faces of the piece holding both go with the nearer
// of the two, by steps across shared edges (a breadth-first search from both at once, the
// first's side first at equal steps); faces neither reaches stay with the first. A pair an
// earlier one already parted is passed over. Two layers folded over each other then separate
// at the fold. The first piece holds the first seed of the first pair.
std::vector<Chart> split(const Chart& c, const Pairs& seeds) {
  const int32_t n = static_cast<int32_t>(c.faces.size());
  const int32_t nv = static_cast<int32_t>(c.verts.size());
  // The faces at each local vertex (a counting sort): a face's neighbours across its edge
  // (u, v) are the other faces at u that also have v.
  std::vector<int32_t> start(size_t(nv) + 1, 0), at(3 * size_t(n));
  for (int32_t k = 0; k < 3 * n; ++k) ++start[size_t(c.corners[k]) + 1];
  for (int32_t v = 0; v < nv; ++v) start[v + 1] += start[v];
  {
    std::vector<int32_t> fill(start.begin(), start.end() - 1);
    for (int32_t k = 0; k < 3 * n; ++k) at[fill[c.corners[k]]++] = k / 3;
  }
  // Whether face g has the edge (u, v), u at least once: v too, or u twice when v is u (a
  // degenerate face's edge).
  auto has = [&](int32_t g, int32_t u, int32_t v) {
    const int32_t* q = &c.corners[3 * size_t(g)];
    if (u != v) return q[0] == v || q[1] == v || q[2] == v;
    return (q[0] == u) + (q[1] == u) + (q[2] == u) >= 2;
  };
  std::vector<int32_t> piece(n, 0), seen(n, -1), queue;
  int32_t pieces = 1;
  for (size_t s = 0; s < seeds.size(); ++s) {
    const auto [a, b] = seeds[s];
    const int32_t from = piece[a];
    if (a == b || piece[b] != from) continue;
    piece[b] = pieces++;
    seen[a] = seen[b] = static_cast<int32_t>(s);
    queue.assign({a, b});
    for (size_t head = 0; head < queue.size(); ++head) {
      const int32_t f = queue[head];
      for (int k = 0; k < 3; ++k) {
        const int32_t u = c.corners[3 * size_t(f) + k], v = c.corners[3 * size_t(f) + (k + 1) % 3];
        for (int32_t i = start[u]; i < start[u + 1]; ++i) {
          const int32_t g = at[i];
          if (piece[g] != from || seen[g] == int32_t(s) || !has(g, u, v)) continue;
          seen[g] = static_cast<int32_t>(s);
          piece[g] = piece[f];
          queue.push_back(g);
        }
      }
    }
  }
  std::vector<Chart> out(pieces);
  for (int32_t f = 0; f < n; ++f) {
    Chart& h = out[piece[f]];
    h.faces.push_back(c.faces[f]);
    if (c.conformal())
      h.fixed.insert(h.fixed.end(), &c.fixed[6 * size_t(f)], &c.fixed[6 * size_t(f) + 6]);
  }
  for (Chart& h : out) h.seed_axis = c.seed_axis;
  return out;
}

// Chart indices reordered largest first (ties by index), so that a dynamic schedule starts the
// few large charts at once instead of leaving one to a thread after the rest are done.
void largest_first(const std::vector<Chart>& charts, std::vector<size_t>& todo) {
  std::stable_sort(todo.begin(), todo.end(), [&](size_t a, size_t b) {
    return charts[a].faces.size() > charts[b].faces.size();
  });
}

// Replaces every chart given seed pairs (an overlap, or a sparse chart's two ends) by its
// pieces (split()), the first in its place and the others at the end; marks them all fresh
// (to be parameterized again) and the rest not. Charts are moved only where split, so rounds
// that split a few charts cost little.
void split_charts(std::vector<Chart>& charts, std::vector<char>& fresh,
                  const std::vector<Pairs>& pairs) {
  std::fill(fresh.begin(), fresh.end(), 0);
  std::vector<size_t> todo;
  for (size_t i = 0; i < charts.size(); ++i)
    if (!pairs[i].empty()) todo.push_back(i);
  // The pieces are made at once; the others are appended in chart order.
  std::vector<std::vector<Chart>> rest(todo.size());
  largest_first(charts, todo);
#pragma omp parallel for schedule(dynamic, 1)
  for (size_t t = 0; t < todo.size(); ++t) {
    const size_t i = todo[t];
    std::vector<Chart> pieces = split(charts[i], pairs[i]);
    charts[i] = std::move(pieces[0]);
    pieces.erase(pieces.begin());
    rest[t] = std::move(pieces);
  }
  std::vector<size_t> by_chart(todo.size());
  std::iota(by_chart.begin(), by_chart.end(), size_t{0});
  std::sort(by_chart.begin(), by_chart.end(),
            [&](size_t a, size_t b) { return todo[a] < todo[b]; });
  for (size_t t : by_chart) {
    fresh[todo[t]] = 1;
    for (Chart& piece : rest[t]) {
      charts.push_back(std::move(piece));
      fresh.push_back(1);
    }
  }
}

// Charts that fill less than kMinFill (kMinFillLarge for a large box) of their bounding box
// while the box is at least kSparseBox of all charts' area (a thin strip bent at a knee, as a
// leg): the faces at the two ends of the long side, as split() seeds, so that each half is
// straighter and packs tighter.
// None for the rest.
std::vector<Pairs> sparse_chart_ends(const std::vector<Chart>& charts) {
  double total = 0;
  for (const Chart& c : charts) total += c.area;
  std::vector<Pairs> ends(charts.size());
  for (size_t i = 0; i < charts.size(); ++i) {
    const Chart& c = charts[i];
    const double box = c.w * c.h;
    const double min_fill = box >= kLargeBox * total ? kMinFillLarge : kMinFill;
    if (c.faces.size() < 2 * kTinyChart || box < kSparseBox * total || c.area >= min_fill * box)
      continue;
    double lo = INFINITY, hi = -INFINITY;
    std::pair<int32_t, int32_t> e{-1, -1};
    for (size_t f = 0; f < c.faces.size(); ++f) {
      double x = 0;
      for (int k = 0; k < 3; ++k) x += c.xy[2 * c.corners[3 * f + k]];
      if (x < lo) lo = x, e.first = static_cast<int32_t>(f);
      if (x > hi) hi = x, e.second = static_cast<int32_t>(f);
    }
    if (e.first != e.second) ends[i].push_back(e);
  }
  return ends;
}

UvMesh assemble(const std::vector<Chart>& charts, const std::vector<std::vector<float>>& uvs,
                const TriMesh& m) {
  const size_t n = charts.size();
  std::vector<int64_t> vbase(n + 1, 0), fbase(n + 1, 0);
  for (size_t i = 0; i < n; ++i) {
    vbase[i + 1] = vbase[i] + static_cast<int64_t>(charts[i].verts.size());
    fbase[i + 1] = fbase[i] + static_cast<int64_t>(charts[i].faces.size());
  }
  S3D_CHECK(vbase[n] < (int64_t(1) << 31), "uv_unwrap: ", vbase[n],
            " chart vertices exceed int32");
  UvMesh out;
  out.positions.resize(3 * vbase[n]);
  out.uvs.resize(2 * vbase[n]);
  out.vertex_of.resize(vbase[n]);
  out.faces.resize(3 * fbase[n]);
#pragma omp parallel for schedule(dynamic, 16) if (n > 64)
  for (size_t i = 0; i < n; ++i) {
    const Chart& c = charts[i];
    for (size_t v = 0; v < c.verts.size(); ++v) {
      const int64_t o = vbase[i] + static_cast<int64_t>(v);
      out.vertex_of[o] = c.verts[v];
      for (int k = 0; k < 3; ++k)
        out.positions[3 * o + k] = m.positions[3 * size_t(c.verts[v]) + k];
      out.uvs[2 * o] = uvs[i][2 * v];
      out.uvs[2 * o + 1] = uvs[i][2 * v + 1];
    }
    for (size_t j = 0; j < c.corners.size(); ++j)
      out.faces[3 * fbase[i] + j] = static_cast<int32_t>(vbase[i] + c.corners[j]);
  }
  out.num_charts = static_cast<int32_t>(n);
  return out;
}

// Rounds of boundary smoothing: a face whose edge neighbours are mostly (two or three of
// three) in one other chart moves there when it fits that chart by the growth's rule. Growth
// from a seed leaves ragged borders (single faces sticking out or in), and a ragged chart
// wastes texels around it when packed. All moves of a round are decided from the round's
// start, so the result does not depend on the thread count.
void smooth_borders(Clusters& c, const Faces& faces, const std::vector<D3>& smooth,
                    const std::vector<int32_t>& nb, const Cone& cone) {
  const int64_t F = static_cast<int64_t>(c.chart_of.size());
  std::vector<int32_t> next(F);
  for (int pass = 0; pass < kBorderPasses; ++pass) {
    int64_t moved = 0;
#pragma omp parallel for schedule(static) reduction(+ : moved) if (F > 16384)
    for (int64_t f = 0; f < F; ++f) {
      next[f] = c.chart_of[f];
      int32_t n[3];
      for (int k = 0; k < 3; ++k) n[k] = nb[3 * f + k] >= 0 ? c.chart_of[nb[3 * f + k]] : -1;
      int32_t other = -1;
      if (n[0] >= 0 && n[0] == n[1]) other = n[0];
      else if (n[2] >= 0 && (n[2] == n[0] || n[2] == n[1])) other = n[2];
      if (other < 0 || other == c.chart_of[f]) continue;
      if (!fits(faces, smooth, static_cast<int32_t>(f), c.seed_axis[other], cone)) continue;
      next[f] = other;
      ++moved;
    }
    c.chart_of.swap(next);
    if (moved == 0) break;
  }
}

// The charts of every face not in `skip` (faces charted already, which `nb` cuts off: each
// grows into a chart of its own, dropped here).
std::vector<Chart> initial_charts(const TriMesh& m, const Faces& faces,
                                  const std::vector<int32_t>& nb, const Cone& cone,
                                  const std::vector<char>& skip = {}) {
  const std::vector<D3> smooth = smoothed_normals(faces, nb);
  Clusters cl = grow_charts(faces, smooth, nb, cone);
  merge_small_charts(cl, faces, smooth, nb, cone, true);
  merge_small_charts(cl, faces, smooth, nb, cone, false);
  smooth_borders(cl, faces, smooth, nb, cone);
  std::vector<Chart> charts(cl.seed_axis.size());
  for (int64_t f = 0; f < m.num_faces(); ++f)
    if (skip.empty() || !skip[f]) charts[cl.chart_of[f]].faces.push_back(static_cast<int32_t>(f));
  for (size_t i = 0; i < charts.size(); ++i) charts[i].seed_axis = cl.seed_axis[i];
  // Border smoothing can take every face of a chart away.
  charts.erase(std::remove_if(charts.begin(), charts.end(),
                              [](const Chart& c) { return c.faces.empty(); }),
               charts.end());
  return charts;
}

// ---- conformal charts -----------------------------------------------------------------------

// Per face: a fold (is_fold), which stays in its chart but out of its conformal map's energy.
std::vector<char> folds_of(const Faces& faces, const std::vector<int32_t>& nb) {
  const int64_t F = static_cast<int64_t>(faces.area.size());
  std::vector<char> fold(F);
#pragma omp parallel for schedule(static) if (F > 16384)
  for (int64_t f = 0; f < F; ++f) fold[f] = is_fold(faces, nb, static_cast<int32_t>(f));
  return fold;
}

// The chart's pieces for the conformal map (c.corners set): its weighted faces (neither folds
// nor without area) joined across shared edges, each with the unweighted faces whose three
// vertices are all of that piece's weighted faces (else -1, with the faces no piece holds).
// The map is unique only on a piece joined across edges, and a vertex of unweighted faces
// alone would have nothing to place it. Pieces numbered by their lowest face.
std::vector<int32_t> conformal_components(const Chart& c, const std::vector<char>& weighted,
                                          int32_t& count) {
  const size_t n = c.faces.size();
  std::vector<std::array<int32_t, 3>> edges;  // (lower vertex, higher vertex, face)
  edges.reserve(3 * n);
  for (size_t f = 0; f < n; ++f) {
    if (!weighted[f]) continue;
    for (int k = 0; k < 3; ++k) {
      const int32_t a = c.corners[3 * f + k], b = c.corners[3 * f + (k + 1) % 3];
      edges.push_back({std::min(a, b), std::max(a, b), static_cast<int32_t>(f)});
    }
  }
  std::sort(edges.begin(), edges.end());
  std::vector<int32_t> parent(n);
  std::iota(parent.begin(), parent.end(), 0);
  auto root = [&](int32_t f) {
    while (parent[f] != f) f = parent[f] = parent[parent[f]];
    return f;
  };
  for (size_t i = 1; i < edges.size(); ++i)
    if (edges[i][0] == edges[i - 1][0] && edges[i][1] == edges[i - 1][1]) {
      const int32_t a = root(edges[i][2]), b = root(edges[i - 1][2]);
      parent[std::max(a, b)] = std::min(a, b);
    }
  std::vector<int32_t> piece(n, -1), number(n, -1);
  count = 0;
  const size_t nv = c.verts.size();
  std::vector<int32_t> vertex_piece(nv, -1);  // -2: of two pieces
  for (size_t f = 0; f < n; ++f) {
    if (!weighted[f]) continue;
    const int32_t r = root(static_cast<int32_t>(f));
    if (number[r] < 0) number[r] = count++;
    piece[f] = number[r];
    for (int k = 0; k < 3; ++k) {
      int32_t& vp = vertex_piece[c.corners[3 * f + k]];
      vp = vp == -1 || vp == piece[f] ? piece[f] : -2;
    }
  }
  for (size_t f = 0; f < n; ++f) {
    if (weighted[f]) continue;
    const int32_t p0 = vertex_piece[c.corners[3 * f]];
    if (p0 >= 0 && vertex_piece[c.corners[3 * f + 1]] == p0 &&
        vertex_piece[c.corners[3 * f + 2]] == p0)
      piece[f] = p0;
  }
  return piece;
}

// Lays a chart out by the conformal map (conformal.h): a piece of conformal_components (verts
// and corners set); true, with c.fixed set, when the layout is valid: its weighted faces (neither
// folds nor without area) none turned over, and their densities (area
// in the plane per area in space) within kConformalSpread of each other. The layout is scaled
// so that the mean density is 1, or less where that puts a face above kConformalMostDensity.
bool conformal_layout(Chart& c, const TriMesh& m, const Faces& faces,
                      const std::vector<char>& fold) {
  const size_t n = c.faces.size();
  std::vector<char> weighted(n);
  for (size_t i = 0; i < n; ++i) weighted[i] = faces.area[c.faces[i]] > 0 && !fold[c.faces[i]];
  std::vector<D3> positions(c.verts.size());
  for (size_t v = 0; v < c.verts.size(); ++v) positions[v] = position(m, c.verts[v]);
  std::vector<std::array<double, 2>> p;
  if (!conformal_map(positions, c.corners, weighted, p)) return false;
  // (density, area in space) of the weighted faces not turned over.
  std::vector<std::pair<double, double>> density;
  density.reserve(n);
  int64_t flips = 0;
  double plane = 0, space = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!weighted[i]) continue;
    const auto& a = p[c.corners[3 * i]];
    const auto& b = p[c.corners[3 * i + 1]];
    const auto& d = p[c.corners[3 * i + 2]];
    const double twice = (b[0] - a[0]) * (d[1] - a[1]) - (b[1] - a[1]) * (d[0] - a[0]);
    const double area = faces.area[c.faces[i]];
    if (!(twice > 0)) {  // turned over (or flat)
      ++flips;
      continue;
    }
    density.push_back({twice / (2 * area), area});
    plane += twice, space += 2 * area;
  }
  if (flips > kConformalMostFlips * double(n) || density.empty()) return false;
  // The densities at kConformalTail and 1 - kConformalTail of the area.
  std::sort(density.begin(), density.end());
  const double total = space / 2;
  double lo = density.front().first, hi = density.back().first, seen = 0;
  bool lo_set = false;
  for (const auto& [value, area] : density) {
    seen += area;
    if (!lo_set && seen >= kConformalTail * total) lo = value, lo_set = true;
    if (seen >= (1 - kConformalTail) * total) {
      hi = value;
      break;
    }
  }
  if (!(hi > 0) || hi > kConformalSpread * lo) return false;
  // No edge of any face (turned over, a fold or without area included) longer in the plane
  // than kConformalMostStretch times its length in space at the density `hi`: a face the map
  // threw far out would otherwise stretch the chart's box.
  const double reach = kConformalMostStretch * std::sqrt(hi), slack = 1e-12 * std::sqrt(space);
  for (size_t i = 0; i < n; ++i)
    for (int k = 0; k < 3; ++k) {
      const auto& a = p[c.corners[3 * i + k]];
      const auto& b = p[c.corners[3 * i + (k + 1) % 3]];
      if (length2(b[0] - a[0], b[1] - a[1]) > reach * faces.edge[c.faces[i]][k] + slack)
        return false;
    }
  const double scale = std::sqrt(std::min(space / plane, kConformalMostDensity / hi));
  c.fixed.resize(6 * n);
  for (size_t k = 0; k < 3 * n; ++k) {
    c.fixed[2 * k] = scale * p[c.corners[k]][0];
    c.fixed[2 * k + 1] = scale * p[c.corners[k]][1];
  }
  return true;
}

// A cluster laid out by the conformal map, or halved (at the faces farthest apart along its
// longest side) and its halves tried in turn, up to kConformalHalvings deep and down to
// kConformalMinFaces faces. The valid pieces go to `out`; the faces of the rest are left to the
// projected charts.
void conformal_pieces(Chart c, const TriMesh& m, const Faces& faces, const std::vector<char>& fold,
                      int depth, std::vector<Chart>& out) {
  if (c.faces.size() < kConformalMinFaces) return;
  local_vertices(c, m);
  std::vector<char> weighted(c.faces.size());
  for (size_t i = 0; i < c.faces.size(); ++i)
    weighted[i] = faces.area[c.faces[i]] > 0 && !fold[c.faces[i]];
  int32_t count = 0;
  const std::vector<int32_t> piece = conformal_components(c, weighted, count);
  if (count != 1 || std::count(piece.begin(), piece.end(), -1) > 0) {
    // Each piece on its own (at the same depth), the faces of none to the projected charts.
    std::vector<Chart> pieces(count);
    for (size_t i = 0; i < c.faces.size(); ++i)
      if (piece[i] >= 0) pieces[piece[i]].faces.push_back(c.faces[i]);
    for (Chart& p : pieces) {
      p.seed_axis = c.seed_axis;
      conformal_pieces(std::move(p), m, faces, fold, depth, out);
    }
    return;
  }
  if (conformal_layout(c, m, faces, fold)) {
    out.push_back(std::move(c));
    return;
  }
  if (depth >= kConformalHalvings || c.faces.size() < 2 * kConformalMinFaces) return;
  D3 lo{INFINITY, INFINITY, INFINITY}, hi{-INFINITY, -INFINITY, -INFINITY};
  std::vector<D3> centre(c.faces.size());
  for (size_t i = 0; i < c.faces.size(); ++i) {
    centre[i] = {0, 0, 0};
    for (int k = 0; k < 3; ++k) {
      const D3 q = position(m, m.faces[3 * int64_t(c.faces[i]) + k]);
      for (int j = 0; j < 3; ++j) centre[i][j] += q[j] / 3;
    }
    for (int j = 0; j < 3; ++j)
      lo[j] = std::min(lo[j], centre[i][j]), hi[j] = std::max(hi[j], centre[i][j]);
  }
  int axis = 0;
  for (int j = 1; j < 3; ++j)
    if (hi[j] - lo[j] > hi[axis] - lo[axis]) axis = j;
  int32_t a = 0, b = 0;
  for (size_t i = 1; i < c.faces.size(); ++i) {
    if (centre[i][axis] < centre[a][axis]) a = static_cast<int32_t>(i);
    if (centre[i][axis] > centre[b][axis]) b = static_cast<int32_t>(i);
  }
  c.fixed.clear();
  for (Chart& piece : split(c, Pairs{{a, b}}))
    conformal_pieces(std::move(piece), m, faces, fold, depth + 1, out);
}

// The faces of clusters too small for a chart of their own (fewer than kConformalMinFaces:
// the pieces of a thin part's rim between the clusters of its two sides, of a strip along a
// crease) grown into the larger clusters around them, a ring of faces a round (up to
// kConformalGrowRounds), each face to the neighbouring cluster whose seed axis its normal is
// nearest (ties to the lower cluster), when within kConformalMostTurn: the conformal map unrolls
// such a bend where a projection could not. All moves of a round are decided from the round's
// start, so the result does not depend on the thread count. The faces left stay small clusters.
void grow_into_leftovers(std::vector<Chart>& clusters, const std::vector<int32_t>& nb,
                         const Faces& faces) {
  const int64_t F = static_cast<int64_t>(faces.area.size());
  const double cos_most = std::cos(kConformalMostTurn);
  std::vector<int32_t> of(F, -1);
  for (size_t i = 0; i < clusters.size(); ++i)
    if (clusters[i].faces.size() >= kConformalMinFaces)
      for (int32_t f : clusters[i].faces) of[f] = static_cast<int32_t>(i);
  std::vector<int32_t> next(of);
  for (int round = 0; round < kConformalGrowRounds; ++round) {
    int64_t moved = 0;
#pragma omp parallel for schedule(static) reduction(+ : moved) if (F > 16384)
    for (int64_t f = 0; f < F; ++f) {
      if (of[f] >= 0) continue;
      int32_t best = -1;
      double best_dot = cos_most;
      for (int k = 0; k < 3; ++k) {
        const int32_t g = nb[3 * f + k];
        if (g < 0 || of[g] < 0) continue;
        const double d = faces.area[f] > 0 ? dotd(faces.normal[f], clusters[of[g]].seed_axis) : 1;
        if (d > best_dot || (d == best_dot && best >= 0 && of[g] < best))
          best = of[g], best_dot = d;
      }
      if (best >= 0) next[f] = best, ++moved;
    }
    of = next;
    if (moved == 0) break;
  }
  std::vector<Chart> out;
  for (Chart& c : clusters) {
    if (c.faces.size() < kConformalMinFaces) {
      c.faces.erase(std::remove_if(c.faces.begin(), c.faces.end(),
                                   [&](int32_t f) { return of[f] >= 0; }),
                    c.faces.end());
    } else {
      c.faces.clear();
    }
  }
  for (int64_t f = 0; f < F; ++f)
    if (of[f] >= 0) clusters[of[f]].faces.push_back(static_cast<int32_t>(f));
  clusters.erase(std::remove_if(clusters.begin(), clusters.end(),
                                [](const Chart& c) { return c.faces.empty(); }),
                 clusters.end());
}

// The conformal charts: clusters grown at `cone` (the original's normal cones), each laid out
// by the conformal map where that is valid (conformal_pieces), in cluster order. `taken` marks
// their faces.
std::vector<Chart> conformal_charts(const TriMesh& m, const Faces& faces,
                                    const std::vector<int32_t>& nb, double cone_rad,
                                    std::vector<char>& taken) {
  const Cone cone{std::cos(cone_rad),
                  std::cos(std::min(cone_rad + kConformalTurnMargin, kConformalMostTurn))};
  std::vector<Chart> clusters = initial_charts(m, faces, nb, cone);
  grow_into_leftovers(clusters, nb, faces);
  const std::vector<char> fold = folds_of(faces, nb);
  std::vector<size_t> todo;
  for (size_t i = 0; i < clusters.size(); ++i)
    if (clusters[i].faces.size() >= kConformalMinFaces) todo.push_back(i);
  largest_first(clusters, todo);
  std::vector<std::vector<Chart>> found(clusters.size());
#pragma omp parallel for schedule(dynamic, 1)
  for (size_t t = 0; t < todo.size(); ++t)
    conformal_pieces(std::move(clusters[todo[t]]), m, faces, fold, 0, found[todo[t]]);
  std::vector<Chart> out;
  taken.assign(faces.area.size(), 0);
  for (auto& list : found)
    for (Chart& c : list) {
      for (int32_t f : c.faces) taken[f] = 1;
      out.push_back(std::move(c));
    }
  return out;
}

// The groups: each face's initial chart.
Groups groups_of(const std::vector<Chart>& charts, int64_t num_faces) {
  Groups groups;
  groups.of_face.assign(num_faces, -1);
  for (size_t i = 0; i < charts.size(); ++i) {
    for (int32_t f : charts[i].faces) groups.of_face[f] = static_cast<int32_t>(i);
    groups.seed.push_back(charts[i].seed_axis);
  }
  return groups;
}

// The neighbour chart each thin chart would go to, or -1: thin charts largest first, each to
// the neighbour it shares the most edges with that has more area, is of another group and is
// itself attached to none; a chart given a piece is not attached itself.
std::vector<int32_t> thin_chart_hosts(const std::vector<Chart>& charts,
                                      const std::vector<int32_t>& nb, const Groups& groups,
                                      int64_t num_faces, int32_t size) {
  const size_t n = charts.size();
  std::vector<int32_t> host_of(n, -1);
  double total = 0;
  for (const Chart& c : charts) total += c.area;
  if (!(total > 0)) return host_of;
  const double scale = size * std::sqrt(kThinShare / total);
  std::vector<int32_t> chart_of(num_faces, -1);
  for (size_t i = 0; i < n; ++i)
    for (int32_t f : charts[i].faces) chart_of[f] = static_cast<int32_t>(i);
  auto group_of = [&](size_t i) { return groups.of_face[charts[i].faces.front()]; };
  std::vector<size_t> thin;
  for (size_t i = 0; i < n; ++i)
    if (charts[i].h * scale < kThinTexels && !charts[i].conformal()) thin.push_back(i);
  std::stable_sort(thin.begin(), thin.end(),
                   [&](size_t a, size_t b) { return charts[a].area > charts[b].area; });
  std::vector<char> is_host(n, 0);
  std::vector<int32_t> across;  // the neighbour chart across each border edge
  for (size_t i : thin) {
    if (is_host[i]) continue;
    across.clear();
    for (int32_t f : charts[i].faces)
      for (int k = 0; k < 3; ++k) {
        const int32_t g = nb[3 * int64_t(f) + k];
        if (g >= 0 && chart_of[g] != int32_t(i)) across.push_back(chart_of[g]);
      }
    std::sort(across.begin(), across.end());
    int32_t best = -1, best_edges = 0;
    for (size_t a = 0; a < across.size();) {
      size_t b = a;
      while (b < across.size() && across[b] == across[a]) ++b;
      const int32_t j = across[a], edges = static_cast<int32_t>(b - a);
      a = b;
      if (edges <= best_edges || host_of[j] >= 0 || charts[j].area <= charts[i].area ||
          charts[j].conformal() || group_of(j) == group_of(i))
        continue;
      best = j, best_edges = edges;
    }
    if (best < 0) continue;
    host_of[i] = best;
    is_host[best] = 1;
  }
  return host_of;
}

// Whether a chart unfolds onto a host: the host's frame, the vertices they share where the
// host projects them, the piece unfolded onto them (unfold_group); then no face of the piece
// may turn over or change its area in the plane by more than (1 - kUnfoldKeep) of its area in
// space, or end with less than cos(75 degrees) or more than kUnfoldMostGrowth of that area.
bool unfolds_onto(const Chart& piece, const Chart& host, const TriMesh& m, const Faces& faces) {
  const Frame fr = frame_of(projection_axis(host.faces, host.seed_axis, faces));
  const D3 axis = projection_axis(piece.faces, piece.seed_axis, faces);
  if (dotd(axis, fr.axis) <= kMostOpposed) return false;
  std::vector<std::array<double, 2>> p(piece.verts.size());
  std::vector<char> placed(piece.verts.size(), 0);
  for (size_t v = 0; v < piece.verts.size(); ++v)
    if (std::binary_search(host.verts.begin(), host.verts.end(), piece.verts[v]))
      p[v] = project(fr, position(m, piece.verts[v])), placed[v] = 1;
  unfold_group(piece.faces, piece.corners, axis, fr, m, p, placed);
  for (size_t f = 0; f < piece.faces.size(); ++f) {
    const int32_t* k = &piece.corners[3 * f];
    auto signed_area = [&](auto at) {
      const auto a = at(k[0]), b = at(k[1]), d = at(k[2]);
      return (b[0] - a[0]) * (d[1] - a[1]) - (b[1] - a[1]) * (d[0] - a[0]);
    };
    const double own = signed_area([&](int32_t v) {
      return std::array<double, 2>{piece.xy[2 * size_t(v)], piece.xy[2 * size_t(v) + 1]};
    });
    const double there = signed_area([&](int32_t v) { return p[v]; });
    const double full = 2 * faces.area[piece.faces[f]];
    // The atlas's density bound too (CONTRACTS.md): between cos(75 degrees) and
    // kUnfoldMostGrowth of its area in space.
    if (own * there < 0 || std::fabs(there - own) > (1 - kUnfoldKeep) * full ||
        std::fabs(there) < kCosMaxTurn * full || std::fabs(there) > kUnfoldMostGrowth * full)
      return false;
  }
  return true;
}

// Thin charts attached to a neighbour. A chart narrower than kThinTexels texels at the scale
// the packing is likely to reach (kThinShare of the texture covered) is mostly margin: the
// rims of a thin part (a voxel or two wide, at right angles to both sides) and strips along
// creases. On regr01 at 500,000 faces, before this, 6,358 charts of 4-511 faces filled
// 0.16-0.45 of their footprints and took 0.40 of the texture. Each goes to its host
// (thin_chart_hosts) when it unfolds onto it (unfolds_onto); the overlap search then sees the
// joined chart as any other. Returns how many were attached; the charts left keep their
// order, hosts are marked fresh.
int64_t attach_thin_charts(std::vector<Chart>& charts, std::vector<char>& fresh, const TriMesh& m,
                           const Faces& faces, const std::vector<int32_t>& nb,
                           const Groups& groups, int32_t size) {
  const size_t n = charts.size();
  const std::vector<int32_t> host_of =
      thin_chart_hosts(charts, nb, groups, static_cast<int64_t>(faces.area.size()), size);
  std::vector<char> keep(n, 0);
#pragma omp parallel for schedule(dynamic, 16)
  for (size_t i = 0; i < n; ++i)
    keep[i] = host_of[i] >= 0 && unfolds_onto(charts[i], charts[host_of[i]], m, faces);
  int64_t attached = 0;
  for (size_t i = 0; i < n; ++i)
    if (keep[i]) {
      Chart& host = charts[host_of[i]];
      host.faces.insert(host.faces.end(), charts[i].faces.begin(), charts[i].faces.end());
      fresh[host_of[i]] = 1;
      ++attached;
    }
  size_t out = 0;
  for (size_t i = 0; i < n; ++i) {
    if (keep[i]) continue;
    if (out != i) charts[out] = std::move(charts[i]), fresh[out] = fresh[i];
    ++out;
  }
  charts.resize(out);
  fresh.resize(out);
  return attached;
}

}  // namespace

// The charts before any is laid out. With AtlasMethod::conformal the conformal charts come
// first (conformal_charts), then the projected charts grow over the faces they left, across no
// edge into them (`nb` is cut there); the groups are the projected charts' (a conformal chart's
// faces are of none).
std::vector<Chart> first_charts(const TriMesh& m, const Faces& faces, const ChartOptions& options,
                                std::vector<int32_t>& nb, Groups& groups, SubTimer& timer) {
  const double cone = std::min<double>(options.planar_cone_rad, options.cone_half_angle_rad);
  std::vector<char> taken;
  std::vector<Chart> conformal;
  if (options.method == AtlasMethod::conformal) {
    conformal = conformal_charts(m, faces, nb, cone, taken);
    timer.mark("conformal charts");
    for (int64_t f = 0; f < m.num_faces(); ++f)
      for (int k = 0; k < 3; ++k) {
        int32_t& g = nb[3 * f + k];
        if (g >= 0 && (taken[f] || taken[g])) g = -1;
      }
  }
  std::vector<Chart> charts =
      initial_charts(m, faces, nb, Cone{std::cos(cone), kCosMaxTurn}, taken);
  groups = groups_of(charts, m.num_faces());
  for (Chart& c : conformal) charts.push_back(std::move(c));
  timer.mark("charts");
  return charts;
}

UvMesh planar_unwrap(const TriMesh& m, const ChartOptions& options) {
  check_atlas_input(m, options);
  SubTimer timer("uv_unwrap");
  const Faces faces = face_frames(m);
  S3D_CHECK(std::any_of(faces.area.begin(), faces.area.end(), [](double a) { return a > 0; }),
            "uv_unwrap: no face of the mesh has an area that can be charted (", m.num_faces(),
            " faces)");
  std::vector<int32_t> nb = face_neighbours(m, faces);
  const int32_t size = options.texture_size, padding = options.padding;
  Groups groups;
  std::vector<Chart> charts = first_charts(m, faces, options, nb, groups, timer);
  std::vector<char> fresh(charts.size(), 1);  // charts whose coordinates are not made yet
  auto parameterize_fresh = [&] {
#pragma omp parallel for schedule(dynamic, 8)
    for (size_t i = 0; i < charts.size(); ++i)
      if (fresh[i]) parameterize(charts[i], m, faces, groups);
  };
  // Overlaps exactly in the plane, round after round over the charts split in the last one,
  // until none is left (or kMaxSplitRounds): a piece of a split can still overlap itself
  // elsewhere, and every overlap left here costs a packing of the whole atlas later.
  auto split_until_clean = [&] {
    for (int round = 0; round < kMaxSplitRounds; ++round) {
      std::vector<size_t> todo;
      for (size_t i = 0; i < charts.size(); ++i)
        if (fresh[i]) todo.push_back(i);
      if (todo.empty()) return;
      largest_first(charts, todo);
#pragma omp parallel for schedule(dynamic, 1)
      for (size_t t = 0; t < todo.size(); ++t) parameterize(charts[todo[t]], m, faces, groups);
      std::vector<Pairs> pairs(charts.size());
#pragma omp parallel for schedule(dynamic, 1)
      for (size_t t = 0; t < todo.size(); ++t)
        if (charts[todo[t]].faces.size() < size_t(kParallelOverlapFaces))
          pairs[todo[t]] = planar_overlap(charts[todo[t]]);
      for (size_t i : todo)  // each with every thread
        if (charts[i].faces.size() >= size_t(kParallelOverlapFaces))
          pairs[i] = planar_overlap(charts[i]);
      split_charts(charts, fresh, pairs);
    }
    parameterize_fresh();
  };
  split_until_clean();
  if (attach_thin_charts(charts, fresh, m, faces, nb, groups, size) > 0) split_until_clean();
  for (int round = 0; round < kSparseRounds; ++round) {
    const std::vector<Pairs> ends = sparse_chart_ends(charts);
    if (std::all_of(ends.begin(), ends.end(), [](const Pairs& e) { return e.empty(); })) break;
    split_charts(charts, fresh, ends);
    split_until_clean();
  }
  timer.mark("parameterize and split overlaps");
  // Then at the packed scale; a chart that overlaps only there is split (and its halves split
  // until clean in the plane) and all is packed anew.
  for (int round = 0;; ++round) {
    std::vector<Placement> places;
    const double scale = pack(charts, size, padding, options.pack_reference, places);
    timer.mark("pack");
    std::vector<std::vector<float>> uvs(charts.size());
    std::vector<Pairs> pairs(charts.size());
#pragma omp parallel for schedule(dynamic, 8)
    for (size_t i = 0; i < charts.size(); ++i) {
      uvs[i] = chart_uvs(charts[i], places[i], scale, size, padding);
      const auto pr = first_overlap(charts[i], uvs[i], size);
      if (pr.first >= 0) pairs[i].push_back(pr);
    }
    const bool any =
        std::any_of(pairs.begin(), pairs.end(), [](const Pairs& p) { return !p.empty(); });
    timer.mark("overlaps at the packed scale");
    if (!any || round == kMaxPackRounds) {
      UvMesh out = assemble(charts, uvs, m);
      timer.mark("assemble");
      return out;
    }
    split_charts(charts, fresh, pairs);
    split_until_clean();
    timer.mark("split overlaps");
  }
}

}  // namespace s3d::mesh
