// Mesh clean-up (clean.h): the passes CuMesh runs inside TRELLIS.2's to_glb, on the CPU.
//
// Decoded meshes have millions of faces, so nothing here uses maps of vectors: every
// adjacency is a counting sort into per-vertex groups (half-edges by their smaller vertex,
// corners by their vertex) followed by a sort inside each group, which is short (the
// valence). That is O(F) plus O(F log valence), parallel over vertices. Threads fill the
// groups in any order, but each group is then sorted by a total order, and union-find roots
// are always the smallest member, so no result depends on the thread count.
#include "mesh/clean.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <unordered_map>
#include <utility>

#include "core/error.h"
#include "mesh/union_find.h"

namespace s3d::mesh {
namespace {

// A corner or half-edge: 3 * face + k. Half-edge h runs from corner h's vertex to the next
// corner's vertex in the face's winding.
using Id = uint32_t;
using detail::UnionFind;
constexpr Id kNone = std::numeric_limits<Id>::max();

inline Id next_in_face(Id h) { return h - h % 3 + (h % 3 + 1) % 3; }
inline Id prev_in_face(Id h) { return h - h % 3 + (h % 3 + 2) % 3; }

// Every corner id must fit an Id (and kNone stay free).
void check_size(const TriMesh& m, const char* what) {
  const int64_t max_faces = (static_cast<int64_t>(kNone) - 1) / 3;
  S3D_CHECK(m.num_faces() <= max_faces, what, ": ", m.num_faces(), " faces, more than the ",
            max_faces, " this implementation indexes");
}

void check_input(const TriMesh& m, const char* what) {
  check_mesh(m, what);
  check_size(m, what);
}

// Items grouped by a key: group g is items[start[g] .. start[g + 1]).
struct Groups {
  std::vector<int64_t> start;  // groups + 1
  Unfilled<Id> items;          // every element written by group_items
  int64_t size(int64_t g) const { return start[g + 1] - start[g]; }
};

// Items [0, n) grouped by key(i) in [0, groups) (a negative key leaves the item out).
// Each group is sorted by `less`, a total order, so the result does not depend on the order
// in which the threads filled it.
template <class Key, class Less>
Groups group_items(int64_t groups, int64_t n, Key key, Less less) {
  Groups g;
  g.start.assign(groups + 1, 0);
  int64_t* count = g.start.data() + 1;
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const int64_t k = key(i);
    if (k >= 0) {
#pragma omp atomic
      ++count[k];
    }
  }
  for (int64_t k = 0; k < groups; ++k) g.start[k + 1] += g.start[k];
  g.items.resize(g.start[groups]);
  std::vector<int64_t> cursor(g.start.begin(), g.start.end() - 1);
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const int64_t k = key(i);
    if (k < 0) continue;
    int64_t pos;
#pragma omp atomic capture
    pos = cursor[k]++;
    g.items[pos] = static_cast<Id>(i);
  }
  Id* items = g.items.data();
#pragma omp parallel for schedule(dynamic, 4096) if (groups >= kParallelMin)
  for (int64_t k = 0; k < groups; ++k) {
    std::sort(items + g.start[k], items + g.start[k + 1], less);
  }
  return g;
}

// The corners of each vertex, in increasing corner id.
Groups corners_by_vertex(const TriMesh& m) {
  const int32_t* f = m.faces.data();
  return group_items(
      m.num_vertices(), 3 * m.num_faces(), [f](int64_t c) -> int64_t { return f[c]; },
      std::less<Id>());
}

// The undirected edges: half-edges grouped by vertex pair (a half-edge from a vertex to
// itself, in a face with a repeated index, is no edge). Edge e's half-edges are
// he[start[e] .. start[e + 1]), in increasing id; its face count is their number.
struct EdgeTable {
  Unfilled<Id> he;
  Unfilled<int64_t> start;  // E + 1 (build_edges writes each one)
  std::vector<Id> edge_of;     // per half-edge: its edge, or kNone (only when asked for)
  int64_t num_edges() const { return static_cast<int64_t>(start.size()) - 1; }
  int64_t count(int64_t e) const { return start[e + 1] - start[e]; }
};

EdgeTable build_edges(const TriMesh& m, bool with_edge_of) {
  const int32_t* f = m.faces.data();
  const int64_t V = m.num_vertices();
  auto lo = [f](Id h) { return std::min(f[h], f[next_in_face(h)]); };
  auto hi = [f](Id h) { return std::max(f[h], f[next_in_face(h)]); };
  // Bucketed by the smaller vertex, then sorted by the larger one: equal pairs are adjacent.
  Groups g = group_items(
      V, 3 * m.num_faces(),
      [f, lo](int64_t h) -> int64_t {
        return f[h] == f[next_in_face(static_cast<Id>(h))] ? -1 : lo(static_cast<Id>(h));
      },
      [hi](Id a, Id b) { return std::pair(hi(a), a) < std::pair(hi(b), b); });
  // Edges per bucket, then each bucket's first edge id.
  std::vector<int64_t> first_edge(V + 1, 0);
#pragma omp parallel for schedule(static) if (V >= kParallelMin)
  for (int64_t v = 0; v < V; ++v) {
    int64_t edges = 0;
    for (int64_t j = g.start[v]; j < g.start[v + 1]; ++j) {
      edges += j == g.start[v] || hi(g.items[j]) != hi(g.items[j - 1]);
    }
    first_edge[v + 1] = edges;
  }
  for (int64_t v = 0; v < V; ++v) first_edge[v + 1] += first_edge[v];
  EdgeTable t;
  t.start.resize(first_edge[V] + 1);
  t.start[first_edge[V]] = static_cast<int64_t>(g.items.size());
#pragma omp parallel for schedule(static) if (V >= kParallelMin)
  for (int64_t v = 0; v < V; ++v) {
    int64_t e = first_edge[v];
    for (int64_t j = g.start[v]; j < g.start[v + 1]; ++j) {
      if (j == g.start[v] || hi(g.items[j]) != hi(g.items[j - 1])) t.start[e++] = j;
    }
  }
  t.he = std::move(g.items);
  if (with_edge_of) {
    t.edge_of.assign(m.faces.size(), kNone);
    const int64_t E = t.num_edges();
#pragma omp parallel for schedule(static) if (E >= kParallelMin)
    for (int64_t e = 0; e < E; ++e) {
      for (int64_t j = t.start[e]; j < t.start[e + 1]; ++j) t.edge_of[t.he[j]] = static_cast<Id>(e);
    }
  }
  return t;
}

// Per face, the smallest face index of its component (faces joined through shared edges,
// manifold or not).
std::vector<Id> face_components(const TriMesh& m, const EdgeTable& t) {
  const int64_t F = m.num_faces(), E = t.num_edges();
  UnionFind uf(F);
#pragma omp parallel for schedule(static) if (E >= kParallelMin)
  for (int64_t e = 0; e < E; ++e) {
    const Id f0 = t.he[t.start[e]] / 3;
    for (int64_t j = t.start[e] + 1; j < t.start[e + 1]; ++j) uf.unite(f0, t.he[j] / 3);
  }
  std::vector<Id> root(F);
#pragma omp parallel for schedule(static) if (F >= kParallelMin)
  for (int64_t i = 0; i < F; ++i) root[i] = uf.find(static_cast<Id>(i));
  return root;
}

struct FaceShape {
  double area = 0;       // in the mesh's units squared
  double max_edge2 = 0;  // squared length of the longest edge
};

FaceShape face_shape(const TriMesh& m, int64_t face) {
  double p[3][3];
  for (int k = 0; k < 3; ++k) {
    for (int c = 0; c < 3; ++c) p[k][c] = m.positions[3 * int64_t(m.faces[3 * face + k]) + c];
  }
  double e[3][3], len2[3];
  for (int k = 0; k < 3; ++k) {
    len2[k] = 0;
    for (int c = 0; c < 3; ++c) {
      e[k][c] = p[(k + 1) % 3][c] - p[k][c];
      len2[k] += e[k][c] * e[k][c];
    }
  }
  const double cx = e[0][1] * e[1][2] - e[0][2] * e[1][1];
  const double cy = e[0][2] * e[1][0] - e[0][0] * e[1][2];
  const double cz = e[0][0] * e[1][1] - e[0][1] * e[1][0];
  return {0.5 * std::sqrt(cx * cx + cy * cy + cz * cz), std::max({len2[0], len2[1], len2[2]})};
}

bool repeats_index(const int32_t* face) {
  return face[0] == face[1] || face[1] == face[2] || face[2] == face[0];
}

// CuMesh's test: a repeated index, or an area below both the absolute bound and the bound
// relative to the longest edge (a sliver with a long edge is kept unless it is also tiny).
bool is_degenerate(const TriMesh& m, int64_t face, double abs_area, double rel_area) {
  if (repeats_index(&m.faces[3 * face])) return true;
  const FaceShape s = face_shape(m, face);
  return s.area < abs_area && s.area < rel_area * s.max_edge2;
}

// The vertices no face uses dropped, in order; does not check the mesh (it may have no faces
// left after a removal).
void compact_vertices(TriMesh& m, std::vector<int32_t>* old_of_new) {
  const int64_t V = m.num_vertices(), n = static_cast<int64_t>(m.faces.size());
  std::vector<uint8_t> used(V, 0);
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
#pragma omp atomic write
    used[m.faces[i]] = 1;
  }
  std::vector<int32_t> new_of_old(V, -1);
  int32_t kept = 0;
  for (int64_t v = 0; v < V; ++v) {
    if (used[v]) new_of_old[v] = kept++;
  }
  if (old_of_new) old_of_new->assign(kept, 0);
  std::vector<float> positions(3 * static_cast<size_t>(kept));
#pragma omp parallel for schedule(static) if (V >= kParallelMin)
  for (int64_t v = 0; v < V; ++v) {
    const int32_t w = new_of_old[v];
    if (w < 0) continue;
    for (int c = 0; c < 3; ++c) positions[3 * int64_t(w) + c] = m.positions[3 * v + c];
    if (old_of_new) (*old_of_new)[w] = static_cast<int32_t>(v);
  }
  m.positions = std::move(positions);
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) m.faces[i] = new_of_old[m.faces[i]];
}

// Keeps the faces with keep[f] != 0, in order, then drops the vertices left unused.
void keep_faces(TriMesh& m, const std::vector<uint8_t>& keep) {
  const int64_t F = m.num_faces();
  std::vector<int64_t> dst(F);
  int64_t kept = 0;
  for (int64_t f = 0; f < F; ++f) {
    dst[f] = kept;
    kept += keep[f] != 0;
  }
  if (kept == F) return compact_vertices(m, nullptr);
  std::vector<int32_t> faces(3 * static_cast<size_t>(kept));
#pragma omp parallel for schedule(static) if (F >= kParallelMin)
  for (int64_t f = 0; f < F; ++f) {
    if (!keep[f]) continue;
    for (int k = 0; k < 3; ++k) faces[3 * dst[f] + k] = m.faces[3 * f + k];
  }
  m.faces = std::move(faces);
  compact_vertices(m, nullptr);
}

}  // namespace

void remove_unreferenced_vertices(TriMesh& m, std::vector<int32_t>* old_of_new) {
  check_input(m, "remove_unreferenced_vertices");
  compact_vertices(m, old_of_new);
}

void remove_degenerate_faces(TriMesh& m, double abs_area, double rel_area) {
  check_input(m, "remove_degenerate_faces");
  S3D_CHECK(abs_area >= 0 && rel_area >= 0, "remove_degenerate_faces: the area bounds must be ",
            "non-negative numbers (abs_area ", abs_area, ", rel_area ", rel_area, ")");
  const int64_t F = m.num_faces();
  std::vector<uint8_t> keep(F);
#pragma omp parallel for schedule(static) if (F >= kParallelMin)
  for (int64_t f = 0; f < F; ++f) keep[f] = !is_degenerate(m, f, abs_area, rel_area);
  keep_faces(m, keep);
}

namespace {

constexpr int kFlatPasses = 4;
// A cap's flip is kept when both new faces are turned less than this (its cosine, 60
// degrees) from the face across the long edge.
constexpr double kCapKeepsFacing = 0.5;

// The faces around each vertex, in CSR form (start, faces), plus the faces a flip added to a
// vertex since; a face that no longer holds the vertex is skipped where it is read.
struct Stars {
  std::vector<int64_t> start;
  std::vector<int32_t> faces;
  std::unordered_map<int32_t, std::vector<int32_t>> added;  // per vertex, the few a flip touched
};

Stars vertex_stars(const TriMesh& m) {
  const int64_t V = m.num_vertices(), F = m.num_faces();
  Stars s;
  s.start.assign(V + 1, 0);
  for (int32_t v : m.faces) ++s.start[v + 1];
  for (int64_t v = 0; v < V; ++v) s.start[v + 1] += s.start[v];
  s.faces.resize(s.start[V]);
  std::vector<int64_t> fill(s.start.begin(), s.start.end() - 1);
  for (int64_t f = 0; f < F; ++f)
    for (int k = 0; k < 3; ++k) s.faces[fill[m.faces[3 * f + k]]++] = static_cast<int32_t>(f);
  return s;
}

bool holds(const TriMesh& m, int32_t f, int32_t v) {
  const int32_t* t = &m.faces[3 * int64_t(f)];
  return t[0] == v || t[1] == v || t[2] == v;
}

// The faces other than `f` that hold both a and b, at most two of them (enough to tell one
// from several).
int faces_on_edge(const TriMesh& m, const Stars& s, int32_t a, int32_t b, int32_t f,
                  int32_t found[2]) {
  int n = 0;
  auto visit = [&](int32_t g) {
    if (g == f || !holds(m, g, a) || !holds(m, g, b)) return;
    if (n < 2 && (n == 0 || found[0] != g)) found[n] = g;
    if (n == 0 || found[0] != g) ++n;
  };
  for (int64_t i = s.start[a]; i < s.start[a + 1]; ++i) visit(s.faces[i]);
  if (const auto it = s.added.find(a); it != s.added.end())
    for (int32_t g : it->second) visit(g);
  return n;
}

// The cosine of a face's largest angle (its most obtuse corner).
float cos_largest_angle(const TriMesh& m, int64_t f) {
  float lowest = 1;
  for (int k = 0; k < 3; ++k) {
    const Vec3 o = m.vertex(m.faces[3 * f + k]);
    const Vec3 u = m.vertex(m.faces[3 * f + (k + 1) % 3]) - o;
    const Vec3 w = m.vertex(m.faces[3 * f + (k + 2) % 3]) - o;
    const float lengths = length(u) * length(w);
    if (lengths > 0) lowest = std::min(lowest, dot(u, w) / lengths);
  }
  return lowest;
}

// A face to flip: flat, or (cos_cap > -1) a cap, its largest angle's cosine below cos_cap.
bool flat_or_cap(const TriMesh& m, int64_t f, double cos_cap) {
  if (repeats_index(&m.faces[3 * f])) return false;
  return is_degenerate(m, f, 1e-24, 1e-12) ||
         (cos_cap > -1 && cos_largest_angle(m, f) < cos_cap);
}

// The unit normal of (p, q, r), or zero.
Vec3 unit_normal(const TriMesh& m, int32_t p, int32_t q, int32_t r) {
  const Vec3 n = cross(m.vertex(q) - m.vertex(p), m.vertex(r) - m.vertex(p));
  const float len = length(n);
  return len > 0 ? n * (1 / len) : n;
}

// One flat face's or cap's flip (the header says when), or false.
bool flip_flat_face(TriMesh& m, Stars& s, int32_t f, double cos_cap) {
  int32_t* t = &m.faces[3 * int64_t(f)];
  if (!flat_or_cap(m, f, cos_cap)) return false;
  // The longest edge (k, k + 1), the third corner c.
  int k = 0;
  double best = -1;
  for (int e = 0; e < 3; ++e) {
    double len2 = 0;
    for (int c = 0; c < 3; ++c) {
      const double d = double(m.positions[3 * int64_t(t[(e + 1) % 3]) + c]) -
                       m.positions[3 * int64_t(t[e]) + c];
      len2 += d * d;
    }
    if (len2 > best) best = len2, k = e;
  }
  const int32_t a = t[k], b = t[(k + 1) % 3], c = t[(k + 2) % 3];
  int32_t across[2];
  if (faces_on_edge(m, s, a, b, f, across) != 1) return false;
  const int32_t g = across[0];
  int32_t* u = &m.faces[3 * int64_t(g)];
  int j = 0;
  while (j < 3 && !(u[j] == b && u[(j + 1) % 3] == a)) ++j;
  if (j == 3) return false;  // wound the other way: not one consistent surface
  const int32_t d = u[(j + 2) % 3];
  int32_t cd[2];
  if (d == c || faces_on_edge(m, s, c, d, -1, cd) != 0) return false;
  const std::array<int32_t, 3> old_f{t[0], t[1], t[2]}, old_g{u[0], u[1], u[2]};
  const Vec3 ng = unit_normal(m, b, a, d);
  t[0] = c, t[1] = a, t[2] = d;
  u[0] = c, u[1] = d, u[2] = b;
  // A cap's corner c is off the line ab: the two new faces must still face as (b, a, d) did.
  auto turned = [&](int32_t p, int32_t q, int32_t r) {
    return dot(unit_normal(m, p, q, r), ng) < kCapKeepsFacing;
  };
  if (is_degenerate(m, f, 1e-24, 1e-12) || is_degenerate(m, g, 1e-24, 1e-12) ||
      turned(c, a, d) || turned(c, d, b)) {
    std::copy(old_f.begin(), old_f.end(), t);  // d on the line too, or a face turned
    std::copy(old_g.begin(), old_g.end(), u);
    return false;
  }
  s.added[d].push_back(f);  // f gained d (and lost b), g gained c (and lost a)
  s.added[c].push_back(g);
  return true;
}

}  // namespace

int64_t flip_flat_faces(TriMesh& m, double cap_degrees) {
  check_input(m, "flip_flat_faces");
  S3D_CHECK(cap_degrees > 90 && cap_degrees <= 180,
            "flip_flat_faces: cap_degrees must be in (90, 180] (got ", cap_degrees, ")");
  const double cos_cap = cap_degrees >= 180 ? -1 : std::cos(cap_degrees * M_PI / 180);
  const int64_t F = m.num_faces();
  std::vector<int32_t> flat;
  {
    std::vector<uint8_t> is_flat(F);
#pragma omp parallel for schedule(static) if (F >= kParallelMin)
    for (int64_t f = 0; f < F; ++f) {
      is_flat[f] = flat_or_cap(m, f, cos_cap);
    }
    for (int64_t f = 0; f < F; ++f)
      if (is_flat[f]) flat.push_back(static_cast<int32_t>(f));
  }
  if (flat.empty()) return 0;
  Stars s = vertex_stars(m);
  int64_t flips = 0;
  for (int pass = 0; pass < kFlatPasses && !flat.empty(); ++pass) {
    std::vector<int32_t> left;
    for (int32_t f : flat) {
      if (flip_flat_face(m, s, f, cos_cap)) {
        ++flips;
      } else {
        left.push_back(f);
      }
    }
    if (left.size() == flat.size()) break;
    flat.swap(left);
  }
  return flips;
}

void remove_duplicate_faces(TriMesh& m) {
  check_input(m, "remove_duplicate_faces");
  const int64_t F = m.num_faces();
  const int32_t* fv = m.faces.data();
  auto sorted = [fv](Id f) {
    std::array<int32_t, 3> s{fv[3 * f], fv[3 * f + 1], fv[3 * f + 2]};
    std::sort(s.begin(), s.end());
    return s;
  };
  // Faces bucketed by their smallest vertex, then sorted by the other two and by index: equal
  // vertex sets are adjacent with the earliest face first.
  Groups g = group_items(
      m.num_vertices(), F, [fv](int64_t f) -> int64_t {
        return std::min({fv[3 * f], fv[3 * f + 1], fv[3 * f + 2]});
      },
      [sorted](Id a, Id b) { return std::pair(sorted(a), a) < std::pair(sorted(b), b); });
  std::vector<uint8_t> keep(F, 1);
  const int64_t V = m.num_vertices();
#pragma omp parallel for schedule(dynamic, 4096) if (V >= kParallelMin)
  for (int64_t v = 0; v < V; ++v) {
    for (int64_t j = g.start[v] + 1; j < g.start[v + 1]; ++j) {
      if (sorted(g.items[j]) == sorted(g.items[j - 1])) keep[g.items[j]] = 0;
    }
  }
  keep_faces(m, keep);
}

namespace {

// One boundary edge: the face half-edge `from` -> `to` that uses it.
struct BoundaryEdge {
  int32_t from, to;
};

// A closed chain of boundary edges: their indices, in walking order.
using Loop = std::vector<int64_t>;

// Splits the boundary edges into simple closed loops. The walk treats edges as undirected
// (so that a hole whose rim is not consistently wound still closes), prefers at each vertex
// the edge that continues the rim's direction (the reverse of the faces' half-edges), then
// the lowest index; whenever it comes back to a vertex already on its path, the cycle since
// that vertex is a loop. A dead end drops the edge that led to it: those edges close no loop.
std::vector<Loop> boundary_loops(const std::vector<BoundaryEdge>& edges, int64_t V) {
  const int64_t B = static_cast<int64_t>(edges.size());
  // Edge ends by vertex: item 2b + s is edge b's end s (0: from, 1: to).
  Groups ends = group_items(
      V, 2 * B, [&edges](int64_t i) -> int64_t {
        return i % 2 ? edges[i / 2].to : edges[i / 2].from;
      },
      std::less<Id>());
  std::vector<uint8_t> used(B, 0);
  std::vector<int64_t> on_path(V, -1);  // the vertex's position on the path, or -1
  std::vector<Loop> loops;
  std::vector<int32_t> path_v;
  std::vector<int64_t> path_e;
  // The next unused edge at v: one leaving v along the rim (v is its face half-edge's `to`),
  // else any; -1 when none is left.
  auto pick = [&](int32_t v) -> int64_t {
    int64_t any = -1;
    for (int64_t j = ends.start[v]; j < ends.start[v + 1]; ++j) {
      const int64_t b = ends.items[j] / 2;
      if (used[b]) continue;
      if (ends.items[j] % 2 == 1) return b;
      if (any < 0) any = b;
    }
    return any;
  };
  for (int64_t s = 0; s < B; ++s) {
    if (used[s]) continue;
    int32_t cur = edges[s].to;
    path_v.assign(1, cur);
    path_e.clear();
    on_path[cur] = 0;
    for (;;) {
      const int64_t b = pick(cur);
      if (b < 0) {
        if (path_e.empty()) break;
        on_path[path_v.back()] = -1;
        path_v.pop_back();
        path_e.pop_back();
        cur = path_v.back();
        continue;
      }
      used[b] = 1;
      const int32_t w = edges[b].to == cur ? edges[b].from : edges[b].to;
      const int64_t at = on_path[w];
      if (at < 0) {
        on_path[w] = static_cast<int64_t>(path_v.size());
        path_v.push_back(w);
        path_e.push_back(b);
      } else {
        Loop loop(path_e.begin() + at, path_e.end());
        loop.push_back(b);
        loops.push_back(std::move(loop));
        for (size_t k = at + 1; k < path_v.size(); ++k) on_path[path_v[k]] = -1;
        path_v.resize(at + 1);
        path_e.resize(at);
      }
      cur = w;
    }
    on_path[cur] = -1;
  }
  return loops;
}

double distance(const TriMesh& m, int32_t a, int32_t b) {
  double d2 = 0;
  for (int c = 0; c < 3; ++c) {
    const double d = double(m.positions[3 * int64_t(a) + c]) - m.positions[3 * int64_t(b) + c];
    d2 += d * d;
  }
  return std::sqrt(d2);
}

}  // namespace

int64_t fill_holes(TriMesh& m, double max_perimeter) {
  check_input(m, "fill_holes");
  S3D_CHECK(max_perimeter >= 0, "fill_holes: max_perimeter must be a non-negative number (got ",
            max_perimeter, ")");
  std::vector<BoundaryEdge> boundary;
  {
    const EdgeTable t = build_edges(m, false);
    for (int64_t e = 0; e < t.num_edges(); ++e) {
      if (t.count(e) != 1) continue;
      const Id h = t.he[t.start[e]];
      boundary.push_back({m.faces[h], m.faces[next_in_face(h)]});
    }
  }
  if (boundary.empty()) return 0;
  const std::vector<Loop> loops = boundary_loops(boundary, m.num_vertices());
  int64_t filled = 0;
  for (const Loop& loop : loops) {
    double perimeter = 0, centre[3] = {0, 0, 0};
    for (int64_t b : loop) {
      perimeter += distance(m, boundary[b].from, boundary[b].to);
      // The loop is simple: each of its vertices ends two of its edges, so the mean of the
      // edges' midpoints is the mean of its vertices.
      for (int c = 0; c < 3; ++c) {
        centre[c] += 0.5 * (double(m.positions[3 * int64_t(boundary[b].from) + c]) +
                            m.positions[3 * int64_t(boundary[b].to) + c]);
      }
    }
    if (!(perimeter <= max_perimeter)) continue;
    const int64_t centre_v = m.num_vertices();
    S3D_CHECK(centre_v < std::numeric_limits<int32_t>::max(), "fill_holes: too many vertices");
    for (int c = 0; c < 3; ++c) {
      m.positions.push_back(static_cast<float>(centre[c] / static_cast<double>(loop.size())));
    }
    // Each new face runs its boundary edge against the existing face, as a manifold needs.
    for (int64_t b : loop) {
      m.faces.insert(m.faces.end(),
                     {boundary[b].to, boundary[b].from, static_cast<int32_t>(centre_v)});
    }
    ++filled;
  }
  return filled;
}

namespace {

// Splits the corners of vertex v (corners[0..n), increasing ids) into fans: corners joined
// through an edge that exactly two of them use (a manifold edge), or sharing a face. Writes
// each corner's fan (0, 1, ... in order of their first corner) and returns the fan count.
// `scratch` and `parent` are the calling thread's.
int64_t vertex_fans(const int32_t* faces, int32_t v, const Id* corners, int64_t n, Id* fan,
                    std::vector<std::pair<int32_t, Id>>& scratch, std::vector<Id>& parent) {
  parent.resize(n);
  std::iota(parent.begin(), parent.end(), Id{0});
  auto find = [&parent](Id a) {
    while (parent[a] != a) a = parent[a] = parent[parent[a]];
    return a;
  };
  auto unite = [&](Id a, Id b) {
    a = find(a);
    b = find(b);
    if (a != b) parent[std::max(a, b)] = std::min(a, b);
  };
  scratch.clear();
  for (int64_t i = 0; i < n; ++i) {
    const Id c = corners[i];
    if (i > 0 && corners[i - 1] / 3 == c / 3) unite(static_cast<Id>(i - 1), static_cast<Id>(i));
    for (int32_t w : {faces[next_in_face(c)], faces[prev_in_face(c)]}) {
      if (w != v) scratch.emplace_back(w, static_cast<Id>(i));
    }
  }
  std::sort(scratch.begin(), scratch.end());
  for (size_t j = 0; j < scratch.size();) {
    size_t k = j;
    while (k < scratch.size() && scratch[k].first == scratch[j].first) ++k;
    if (k - j == 2) unite(scratch[j].second, scratch[j + 1].second);
    j = k;
  }
  int64_t fans = 0;
  for (int64_t i = 0; i < n; ++i) {
    const Id r = find(static_cast<Id>(i));
    fan[i] = r == static_cast<Id>(i) ? static_cast<Id>(fans++) : fan[r];
  }
  return fans;
}

}  // namespace

void repair_non_manifold_edges(TriMesh& m) {
  check_input(m, "repair_non_manifold_edges");
  const int64_t V = m.num_vertices();
  const Groups g = corners_by_vertex(m);
  // Per corner (in g's order) its fan; per vertex the fans beyond its first.
  std::vector<Id> fan(g.items.size());
  std::vector<int64_t> first_new(V + 1, 0);
#pragma omp parallel if (V >= kParallelMin)
  {
    std::vector<std::pair<int32_t, Id>> scratch;
    std::vector<Id> parent;
#pragma omp for schedule(dynamic, 4096)
    for (int64_t v = 0; v < V; ++v) {
      const int64_t n = g.size(v);
      if (n == 0) continue;
      const int64_t fans = vertex_fans(m.faces.data(), static_cast<int32_t>(v),
                                       g.items.data() + g.start[v], n, fan.data() + g.start[v],
                                       scratch, parent);
      first_new[v + 1] = fans - 1;
    }
  }
  for (int64_t v = 0; v < V; ++v) first_new[v + 1] += first_new[v];
  const int64_t added = first_new[V];
  if (added == 0) return;
  S3D_CHECK(V + added <= std::numeric_limits<int32_t>::max(), "repair_non_manifold_edges: ",
            V + added, " vertices after the split, more than int32 indices hold");
  // The first fan keeps the vertex; each other fan gets a copy of its position.
  m.positions.resize(3 * static_cast<size_t>(V + added));
#pragma omp parallel for schedule(dynamic, 4096) if (V >= kParallelMin)
  for (int64_t v = 0; v < V; ++v) {
    for (int64_t j = g.start[v]; j < g.start[v + 1]; ++j) {
      if (fan[j] == 0) continue;
      const int64_t w = V + first_new[v] + fan[j] - 1;
      m.faces[g.items[j]] = static_cast<int32_t>(w);
      for (int c = 0; c < 3; ++c) m.positions[3 * w + c] = m.positions[3 * v + c];
    }
  }
}

void remove_small_components(TriMesh& m, double min_area) {
  check_input(m, "remove_small_components");
  S3D_CHECK(!std::isnan(min_area), "remove_small_components: min_area is NaN");
  const int64_t F = m.num_faces();
  const std::vector<Id> root = face_components(m, build_edges(m, false));
  std::vector<double> area(F);
#pragma omp parallel for schedule(static) if (F >= kParallelMin)
  for (int64_t f = 0; f < F; ++f) area[f] = face_shape(m, f).area;
  // Summed in face order, one thread, so that a component's area does not depend on the
  // thread count (a component near the threshold must not flip).
  std::vector<double> total(F, 0.0);
  for (int64_t f = 0; f < F; ++f) total[root[f]] += area[f];
  std::vector<uint8_t> keep(F);
#pragma omp parallel for schedule(static) if (F >= kParallelMin)
  for (int64_t f = 0; f < F; ++f) keep[f] = total[root[f]] >= min_area;
  keep_faces(m, keep);
}

void unify_orientation(TriMesh& m) {
  check_input(m, "unify_orientation");
  const int64_t F = m.num_faces();
  const EdgeTable t = build_edges(m, true);
  const int32_t* fv = m.faces.data();
  std::vector<uint8_t> flip(F, 0), seen(F, 0);
  std::vector<Id> queue;
  queue.reserve(F);
  for (int64_t s = 0; s < F; ++s) {
    if (seen[s]) continue;
    seen[s] = 1;
    queue.assign(1, static_cast<Id>(s));
    for (size_t q = 0; q < queue.size(); ++q) {
      const Id f = queue[q];
      for (Id h = 3 * f; h < 3 * f + 3; ++h) {
        const Id e = t.edge_of[h];
        if (e == kNone || t.count(e) != 2) continue;
        const Id o = t.he[t.start[e]] == h ? t.he[t.start[e] + 1] : t.he[t.start[e]];
        const Id g = o / 3;
        if (g == f || seen[g]) continue;
        // Two consistently wound faces run their shared edge in opposite directions.
        const bool same_direction = fv[h] == fv[o];
        flip[g] = flip[f] ^ static_cast<uint8_t>(same_direction);
        seen[g] = 1;
        queue.push_back(g);
      }
    }
  }
#pragma omp parallel for schedule(static) if (F >= kParallelMin)
  for (int64_t f = 0; f < F; ++f) {
    if (flip[f]) std::swap(m.faces[3 * f + 1], m.faces[3 * f + 2]);
  }
}

std::vector<float> vertex_normals(const TriMesh& m) {
  check_input(m, "vertex_normals");
  const int64_t V = m.num_vertices();
  const Groups g = corners_by_vertex(m);
  std::vector<float> normals(3 * static_cast<size_t>(V));
#pragma omp parallel for schedule(dynamic, 4096) if (V >= kParallelMin)
  for (int64_t v = 0; v < V; ++v) {
    double n[3] = {0, 0, 0};
    for (int64_t j = g.start[v]; j < g.start[v + 1]; ++j) {
      const int64_t face = g.items[j] / 3;
      const Vec3 p0 = m.vertex(m.faces[3 * face]), p1 = m.vertex(m.faces[3 * face + 1]),
                 p2 = m.vertex(m.faces[3 * face + 2]);
      double a[3], b[3];
      for (int c = 0; c < 3; ++c) {
        a[c] = double(p1[c]) - p0[c];
        b[c] = double(p2[c]) - p0[c];
      }
      n[0] += a[1] * b[2] - a[2] * b[1];
      n[1] += a[2] * b[0] - a[0] * b[2];
      n[2] += a[0] * b[1] - a[1] * b[0];
    }
    const double len = std::sqrt(n[0] * n[0] + n[1] * n[1] + n[2] * n[2]);
    for (int c = 0; c < 3; ++c) normals[3 * v + c] = len > 0 ? static_cast<float>(n[c] / len) : 0.f;
  }
  return normals;
}

MeshStats mesh_stats(const TriMesh& m) {
  check_input(m, "mesh_stats");
  const int64_t F = m.num_faces();
  const EdgeTable t = build_edges(m, false);
  const int64_t E = t.num_edges();
  MeshStats s;
  int64_t boundary = 0, non_manifold = 0, components = 0, degenerate = 0;
#pragma omp parallel for schedule(static) reduction(+ : boundary, non_manifold) \
    if (E >= kParallelMin)
  for (int64_t e = 0; e < E; ++e) {
    boundary += t.count(e) == 1;
    non_manifold += t.count(e) > 2;
  }
  const std::vector<Id> root = face_components(m, t);
#pragma omp parallel for schedule(static) reduction(+ : components, degenerate) \
    if (F >= kParallelMin)
  for (int64_t f = 0; f < F; ++f) {
    components += root[f] == static_cast<Id>(f);
    // Degenerate as remove_degenerate_faces sees it with its defaults.
    degenerate += is_degenerate(m, f, 1e-24, 1e-12);
  }
  s.boundary_edges = boundary;
  s.non_manifold_edges = non_manifold;
  s.components = components;
  s.degenerate_faces = degenerate;
  return s;
}

}  // namespace s3d::mesh
