// The shaped quadric edge collapse (collapse.h).
//
// Garland and Heckbert's quadric error: each vertex carries the sum of the squared distances
// to the planes of its faces (weighted by area), an edge collapses onto the endpoint where the
// two vertices' sum is least, and the merged vertex keeps the sum. meshoptimizer 0.18 (the
// reference, simplify.cpp) does that too, and on a flat region every such collapse costs
// nothing, so which goes first is arbitrary: long slivers and faces folded over their
// neighbours follow. On regr01's remeshed surface, its cavities dropped, simplified to 500,000
// faces, 10,752 faces turned more than 75 degrees from their vertices' normals, where the
// remeshed surface had 725; each cuts the atlas's charts.
//
// Here each vertex's quadric also holds, for every edge of its faces, the plane through the
// edge at right angles to the face, at a small weight (CollapseOptions::shape_weight): on a
// flat region a collapse then costs what it moves the vertex along the surface, so the
// shortest edges go first and the triangles stay even. On the same surface: 1,513 folded
// faces, and the atlas's charts 5,246 -> 3,023 (bench/results/2026-12-05-local-shaped-
// collapse.md). These planes only rank the collapses; the error that max_error bounds is the
// faces' planes' alone. The same idea as MeshLab's "planar simplification" option (VCG's
// quality quadric), which is where we learnt it.
//
// A collapse is refused when it would turn a face by more than max_turn_degrees, make an edge
// of three faces (the link condition: the two ends may share no neighbour but the third
// vertices of the faces on the edge), take the last face of a vertex across, or move a vertex
// of an open edge off it.
//
// Order: in passes, as meshoptimizer does. A pass ranks the live edges by the cheaper
// direction's rank and takes them in that order up to the rank of the one that would reach the
// target were every collapse taken; each is checked (and its rank computed again) when its
// turn comes. A pass that takes nothing makes the next one take everything it can. Between
// passes only the edges of vertices that changed are ranked again: an edge's rank depends on
// its two ends alone. Serial, with ties broken by the edge's vertex ids, so the result is the
// same on every machine.
#include "mesh/collapse.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <numbers>
#include <span>
#include <vector>

namespace s3d::mesh {
namespace {

// Double precision throughout (mesh.h's Vec3 is float): the quadrics' terms cancel to costs
// many orders of magnitude below the positions' size.
using Vec = std::array<double, 3>;

Vec sub(const Vec& a, const Vec& b) { return {a[0] - b[0], a[1] - b[1], a[2] - b[2]}; }
Vec cross(const Vec& a, const Vec& b) {
  return {a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]};
}
double dot(const Vec& a, const Vec& b) { return a[0] * b[0] + a[1] * b[1] + a[2] * b[2]; }

// The squared distance to a set of planes, summed with weights: x^T A x + 2 b.x + c.
struct Quadric {
  double a00 = 0, a01 = 0, a02 = 0, a11 = 0, a12 = 0, a22 = 0, b0 = 0, b1 = 0, b2 = 0, c = 0;

  // The plane n.x + d = 0 (n of unit length) with weight w.
  void add_plane(const Vec& n, double d, double w) {
    a00 += w * n[0] * n[0], a01 += w * n[0] * n[1], a02 += w * n[0] * n[2];
    a11 += w * n[1] * n[1], a12 += w * n[1] * n[2], a22 += w * n[2] * n[2];
    b0 += w * n[0] * d, b1 += w * n[1] * d, b2 += w * n[2] * d, c += w * d * d;
  }
  void add(const Quadric& q) {
    a00 += q.a00, a01 += q.a01, a02 += q.a02, a11 += q.a11, a12 += q.a12, a22 += q.a22;
    b0 += q.b0, b1 += q.b1, b2 += q.b2, c += q.c;
  }
  double at(const Vec& p) const {
    const double x = p[0], y = p[1], z = p[2];
    return a00 * x * x + a11 * y * y + a22 * z * z +
           2 * (a01 * x * y + a02 * x * z + a12 * y * z + b0 * x + b1 * y + b2 * z) + c;
  }
};

// The live faces of each vertex, in one pool: each list starts with room for a few more, and
// moves to the pool's end with twice the room when it outgrows that (one allocation for all
// lists instead of one each).
class FaceLists {
 public:
  FaceLists(const std::vector<uint32_t>& faces, size_t V) : off_(V), len_(V, 0), cap_(V, 0) {
    for (uint32_t v : faces) ++cap_[v];
    size_t at = 0;
    for (size_t v = 0; v < V; ++v) {
      off_[v] = at;
      cap_[v] += kSlack;
      at += cap_[v];
    }
    pool_.resize(at);
    for (size_t i = 0; i < faces.size(); ++i) push(faces[i], static_cast<uint32_t>(i / 3));
  }
  size_t count() const { return off_.size(); }
  size_t size(uint32_t v) const { return len_[v]; }
  // Valid until the next push().
  std::span<const uint32_t> operator[](uint32_t v) const {
    return {pool_.data() + off_[v], len_[v]};
  }
  void push(uint32_t v, uint32_t f) {
    if (len_[v] == cap_[v]) {
      const size_t at = pool_.size();
      cap_[v] = 2 * cap_[v] + kSlack;
      pool_.resize(at + cap_[v]);
      std::copy_n(pool_.begin() + off_[v], len_[v], pool_.begin() + at);
      off_[v] = at;
    }
    pool_[off_[v] + len_[v]++] = f;
  }
  // Removes f from v's list, keeping the order of the rest.
  void erase(uint32_t v, uint32_t f) {
    uint32_t* b = pool_.data() + off_[v];
    uint32_t* e = b + len_[v];
    uint32_t* it = std::find(b, e, f);
    if (it == e) return;
    std::copy(it + 1, e, it);
    --len_[v];
  }
  void clear(uint32_t v) { len_[v] = 0; }

 private:
  static constexpr uint32_t kSlack = 4;
  std::vector<uint32_t> pool_;
  std::vector<size_t> off_;
  std::vector<uint32_t> len_, cap_;
};

// What a collapse from -> to would do.
struct Move {
  bool ok = false;
  uint32_t from = 0, to = 0;
  double error = 0, rank = 0;
};

class Collapser {
 public:
  Collapser(const unsigned* idx, size_t n, const float* pos, size_t V, const uint8_t* locked,
            const CollapseOptions& o)
      : o_(o),
        faces_(idx, idx + n),
        face_alive_(n / 3, 1),
        vf_(faces_, V),
        q_(V),
        qf_(V),
        w_(V, 0),
        fixed_(V, 0),
        border_(V, 0),
        vertex_alive_(V, 1),
        mark_(V, 0),
        seen_(V, 0),
        touched_(V, 0),
        p_(V),
        cos_turn_(std::cos(o.max_turn_degrees * std::numbers::pi / 180)) {
    for (size_t v = 0; v < V; ++v) {
      p_[v] = {pos[3 * v], pos[3 * v + 1], pos[3 * v + 2]};
      if (locked != nullptr && locked[v]) fixed_[v] = 1;
    }
    classify_edges();
    build_quadrics();
    live_faces_ = n / 3;
  }

  // Collapses until at most target_faces are left or nothing within max_error remains, in
  // passes: the live edges by rank, taken in that order up to the rank of the one that would
  // reach the target were all taken (after a pass that takes nothing, the next takes all).
  // Returns the largest error of a collapse made.
  double run(size_t target_faces, double max_error) {
    double worst = 0;
    bool all = false;
    std::vector<std::pair<double, uint64_t>> order;
    all_edges(order);
    while (live_faces_ > target_faces) {
      if (order.empty()) break;
      const size_t want = std::clamp<size_t>((live_faces_ - target_faces) / 2, 1, order.size());
      // Only the edges up to the limit are taken: only they need sorting.
      std::nth_element(order.begin(), order.begin() + (want - 1), order.end());
      const double limit = all ? INFINITY : order[want - 1].first;
      const auto end = all ? order.end() : std::partition(order.begin() + want, order.end(),
                                                          [&](const auto& e) {
                                                            return e.first <= limit;
                                                          });
      std::sort(order.begin(), end);
      ++pass_;
      touched_list_.clear();
      size_t done = 0;
      for (auto e = order.begin(); e != end; ++e) {
        if (e->first > limit || live_faces_ <= target_faces) break;
        const uint32_t u = static_cast<uint32_t>(e->second >> 32);
        const uint32_t v = static_cast<uint32_t>(e->second & 0xffffffffu);
        if (!vertex_alive_[u] || !vertex_alive_[v]) continue;
        const Move m = best(u, v);
        if (!m.ok || m.error > max_error || m.rank > limit) continue;
        collapse(m);
        if (touched_[m.to] != pass_) touched_[m.to] = pass_, touched_list_.push_back(m.to);
        worst = std::max(worst, m.error);
        ++done;
      }
      if (done == 0 && all) break;
      all = done == 0;
      update_edges(order);
    }
    return worst;
  }

  size_t write(unsigned* dest) const {
    size_t n = 0;
    for (size_t f = 0; f < face_alive_.size(); ++f) {
      if (!face_alive_[f]) continue;
      for (int k = 0; k < 3; ++k) dest[n++] = faces_[3 * f + k];
    }
    return n;
  }

 private:
  // Fixed: vertices of faces with a repeated vertex and of edges of three or more faces (and,
  // with lock_border, of open edges). Border: vertices of open edges.
  void classify_edges() {
    for (size_t f = 0; f < faces_.size() / 3; ++f) {
      const uint32_t* t = &faces_[3 * f];
      if (degenerate(static_cast<uint32_t>(f))) fixed_[t[0]] = fixed_[t[1]] = fixed_[t[2]] = 1;
    }
    // Each edge {u, x}, u < x, counted from u's faces (seen_ holds the counts).
    for (uint32_t u = 0; u < vf_.count(); ++u) {
      ++stamp_;
      for (int round = 0; round < 2; ++round) {
        for (uint32_t f : vf_[u]) {
          if (degenerate(f)) continue;
          for (int k = 0; k < 3; ++k) {
            const uint32_t x = faces_[3 * f + k];
            if (x <= u) continue;
            if (round == 0) {
              seen_[x] = mark_[x] == stamp_ ? seen_[x] + 1 : 1;
              mark_[x] = stamp_;
            } else if (seen_[x] > 0) {
              if (seen_[x] > 2) fixed_[u] = fixed_[x] = 1;
              if (seen_[x] == 1) {
                border_[u] = border_[x] = 1;
                if (o_.lock_border) fixed_[u] = fixed_[x] = 1;
              }
              seen_[x] = 0;  // each edge once
            }
          }
        }
      }
    }
  }

  bool degenerate(uint32_t f) const {
    const uint32_t* t = &faces_[3 * f];
    return t[0] == t[1] || t[1] == t[2] || t[2] == t[0];
  }

  void build_quadrics() {
    for (size_t f = 0; f < faces_.size() / 3; ++f) {
      const uint32_t* t = &faces_[3 * f];
      if (degenerate(static_cast<uint32_t>(f))) continue;
      const Vec c = cross(sub(p_[t[1]], p_[t[0]]), sub(p_[t[2]], p_[t[0]]));
      const double len = std::sqrt(dot(c, c));
      if (!(len > 0)) continue;
      const double area = 0.5 * len;
      const Vec n = {c[0] / len, c[1] / len, c[2] / len};
      Quadric face;
      face.add_plane(n, -dot(n, p_[t[0]]), area);
      for (int k = 0; k < 3; ++k) {
        q_[t[k]].add(face);
        qf_[t[k]].add(face);
        w_[t[k]] += area;
      }
      for (int k = 0; k < 3; ++k) {
        const uint32_t a = t[k], b = t[(k + 1) % 3];
        const Vec m = cross(sub(p_[b], p_[a]), n);
        const double ml = std::sqrt(dot(m, m));
        if (!(ml > 0)) continue;
        const Vec mn = {m[0] / ml, m[1] / ml, m[2] / ml};
        const bool open = border_[a] && border_[b] && shared_faces(a, b) == 1;
        Quadric side;
        side.add_plane(mn, -dot(mn, p_[a]), area * (open ? o_.border_weight : o_.shape_weight));
        q_[a].add(side);
        q_[b].add(side);
      }
    }
  }

  int shared_faces(uint32_t a, uint32_t b) const {
    int s = 0;
    for (uint32_t f : vf_[a]) s += has(f, b);
    return s;
  }
  bool has(uint32_t f, uint32_t v) const {
    const uint32_t* t = &faces_[3 * f];
    return t[0] == v || t[1] == v || t[2] == v;
  }

  // The error of collapsing from -> to: the distance from the merged faces' planes (what
  // max_error bounds; the rank adds the shape planes).
  double error(uint32_t from, uint32_t to) const {
    Quadric sum = qf_[from];
    sum.add(qf_[to]);
    const double w = w_[from] + w_[to];
    return std::sqrt(std::max(0.0, sum.at(p_[to])) / (w > 0 ? w : 1.0));
  }

  // The ranks of collapsing u -> v and v -> u (the sum of the two quadrics is the same both
  // ways; only the end it is taken at differs).
  std::pair<double, double> ranks(uint32_t u, uint32_t v) const {
    Quadric sum = q_[u];
    sum.add(q_[v]);
    const double w = w_[u] + w_[v], scale = 1.0 / (w > 0 ? w : 1.0);
    auto at = [&](uint32_t x) { return std::sqrt(std::max(0.0, sum.at(p_[x])) * scale); };
    return {fixed_[u] ? INFINITY : at(v), fixed_[v] ? INFINITY : at(u)};
  }
  double edge_rank(uint32_t u, uint32_t v) const {
    const auto [to_v, to_u] = ranks(u, v);
    return std::min(to_v, to_u);
  }

  // Appends the edges {u, x} of live vertex u (as min << 32 | max) with their ranks (edge_rank:
  // the checks, which can only refuse a collapse, come when it is taken, in best()), but not
  // those that skip(x) says another vertex adds.
  template <class Skip>
  void add_edges(uint32_t u, Skip skip, std::vector<std::pair<double, uint64_t>>& order) {
    ++stamp_;
    for (uint32_t f : vf_[u]) {
      for (int k = 0; k < 3; ++k) {
        const uint32_t x = faces_[3 * f + k];
        if (x == u || mark_[x] == stamp_ || skip(x)) continue;
        mark_[x] = stamp_;
        const double e = edge_rank(u, x);
        if (e < INFINITY) order.push_back({e, uint64_t(std::min(u, x)) << 32 | std::max(u, x)});
      }
    }
  }

  // Every edge once, with its rank.
  void all_edges(std::vector<std::pair<double, uint64_t>>& order) {
    order.clear();
    for (uint32_t u = 0; u < vf_.count(); ++u) {
      add_edges(u, [u](uint32_t x) { return x < u; }, order);
    }
  }

  // After a pass: an edge's rank depends on its two ends' quadrics and positions alone, so only
  // the edges of the vertices collapsed onto in the pass are ranked again (with their new
  // neighbours); the others keep their entries, and those of dead vertices go.
  void update_edges(std::vector<std::pair<double, uint64_t>>& order) {
    auto stale = [this](const std::pair<double, uint64_t>& e) {
      const uint32_t u = static_cast<uint32_t>(e.second >> 32);
      const uint32_t v = static_cast<uint32_t>(e.second & 0xffffffffu);
      return !vertex_alive_[u] || !vertex_alive_[v] || touched_[u] == pass_ ||
             touched_[v] == pass_;
    };
    order.erase(std::remove_if(order.begin(), order.end(), stale), order.end());
    for (uint32_t t : touched_list_) {
      if (!vertex_alive_[t]) continue;
      add_edges(t, [this, t](uint32_t x) { return touched_[x] == pass_ && x < t; }, order);
    }
  }

  // The cheaper of the two directions that passes the checks.
  Move best(uint32_t u, uint32_t v) {
    const auto [to_v, to_u] = ranks(u, v);
    const bool u_first = to_v <= to_u;  // u -> v is tried first
    const uint32_t a = u_first ? u : v, b = u_first ? v : u;
    const double first = std::min(to_u, to_v), second = std::max(to_u, to_v);
    Move m;
    if (first < INFINITY && allowed(a, b)) {
      m = {true, a, b, 0, first};
    } else if (second < INFINITY && allowed(b, a)) {
      m = {true, b, a, 0, second};
    }
    if (m.ok) m.error = error(m.from, m.to);
    return m;
  }


  bool allowed(uint32_t from, uint32_t to);
  void collapse(const Move& m);

  CollapseOptions o_;
  std::vector<uint32_t> faces_;
  std::vector<uint8_t> face_alive_;
  FaceLists vf_;  // the live faces of each vertex
  std::vector<uint32_t> scratch_;
  std::vector<Quadric> q_;   // the faces' planes and the shape planes: the rank
  std::vector<Quadric> qf_;  // the faces' planes alone: the error
  std::vector<double> w_;  // the area behind each quadric's face planes
  std::vector<uint8_t> fixed_, border_, vertex_alive_;
  std::vector<uint32_t> mark_, seen_;
  std::vector<uint32_t> touched_;  // the pass in which a vertex's quadric last changed
  std::vector<uint32_t> touched_list_;  // the vertices touched in this pass
  uint32_t pass_ = 0;
  uint32_t stamp_ = 0;
  std::vector<Vec> p_;
  double cos_turn_;
  size_t live_faces_ = 0;
};

// Whether from -> to passes the checks (collapse.h): the link condition, a face left to every
// vertex, no face turned too far.
bool Collapser::allowed(uint32_t from, uint32_t to) {
  if (fixed_[from]) return false;
  // The faces on the edge, and the link condition: the vertices both ends see are exactly
  // those faces' third vertices (else the collapse would make an edge of three faces).
  ++stamp_;
  for (uint32_t f : vf_[from]) {
    for (int k = 0; k < 3; ++k) mark_[faces_[3 * f + k]] = stamp_;
  }
  int shared = 0;
  for (uint32_t f : vf_[from]) {
    if (!has(f, to)) continue;
    ++shared;
    const uint32_t* t = &faces_[3 * f];
    for (int k = 0; k < 3; ++k) {
      const uint32_t c = t[k];
      // The third vertex must keep a face after this one is gone.
      if (c != from && c != to && vf_.size(c) < 2) return false;
    }
  }
  if (shared == 0 || shared > 2) return false;
  if (border_[from] ? shared != 1 : shared != 2) return false;  // a border vertex slides along it
  int common = 0;
  for (uint32_t f : vf_[to]) {
    for (int k = 0; k < 3; ++k) {
      const uint32_t x = faces_[3 * f + k];
      if (x != from && x != to && mark_[x] == stamp_ && seen_[x] != stamp_) {
        seen_[x] = stamp_;
        ++common;
      }
    }
  }
  if (common != shared) return false;
  // No face turns too far.
  for (uint32_t f : vf_[from]) {
    if (has(f, to)) continue;
    Vec c[3], d[3];
    for (int k = 0; k < 3; ++k) {
      const uint32_t x = faces_[3 * f + k];
      c[k] = p_[x];
      d[k] = x == from ? p_[to] : p_[x];
    }
    const Vec n0 = cross(sub(c[1], c[0]), sub(c[2], c[0]));
    const Vec n1 = cross(sub(d[1], d[0]), sub(d[2], d[0]));
    const double l0 = std::sqrt(dot(n0, n0)), l1 = std::sqrt(dot(n1, n1));
    if (!(l1 > 0) || (l0 > 0 && dot(n0, n1) < cos_turn_ * l0 * l1)) return false;
  }
  return true;
}

void Collapser::collapse(const Move& m) {
  const std::span<const uint32_t> faces = vf_[m.from];
  scratch_.assign(faces.begin(), faces.end());  // pushing onto `to` may move the lists
  for (uint32_t f : scratch_) {
    uint32_t* t = &faces_[3 * f];
    if (has(f, m.to)) {
      face_alive_[f] = 0;
      --live_faces_;
      for (int k = 0; k < 3; ++k) {
        if (t[k] == m.from) continue;
        vf_.erase(t[k], f);
      }
      continue;
    }
    for (int k = 0; k < 3; ++k) {
      if (t[k] == m.from) t[k] = m.to;
    }
    vf_.push(m.to, f);
  }
  vf_.clear(m.from);
  vertex_alive_[m.from] = 0;
  q_[m.to].add(q_[m.from]);
  qf_[m.to].add(qf_[m.from]);
  w_[m.to] += w_[m.from];
}

}  // namespace

size_t collapse_edges(unsigned* dest, const unsigned* indices, size_t index_count,
                      const float* positions, size_t vertex_count, const uint8_t* locked,
                      size_t target_index_count, float max_error, const CollapseOptions& o,
                      float* result_error) {
  Collapser c(indices, index_count, positions, vertex_count, locked, o);
  const double worst = c.run(target_index_count / 3, max_error);
  if (result_error != nullptr) *result_error = static_cast<float>(worst);
  return c.write(dest);
}

}  // namespace s3d::mesh
