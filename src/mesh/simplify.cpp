// Simplification to a face budget (simplify.h) by quadric edge collapse.
//
// The collapse itself is SimplifyOptions::method's: sparse3d's shaped collapse (collapse.h,
// the default: the same quadric error plus planes that keep triangles even, and the link
// condition, so fewer slivers and folded faces for the atlas) or meshoptimizer's (the
// reference: about half the CPU time). Both stop at a face target or an error bound, keep
// every vertex where it is or drop it (no new positions), and are driven by the same loop and
// blocks below; where the text says meshopt_simplify, the shaped collapse takes its place
// with the same arguments (its bound absolute, the locked borders handed over as a vertex
// mask instead of meshopt_SimplifyLockBorder and the point faces).
//
// meshopt_simplify stops at the first of the index target and its error bound (relative to
// the mesh's extent), and it will not collapse across complex topology. TRELLIS.2's budget is
// a hard one, so the bound starts tight (a good surface when the budget is easy) and is
// relaxed pass after pass while the result is above the target; should the collapse stall
// with the bound already at the mesh's whole extent, the sloppy (vertex clustering)
// simplifier, which ignores topology, finishes the job, and should clustering merge every
// face away, the largest faces are kept. Each pass starts from the last one's output, so the
// bound holds per pass, not for the sum of the passes (the first pass does nearly all the
// work at TRELLIS.2's budgets).
//
// That loop is serial, and the remesh hands it 6-13 million faces for a budget of 0.5-1
// million: seconds. A large input therefore first goes through spatial blocks, in parallel:
// - Blocks: the faces are cut into up to 64 blocks (median cuts of the face centroids,
//   binned on a grid, along the longest side; a block keeps at least 60,000 input and 8,000
//   output faces; SimplifyOptions says why 64), and each block, with its own compact vertex
//   set, is simplified on its own thread to its share of the budget (the threads take the
//   blocks largest first, simplify_each says why). Small meshes are also faster for
//   meshoptimizer per face (its passes touch every vertex), so this pays on one thread too.
// - Locked borders: meshopt_SimplifyLockBorder keeps every vertex on an open edge where it
//   is, and an edge shared with another block is open inside the block, so the blocks still
//   stitch exactly (the output is watertight where the input was). meshoptimizer 0.18 finds
//   open edges by their half-edges, so a border vertex whose every edge has a twin in the
//   block (an edge of four faces, two each way: where two sheets of a remeshed thin part
//   meet) looks manifold to it and would be collapsed; such a vertex, and the vertices of its
//   faces, get a point face (v, v, v), whose self-edge makes meshoptimizer lock v
//   (lock_closed_border). Before that, regr01 (a CAD part, 23,497 such edges in its remeshed
//   surface) sent back 12 of 15 blocks of the second round, and the serial final pass did
//   the rest (1.4 s of its 2.3 s on the H200 machine's cores). A vertex that another block
//   uses and that a block's simplification lost anyway still sends that block back
//   unsimplified.
// - Seams: the locked borders keep the input's density, and meshoptimizer would thin them
//   out no faster than the rest later on (its error does not see density), so the blocks'
//   budgets leave room for them, and then the faces on the borders, cut into pieces across
//   other directions, are simplified with their rims locked, down to the rest's density
//   (the budget left) but no further than a typical block's error.
// - A second round: the first round's output is still above the target where the seams'
//   error bound stopped them (a third above it on a remeshed cat at 1,000,000), and one serial
//   pass over a million faces is about a second. So it is cut into blocks again, across the
//   oblique directions (the first round's seams now run through the middle of the new
//   blocks), and each block, its border locked, is simplified to its exact share of the
//   target: no border slack, the density being near the target's already. Measured on
//   remeshed cat and bunny at 500,000 and 1,000,000 faces: the same or smaller distances to
//   the input both ways (max and mean) than the serial pass, in a fifth of its time on two
//   threads (SimplifyOptions::second_round turns it off). A block that cannot reach its
//   share (its locked border, or topology meshoptimizer will not collapse) leaves the sum a
//   little above the target (spider: 0.3%), and the serial pass over the whole mesh would
//   cost a third of a second for that: a third round, cut across the axes again, takes it
//   when the second did at least half of its work. Open boundaries of the mesh itself are
//   locked like block borders (meshoptimizer 0.18 locks every open edge).
// - The final pass: the serial loop above then runs over the whole result when it is still
//   above the target, which holds the hard budget and keeps its fallbacks; it starts near
//   the target, so it is a fraction of the input's cost.
// - Flat faces: collapses along a straight run of vertices (a CAD part's edges, remeshed on
//   the voxel grid) leave faces with three vertices in a line (9,549 on regr01 at 500,000).
//   Dropping them opened as many slits (19,157 open edges, and charts that could not grow
//   across them); flip_flat_faces (clean.h) flips each one's long edge instead where the face
//   across allows it (all but 1,302 open edges closed), and only what is left is dropped.
//   Caps (a corner almost on the opposite edge: largest angle above
//   SimplifyOptions::cap_degrees, 175) are flipped the same way: they often stand steep to
//   the faces around them and each made a chart of its own in the atlas (with the atlas's
//   split of large ragged charts that came with it, regr01 at 500,000: 8,778 charts -> 7,394,
//   texture use 0.475 -> 0.483; bunny 2,618 -> 1,175; docs/EXPORT.md, "Caps").
// The blocks and their budgets depend on the mesh alone, never on the thread count, each is
// simplified from its own data, and they are put back in block order, so the result does not
// depend on the thread count. Small inputs, or budgets not far below the input, keep the
// serial path: the blocks would save little there and only add seams.
#include "mesh/simplify.h"

#include <meshoptimizer.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <numeric>
#include <utility>
#include <vector>

#include "core/error.h"
#include "mesh/clean.h"
#include "mesh/collapse.h"
#include "mesh/timing.h"

namespace s3d::mesh {
namespace {

constexpr float kFirstError = 1e-2f;  // relative to the mesh's extent
constexpr float kMaxError = 1.0f;     // the whole extent: the bound no longer limits anything
// The blocks run when they take at least this share of the faces away (see the top).
constexpr double kMinBlockReduction = 2.0;
// A block's budget: its share of the target plus this many faces per vertex on its border,
// which stays at the input's density until the seam pass. This leaves the final pass some
// slack to spend where the error is least: measured (remeshed surfaces, noisy tori), it
// gives smaller errors than blocks and seams that land on the target themselves.
constexpr double kBorderFaces = 1.0;
// The seam pass stops at this many times the median of the blocks' largest errors.
constexpr float kSeamError = 1.0f;
constexpr int kGridCells = 128;  // cells along the longest side, for the cuts
// Rounds of blocks after the first, at most, before the serial final pass (see the top).
constexpr int kLaterRounds = 2;
// Loops shorter than this run on one thread (simplify's own, above mesh.h's kParallelMin).
constexpr int64_t kSimplifyParallelMin = 1 << 16;

// The squared length of the face's edge cross product (four times its area squared).
double area2(const unsigned* face, const std::vector<float>& p) {
  double e0[3], e1[3];
  for (int k = 0; k < 3; ++k) {
    e0[k] = double(p[3 * size_t(face[1]) + k]) - p[3 * size_t(face[0]) + k];
    e1[k] = double(p[3 * size_t(face[2]) + k]) - p[3 * size_t(face[0]) + k];
  }
  const double cx = e0[1] * e1[2] - e0[2] * e1[1], cy = e0[2] * e1[0] - e0[0] * e1[2],
               cz = e0[0] * e1[1] - e0[1] * e1[0];
  return cx * cx + cy * cy + cz * cz;
}

// The `target` indices (a multiple of 3) of the largest faces among indices[0, n), in their
// order; ties go to the earlier face.
size_t keep_largest(std::vector<unsigned>& indices, size_t n, size_t target,
                    const std::vector<float>& p) {
  const size_t faces = n / 3, keep = std::min(faces, target / 3);
  std::vector<std::pair<double, size_t>> order(faces);
  for (size_t f = 0; f < faces; ++f) order[f] = {-area2(&indices[3 * f], p), f};
  std::nth_element(order.begin(), order.begin() + keep, order.end());
  std::vector<size_t> kept(keep);
  for (size_t i = 0; i < keep; ++i) kept[i] = order[i].second;
  std::sort(kept.begin(), kept.end());
  for (size_t i = 0; i < keep; ++i) {
    for (int k = 0; k < 3; ++k) indices[3 * i + k] = indices[3 * kept[i] + k];
  }
  return 3 * keep;
}

struct Box {
  float lo[3], hi[3];
};

// meshopt_simplify's unit for its error bound: the largest side of the vertices' box.
float extent(const Box& b) {
  return std::max({b.hi[0] - b.lo[0], b.hi[1] - b.lo[1], b.hi[2] - b.lo[2]});
}

// The box of the points at(i), i < n (at returns a std::array<float, 3>).
template <class At>
Box bounds(int64_t n, At at) {
  float lo0 = INFINITY, lo1 = INFINITY, lo2 = INFINITY;
  float hi0 = -INFINITY, hi1 = -INFINITY, hi2 = -INFINITY;
#pragma omp parallel for schedule(static) reduction(min : lo0, lo1, lo2) \
    reduction(max : hi0, hi1, hi2) if (n >= kSimplifyParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const std::array<float, 3> q = at(i);
    lo0 = std::min(lo0, q[0]), hi0 = std::max(hi0, q[0]);
    lo1 = std::min(lo1, q[1]), hi1 = std::max(hi1, q[1]);
    lo2 = std::min(lo2, q[2]), hi2 = std::max(hi2, q[2]);
  }
  return {{lo0, lo1, lo2}, {hi0, hi1, hi2}};
}

// The serial loop of the top comment over indices[0, n) (n > target, both in indices); `out`
// is scratch of n. Returns the indices left, in indices[0, result).
size_t reduce_serial(std::vector<unsigned>& indices, std::vector<unsigned>& out, size_t n,
                     const std::vector<float>& p, size_t target, SimplifyMethod method) {
  const size_t V = p.size() / 3;
  out.resize(n);
  float bound = kFirstError;
  const float scale = method == SimplifyMethod::shaped
                          ? extent(bounds(static_cast<int64_t>(V), [&p](int64_t v) {
                              return std::array<float, 3>{p[3 * v], p[3 * v + 1], p[3 * v + 2]};
                            }))
                          : 0.f;
  for (;;) {
    const size_t before = n;
    n = method == SimplifyMethod::shaped
            ? collapse_edges(out.data(), indices.data(), n, p.data(), V, nullptr, target,
                             bound * scale, CollapseOptions{}, nullptr)
            : meshopt_simplify(out.data(), indices.data(), n, p.data(), V, 3 * sizeof(float),
                               target, bound, 0, nullptr);
    indices.swap(out);
    if (n <= target) return n;
    // A pass at the largest bound collapsed all it could: the topology blocks the rest.
    if (bound >= kMaxError) break;
    // Relax fast when the bound held the pass back to little, gently when it was progressing,
    // so that the final bound stays near the smallest one that reaches the target.
    const bool slow = before - n < before / 100;
    bound = std::min(kMaxError, bound * (slow ? 10.f : 2.f));
  }
  // Clustering works on positions alone, so it also reduces what edge collapse may not
  // touch (unwelded faces, non-manifold fans), at the price of the surface's detail.
  const size_t sloppy = meshopt_simplifySloppy(out.data(), indices.data(), n, p.data(), V,
                                               3 * sizeof(float), target,
                                               std::numeric_limits<float>::max(), nullptr);
  if (sloppy > 0) {
    indices.swap(out);
    return sloppy;
  }
  // Clustering merged every face away (small isolated features): keep the largest.
  return keep_largest(indices, n, target, p);
}

// ---- Spatial blocks ------------------------------------------------------------------------

// The directions the blocks are cut across (rows), and those the seam pieces are cut across:
// (1, 1, 1) / sqrt 3, (1, -1, 0) / sqrt 2, (1, 1, -2) / sqrt 6, none along an axis, so that
// the pieces' cuts cross the blocks' borders instead of running along them.
using Frame = std::array<std::array<float, 3>, 3>;
constexpr Frame kAxes = {{{1, 0, 0}, {0, 1, 0}, {0, 0, 1}}};
constexpr Frame kOblique = {{{0.57735027f, 0.57735027f, 0.57735027f},
                             {0.70710678f, -0.70710678f, 0},
                             {0.40824829f, 0.40824829f, -0.81649658f}}};

// Faces grouped by block: block k is faces[start[k] .. start[k + 1]), ascending.
struct Blocks {
  std::vector<int64_t> start;
  std::vector<int64_t> faces;
  int32_t count() const { return static_cast<int32_t>(start.size()) - 1; }
};

// A non-empty grid cell of face centroids: its index, coordinates and face count.
struct Cell {
  int64_t id;
  int32_t c[3];
  int64_t faces;
};

// Cuts cells[begin, end) into at most `blocks` blocks by recursive median cuts between cell
// layers along the longest side, and numbers them from `next` on, in order.
void cut_cells(std::vector<Cell>& cells, size_t begin, size_t end, int blocks, int32_t& next,
               std::vector<int32_t>& block_of_cell) {
  int32_t lo[3] = {INT32_MAX, INT32_MAX, INT32_MAX}, hi[3] = {-1, -1, -1};
  int64_t total = 0;
  for (size_t i = begin; i < end; ++i) {
    for (int k = 0; k < 3; ++k) lo[k] = std::min(lo[k], cells[i].c[k]);
    for (int k = 0; k < 3; ++k) hi[k] = std::max(hi[k], cells[i].c[k]);
    total += cells[i].faces;
  }
  int axis = 0;
  for (int k = 1; k < 3; ++k) {
    if (hi[k] - lo[k] > hi[axis] - lo[axis]) axis = k;
  }
  if (blocks <= 1 || hi[axis] == lo[axis]) {
    for (size_t i = begin; i < end; ++i) block_of_cell[cells[i].id] = next;
    ++next;
    return;
  }
  std::sort(cells.begin() + begin, cells.begin() + end, [axis](const Cell& a, const Cell& b) {
    return a.c[axis] != b.c[axis] ? a.c[axis] < b.c[axis] : a.id < b.id;
  });
  // The layer boundary whose left side is closest to half the faces (the first of equals).
  size_t cut = begin;
  int64_t left = 0, best_left = 0, best = INT64_MAX;
  for (size_t i = begin; i < end; ++i) {
    if (i > begin && cells[i].c[axis] != cells[i - 1].c[axis] &&
        std::abs(2 * left - total) < best) {
      best = std::abs(2 * left - total), cut = i, best_left = left;
    }
    left += cells[i].faces;
  }
  const int left_blocks = static_cast<int>(
      std::clamp<int64_t>(std::llround(double(blocks) * best_left / total), 1, blocks - 1));
  cut_cells(cells, begin, cut, left_blocks, next, block_of_cell);
  cut_cells(cells, cut, end, blocks - left_blocks, next, block_of_cell);
}

// A counting sort of faces [0, F) by block, each block in face order; fixed chunks, so that
// threads never decide an order.
Blocks sort_by_block(const std::vector<int32_t>& block_of_face, int32_t blocks) {
  const int64_t F = static_cast<int64_t>(block_of_face.size());
  const int64_t chunks = std::min<int64_t>(64, F / kSimplifyParallelMin + 1);
  std::vector<int64_t> at(chunks * blocks, 0);  // chunk c's count, then start, in block k
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    for (int64_t i = F * c / chunks; i < F * (c + 1) / chunks; ++i) {
      ++at[c * blocks + block_of_face[i]];
    }
  }
  Blocks b;
  b.start.assign(blocks + 1, 0);
  int64_t sum = 0;
  for (int32_t k = 0; k < blocks; ++k) {
    b.start[k] = sum;
    for (int64_t c = 0; c < chunks; ++c) sum += std::exchange(at[c * blocks + k], sum);
  }
  b.start[blocks] = sum;
  b.faces.resize(F);
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    for (int64_t i = F * c / chunks; i < F * (c + 1) / chunks; ++i) {
      b.faces[at[c * blocks + block_of_face[i]]++] = i;
    }
  }
  return b;
}

// The faces idx[3i .. 3i + 2], i < F, cut into at most `blocks` blocks: their centroids in
// `frame` binned on a grid of cubic cells, the non-empty cells cut by cut_cells.
Blocks make_blocks(const std::vector<float>& p, const unsigned* idx, int64_t F,
                   const Frame& frame, int blocks) {
  auto centroid = [&](int64_t i) {
    std::array<float, 3> c{0, 0, 0};
    for (int j = 0; j < 3; ++j) {
      const float* v = &p[3 * size_t(idx[3 * i + j])];
      for (int k = 0; k < 3; ++k) {
        c[k] += frame[k][0] * v[0] + frame[k][1] * v[1] + frame[k][2] * v[2];
      }
    }
    return c;
  };
  const Box box = bounds(F, centroid);
  const float cell = std::max(extent(box), std::numeric_limits<float>::min()) / kGridCells;
  int64_t dims[3];
  for (int k = 0; k < 3; ++k) {
    dims[k] = std::clamp<int64_t>(int64_t((box.hi[k] - box.lo[k]) / cell) + 1, 1, kGridCells);
  }
  std::vector<int32_t> cell_of_face(F);
  std::vector<int64_t> count(dims[0] * dims[1] * dims[2], 0);
#pragma omp parallel for schedule(static) if (F >= kSimplifyParallelMin)
  for (int64_t i = 0; i < F; ++i) {
    const std::array<float, 3> c = centroid(i);
    int64_t id = 0;
    for (int k = 2; k >= 0; --k) {
      id = id * dims[k] + std::clamp<int64_t>(int64_t((c[k] - box.lo[k]) / cell), 0, dims[k] - 1);
    }
    cell_of_face[i] = static_cast<int32_t>(id);
#pragma omp atomic
    ++count[id];
  }
  std::vector<Cell> cells;
  for (int64_t id = 0; id < int64_t(count.size()); ++id) {
    if (count[id] == 0) continue;
    cells.push_back({id,
                     {int32_t(id % dims[0]), int32_t(id / dims[0] % dims[1]),
                      int32_t(id / (dims[0] * dims[1]))},
                     count[id]});
  }
  std::vector<int32_t> block_of_cell(count.size(), -1);
  int32_t made = 0;
  cut_cells(cells, 0, cells.size(), blocks, made, block_of_cell);
#pragma omp parallel for schedule(static) if (F >= kSimplifyParallelMin)
  for (int64_t i = 0; i < F; ++i) cell_of_face[i] = block_of_cell[cell_of_face[i]];
  return sort_by_block(cell_of_face, made);
}

// border[v] = 1 for the vertices that faces of two or more blocks use (over the faces idx).
std::vector<uint8_t> border_vertices(const unsigned* idx, size_t V, const Blocks& b) {
  std::vector<int32_t> owner(V, -1);
  std::vector<uint8_t> border(V, 0);
#pragma omp parallel for schedule(dynamic, 1)
  for (int32_t k = 0; k < b.count(); ++k) {
    for (int64_t i = b.start[k]; i < b.start[k + 1]; ++i) {
      for (int c = 0; c < 3; ++c) {
        const unsigned v = idx[3 * b.faces[i] + c];
        std::atomic_ref<int32_t> o(owner[v]);
        int32_t cur = o.load(std::memory_order_relaxed);
        if (cur == k) continue;
        if (cur == -1 && o.compare_exchange_strong(cur, k, std::memory_order_relaxed)) continue;
        std::atomic_ref<uint8_t>(border[v]).store(1, std::memory_order_relaxed);
      }
    }
  }
  return border;
}

// Global vertex ids to a block's own 0, 1, 2... in order of first use (open addressing).
class LocalIds {
 public:
  explicit LocalIds(size_t expected) { resize(std::bit_ceil(2 * expected + 2)); }
  // The local id of `v`; a new one is appended to `globals`.
  unsigned get(unsigned v, std::vector<unsigned>& globals) {
    if (2 * (globals.size() + 1) > keys_.size()) grow(globals);
    size_t h = hash(v);
    while (keys_[h] != kEmpty) {
      if (keys_[h] == v) return vals_[h];
      h = (h + 1) & (keys_.size() - 1);
    }
    keys_[h] = v, vals_[h] = static_cast<unsigned>(globals.size());
    globals.push_back(v);
    return vals_[h];
  }

 private:
  static constexpr unsigned kEmpty = std::numeric_limits<unsigned>::max();
  // Fibonacci hashing: the top bits of the product.
  size_t hash(unsigned v) const { return size_t(v) * 0x9E3779B97F4A7C15ull >> shift_; }
  void resize(size_t size) {
    keys_.assign(size, kEmpty);
    vals_.resize(size);
    shift_ = 64 - std::countr_zero(size);
  }
  void grow(const std::vector<unsigned>& globals) {
    resize(2 * keys_.size());
    for (unsigned i = 0; i < globals.size(); ++i) {
      size_t h = hash(globals[i]);
      while (keys_[h] != kEmpty) h = (h + 1) & (keys_.size() - 1);
      keys_[h] = globals[i], vals_[h] = i;
    }
  }
  std::vector<unsigned> keys_, vals_;
  int shift_ = 64;
};

// Drops the point faces (v, v, v) that lock a block's border vertices (see the top), which
// meshoptimizer leaves in place when it collapses nothing.
void drop_point_faces(std::vector<unsigned>& indices) {
  size_t n = 0;
  for (size_t i = 0; i < indices.size(); i += 3) {
    if (indices[i] == indices[i + 1] && indices[i] == indices[i + 2]) continue;
    for (int c = 0; c < 3; ++c) indices[n + c] = indices[i + c];
    n += 3;
  }
  indices.resize(n);
}

// meshoptimizer 0.18 takes a vertex with no open half-edge for a manifold one (an edge of
// four faces, two each way, looks closed), so meshopt_SimplifyLockBorder does not lock a block's
// border vertex that sits on such an edge, and the block would lose it (see the top). Appends
// to `indices` (a block's faces, local ids) a point face (v, v, v) on each such vertex: its
// self-edge makes meshoptimizer lock v, and the face is gone after its first pass
// (drop_point_faces takes it when there was none). The point faces count towards the first
// pass's goal, so they are kept to the vertices that need them (few: most border vertices
// have an open half-edge in their block).
void lock_closed_border(std::vector<unsigned>& indices, const std::vector<unsigned>& globals,
                        const std::vector<uint8_t>& border) {
  std::vector<uint64_t> half;  // (from << 32 | to), for the edges at a border vertex
  for (size_t i = 0; i < indices.size(); i += 3) {
    for (int c = 0; c < 3; ++c) {
      const unsigned a = indices[i + c], b = indices[i + (c + 1) % 3];
      if (border[globals[a]] || border[globals[b]]) half.push_back(uint64_t(a) << 32 | b);
    }
  }
  std::sort(half.begin(), half.end());
  std::vector<uint8_t> open(globals.size(), 0);
  for (uint64_t e : half) {
    const uint64_t back = (e << 32) | (e >> 32);
    if (!std::binary_search(half.begin(), half.end(), back)) {
      open[e >> 32] = open[e & 0xffffffffu] = 1;
    }
  }
  // Locked too: the vertices of its faces, or collapsing two of them onto each other could
  // take v's last faces away (a fin of two faces, back to back).
  std::vector<uint8_t> lock(globals.size(), 0);
  const size_t faces_end = indices.size();
  for (size_t i = 0; i < faces_end; i += 3) {
    const unsigned* f = &indices[i];
    bool closed = false;
    for (int c = 0; c < 3; ++c) closed |= border[globals[f[c]]] && !open[f[c]];
    if (closed) lock[f[0]] = lock[f[1]] = lock[f[2]] = 1;
  }
  for (size_t v = 0; v < globals.size(); ++v) {
    if (lock[v]) indices.insert(indices.end(), 3, static_cast<unsigned>(v));
  }
}

// Block k of `b` (over the faces idx) simplified with its border locked to at most
// budget(faces, border vertices) faces, as far as the absolute `bound` allows; in global
// vertex ids. `error` receives its largest collapse error (absolute); `sent_back` whether the
// block came back unsimplified (see the top).
template <class Budget>
std::vector<unsigned> simplify_block(const std::vector<float>& positions, const unsigned* idx,
                                     const Blocks& b, int32_t k, Budget budget, float bound,
                                     const std::vector<uint8_t>& border, SimplifyMethod method,
                                     float& error, uint8_t& sent_back) {
  const int64_t count = b.start[k + 1] - b.start[k];
  std::vector<unsigned> globals, indices(3 * count);
  globals.reserve(count);
  LocalIds ids(count);
  for (int64_t i = 0; i < count; ++i) {
    const unsigned* face = &idx[3 * b.faces[b.start[k] + i]];
    for (int c = 0; c < 3; ++c) indices[3 * i + c] = ids.get(face[c], globals);
  }
  std::vector<float> p(3 * globals.size());
  Box box = {{INFINITY, INFINITY, INFINITY}, {-INFINITY, -INFINITY, -INFINITY}};
  int64_t on_border = 0;
  for (size_t v = 0; v < globals.size(); ++v) {
    for (int c = 0; c < 3; ++c) {
      p[3 * v + c] = positions[3 * size_t(globals[v]) + c];
      box.lo[c] = std::min(box.lo[c], p[3 * v + c]);
      box.hi[c] = std::max(box.hi[c], p[3 * v + c]);
    }
    on_border += border[globals[v]];
  }
  const int64_t target = std::clamp<int64_t>(budget(count, on_border), 0, count);
  error = 0;
  if (target >= count) {
    for (unsigned& v : indices) v = globals[v];
    return indices;
  }
  std::vector<unsigned> out;
  if (method == SimplifyMethod::shaped) {
    out.resize(indices.size());
    std::vector<uint8_t> lock(globals.size());
    for (size_t v = 0; v < globals.size(); ++v) lock[v] = border[globals[v]];
    CollapseOptions co;
    co.lock_border = true;
    out.resize(collapse_edges(out.data(), indices.data(), indices.size(), p.data(),
                              globals.size(), lock.data(), 3 * size_t(target), bound, co,
                              &error));
  } else {
    std::vector<unsigned> locked = indices;
    lock_closed_border(locked, globals, border);
    const float scale = extent(box);
    out.resize(locked.size());
    float relative = 0;
    out.resize(meshopt_simplify(out.data(), locked.data(), locked.size(), p.data(),
                                globals.size(), 3 * sizeof(float), 3 * size_t(target),
                                scale > 0 ? bound / scale : 0.f, meshopt_SimplifyLockBorder,
                                &relative));
    error = relative * scale;
    drop_point_faces(out);
  }
  // Every vertex another block uses must still be here (see the top).
  std::vector<uint8_t> kept(globals.size(), 0);
  for (unsigned v : out) kept[v] = 1;
  for (size_t v = 0; v < globals.size(); ++v) {
    if (border[globals[v]] && !kept[v]) {
      out = std::move(indices);
      error = 0;
      sent_back = 1;
      break;
    }
  }
  for (unsigned& v : out) v = globals[v];
  return out;
}

// Every block of `b` simplified by simplify_block, in parallel; the results are appended to
// `all` in block order. Returns the blocks' errors; adds the blocks sent back to `sent_back`.
// The threads take the blocks largest first: a block's time follows its face count (the
// median cuts are between cell layers, so blocks differ by up to 3x), and a large block
// taken last leaves the other threads idle. On bunny's 62 blocks, timed one by one, 16
// threads in block order would take 1.22 s and largest first 0.94 s (the ideal 0.90 s).
template <class Budget>
std::vector<float> simplify_each(const std::vector<float>& positions, const unsigned* idx,
                                 const Blocks& b, const std::vector<uint8_t>& border,
                                 float bound, Budget budget, SimplifyMethod method,
                                 std::vector<unsigned>& all, int64_t& sent_back) {
  const int32_t blocks = b.count();
  std::vector<std::vector<unsigned>> out(blocks);
  std::vector<float> errors(blocks, 0);
  std::vector<uint8_t> back(blocks, 0);
  std::vector<int32_t> largest_first(blocks);
  std::iota(largest_first.begin(), largest_first.end(), 0);
  std::stable_sort(largest_first.begin(), largest_first.end(), [&b](int32_t x, int32_t y) {
    return b.start[x + 1] - b.start[x] > b.start[y + 1] - b.start[y];
  });
#pragma omp parallel for schedule(dynamic, 1)
  for (int32_t i = 0; i < blocks; ++i) {
    const int32_t k = largest_first[i];
    out[k] = simplify_block(positions, idx, b, k, budget, bound, border, method, errors[k],
                            back[k]);
  }
  sent_back += std::count(back.begin(), back.end(), uint8_t(1));
  std::vector<size_t> at(blocks + 1, all.size());
  for (int32_t k = 0; k < blocks; ++k) at[k + 1] = at[k] + out[k].size();
  all.resize(at[blocks]);
#pragma omp parallel for schedule(static)
  for (int32_t k = 0; k < blocks; ++k) std::copy(out[k].begin(), out[k].end(), all.begin() + at[k]);
  return errors;
}

// The seam pass of the top comment over `faces` (global vertex ids; `border` marks the
// blocks' borders): the faces on a border, cut into pieces across kOblique, simplified with
// their rims locked to what the other faces leave of `target`, within `bound`.
std::vector<unsigned> simplify_seams(const std::vector<float>& positions,
                                     const std::vector<unsigned>& faces,
                                     const std::vector<uint8_t>& border, float bound,
                                     int64_t target, const SimplifyOptions& o,
                                     int64_t& sent_back) {
  std::vector<unsigned> seams, all;
  for (size_t i = 0; i < faces.size(); i += 3) {
    std::vector<unsigned>& to =
        border[faces[i]] | border[faces[i + 1]] | border[faces[i + 2]] ? seams : all;
    to.insert(to.end(), &faces[i], &faces[i] + 3);
  }
  const int64_t F = static_cast<int64_t>(seams.size() / 3);
  if (F == 0) return faces;
  // Pieces a quarter of a block: the seams are a small share of the faces.
  const int pieces = static_cast<int>(std::clamp<int64_t>(4 * F / o.block_faces, 1, o.max_blocks));
  const Blocks b = make_blocks(positions, seams.data(), F, kOblique, pieces);
  // Locked in a piece: what another piece or the other faces use.
  std::vector<uint8_t> rim = border_vertices(seams.data(), positions.size() / 3, b);
#pragma omp parallel for schedule(static) if (all.size() >= size_t(kSimplifyParallelMin))
  for (size_t i = 0; i < all.size(); ++i) {
    std::atomic_ref<uint8_t>(rim[all[i]]).store(1, std::memory_order_relaxed);
  }
  const double ratio = std::max(0.0, double(target) - double(all.size() / 3)) / double(F);
  auto budget = [ratio](int64_t count, int64_t) { return static_cast<int64_t>(ratio * count); };
  simplify_each(positions, seams.data(), b, rim, bound, budget, o.method, all, sent_back);
  return all;
}

// How many blocks the mesh is cut into: 1 leaves it to the serial loop.
int block_count(int64_t F, int64_t target, const SimplifyOptions& o) {
  if (F < o.parallel_min_faces || double(F) < kMinBlockReduction * double(target)) return 1;
  return static_cast<int>(
      std::clamp<int64_t>(std::min(F / o.block_faces, target / o.block_budget), 1, o.max_blocks));
}

// The blocks' collapse bound, absolute: kFirstError of the whole mesh's extent (every round).
float block_bound(const TriMesh& m) {
  return kFirstError * extent(bounds(m.num_vertices(), [&m](int64_t v) { return m.vertex(v); }));
}

// The blocks and the seam pass of the top comment: the mesh reduced to about `target` faces
// (global vertex ids), the blocks within `bound`.
std::vector<unsigned> simplify_blocks(const TriMesh& m, int64_t target, float bound,
                                      const SimplifyOptions& o, int64_t& sent_back,
                                      SubTimer& timer) {
  const int64_t F = m.num_faces();
  // int32 and unsigned may alias: the faces as meshoptimizer's indices, without a copy.
  const unsigned* idx = reinterpret_cast<const unsigned*>(m.faces.data());
  const Blocks b = make_blocks(m.positions, idx, F, kAxes, block_count(F, target, o));
  const std::vector<uint8_t> border = border_vertices(idx, m.positions.size() / 3, b);
  const double ratio = double(target) / double(F);
  auto budget = [ratio](int64_t count, int64_t on_border) {
    return std::max<int64_t>(1, std::llround(ratio * count + kBorderFaces * on_border));
  };
  std::vector<unsigned> faces;
  timer.mark("cut into blocks");
  std::vector<float> errors =
      simplify_each(m.positions, idx, b, border, bound, budget, o.method, faces, sent_back);
  timer.mark("blocks", static_cast<long long>(faces.size() / 3));
  // The seams are coarsened as far as a typical block went.
  std::nth_element(errors.begin(), errors.begin() + errors.size() / 2, errors.end());
  std::vector<unsigned> out = simplify_seams(m.positions, faces, border,
                                             kSeamError * errors[errors.size() / 2], target, o,
                                             sent_back);
  timer.mark("seams", static_cast<long long>(out.size() / 3));
  return out;
}

// A later round of blocks of the top comment: the last round's output (global vertex ids,
// above the target) cut again across `cuts` (other directions than the last round's, so that
// its seams run through the middle of the new blocks), each block simplified to its exact
// share of the target (no border slack: the density is already near the target's) within
// `bound`.
std::vector<unsigned> later_round(const TriMesh& m, const std::vector<unsigned>& faces,
                                  int64_t target, float bound, const SimplifyOptions& o,
                                  const Frame& cuts, int64_t& sent_back) {
  const int64_t F = static_cast<int64_t>(faces.size() / 3);
  const int blocks = std::clamp<int>(static_cast<int>(F / o.block_faces), 1, o.max_blocks);
  if (blocks < 2) return faces;
  const Blocks b = make_blocks(m.positions, faces.data(), F, cuts, blocks);
  const std::vector<uint8_t> border = border_vertices(faces.data(), m.positions.size() / 3, b);
  const double ratio = double(target) / double(F);
  auto budget = [ratio](int64_t count, int64_t) {
    return std::max<int64_t>(1, static_cast<int64_t>(ratio * double(count)));
  };
  std::vector<unsigned> out;
  simplify_each(m.positions, faces.data(), b, border, bound, budget, o.method, out, sent_back);
  return out;
}

// The serial loop over the blocks' output (global vertex ids, above the target) on its own
// vertices only: meshoptimizer's work is per vertex too. Returns the faces left, global.
std::vector<unsigned> final_pass(const TriMesh& m, std::vector<unsigned> indices, size_t target,
                                 SimplifyMethod method) {
  std::vector<int32_t> local(m.num_vertices(), -1);
  std::vector<unsigned> global;
  std::vector<float> p;
  for (unsigned& v : indices) {
    if (local[v] < 0) {
      local[v] = static_cast<int32_t>(global.size());
      global.push_back(v);
      p.insert(p.end(), &m.positions[3 * size_t(v)], &m.positions[3 * size_t(v)] + 3);
    }
    v = static_cast<unsigned>(local[v]);
  }
  std::vector<unsigned> out;
  indices.resize(reduce_serial(indices, out, indices.size(), p, target, method));
  for (unsigned& v : indices) v = global[v];
  return indices;
}

}  // namespace

void simplify(TriMesh& m, int64_t target_faces) { simplify(m, target_faces, SimplifyOptions{}); }

SimplifyStats simplify(TriMesh& m, int64_t target_faces, const SimplifyOptions& options) {
  S3D_CHECK(target_faces >= 1, "simplify: target_faces must be at least 1 (got ", target_faces,
            ")");
  S3D_CHECK(options.max_blocks >= 1 && options.block_faces >= 1 && options.block_budget >= 1,
            "simplify: max_blocks, block_faces and block_budget must be at least 1 (got ",
            options.max_blocks, ", ", options.block_faces, ", ", options.block_budget, ")");
  S3D_CHECK(options.cap_degrees > 90 && options.cap_degrees <= 180,
            "simplify: cap_degrees must be in (90, 180] (got ", options.cap_degrees, ")");
  SubTimer timer("simplify");
  check_mesh(m, "simplify");
  SimplifyStats stats;
  if (m.num_faces() <= target_faces) return stats;
  const size_t target = 3 * static_cast<size_t>(target_faces);
  std::vector<unsigned> indices;
  if (block_count(m.num_faces(), target_faces, options) > 1) {
    const float bound = block_bound(m);
    timer.mark("check and bound");
    indices = simplify_blocks(m, target_faces, bound, options, stats.blocks_sent_back, timer);
    // A block that cannot reach its share (its border, or topology, holds it) leaves the sum
    // above the target: a third round, across the axes again, takes what is left when the
    // second did at least half of its work; the serial pass takes the rest.
    for (int round = 0; options.second_round && round < kLaterRounds && indices.size() > target;
         ++round) {
      const size_t before = indices.size();
      indices = later_round(m, indices, target_faces, bound, options,
                            round % 2 == 0 ? kOblique : kAxes, stats.blocks_sent_back);
      if (2 * (before - indices.size()) < before - target) break;
    }
    timer.mark("second round", static_cast<long long>(indices.size() / 3));
    if (indices.size() > target) {
      stats.final_pass_faces = static_cast<int64_t>(indices.size() / 3);
      indices = final_pass(m, std::move(indices), target, options.method);
    }
    timer.mark("final pass", static_cast<long long>(indices.size() / 3));
  } else {
    indices.assign(m.faces.begin(), m.faces.end());
    std::vector<unsigned> out;
    indices.resize(
        reduce_serial(indices, out, indices.size(), m.positions, target, options.method));
  }
  const size_t n = indices.size();
  S3D_CHECK(n > 0 && n <= target, "simplify: could not reduce the mesh to ", target_faces,
            " faces (", n / 3, " left)");
  m.faces.assign(indices.begin(), indices.end());
  // Collapses can leave flat faces (see the top): flipped where they can be, then the rest
  // dropped with any face of (near) zero area; this also drops the unused vertices.
  remove_unreferenced_vertices(m);
  stats.flat_faces_flipped = flip_flat_faces(m, options.cap_degrees);
  remove_degenerate_faces(m);
  timer.mark("flat and degenerate faces", m.num_faces());
  S3D_CHECK(m.num_faces() > 0, "simplify: only degenerate faces were left at a budget of ",
            target_faces, " faces");
  return stats;
}

}  // namespace s3d::mesh
