// The closest-point BVH (bvh.h). Built top-down by binned SAH over face centroids (16 bins per
// axis, leaves of at most 4 faces); queried depth-first, nearer child first, pruning a node when
// the squared distance to its box is not below the best found so far.
//
// The build is parallel, because the export builds trees of 3-6 million faces: one OpenMP task
// tree over ranges of faces, each range handled in one of three ways chosen by its size alone:
//  - at least kWideFaces faces (the top five or six levels of such a mesh): every thread bins
//    and partitions it, in fixed chunks of kChunk faces whose partial bins and bounds merge in
//    chunk order, and the partition is stable;
//  - at least kTaskFaces: one thread splits it, and its two halves become tasks;
//  - fewer: one thread builds its whole subtree into a node vector of its own.
// The vectors are then spliced in where a serial recursion numbers their nodes (depth-first,
// left first), their child indices offset.
// Why the nodes and the order are the same bits for any thread count: a range's regime
// depends on its size only; the chunks and their merge order are fixed; a stable partition has
// one answer, and a serial split is one thread's on a range whose order is already fixed; the
// splice follows the tree. The splits themselves (from bins, which do not depend on the faces'
// order) are the serial build's, so only the order of faces within a leaf differs from it.
// Threads meet only at the ends of a wide range's passes, where idle ones take other tasks, so
// a busy machine slows the build but does not stall it at barriers.
#include "mesh/bvh.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/cuda_util.h"
#include "mesh/bvh_cuda.h"
#include "mesh/closest_point.h"

namespace s3d::mesh {
namespace {

constexpr int kBins = 16;
constexpr int kLeafFaces = 4;
constexpr int kSahDepth = 48;  // then median splits: depth <= 48 + 31 < the query's stack
// Ranges this big are binned and partitioned by every thread at once: the top levels, which
// have fewer ranges than a machine has threads (those of a 16-core machine and more).
constexpr int32_t kWideFaces = 1 << 16;
// Ranges below this are built whole by one thread: a task per node would cost more than it
// balances, and a mesh of millions still makes a thousand such jobs.
constexpr int32_t kTaskFaces = 1 << 12;
// The faces one thread takes at a time in a wide range. Fixed (not a share per thread), so
// that the partial results are the same, merged in the same order, whatever the thread count.
constexpr int32_t kChunk = 1 << 12;

// No initializers: the per-face array of boxes is written by a parallel loop, and filling it
// first would be a serial part of the build. Box::empty() starts a union.
struct Box {
  float lo[3], hi[3];
  static Box empty() { return {{FLT_MAX, FLT_MAX, FLT_MAX}, {-FLT_MAX, -FLT_MAX, -FLT_MAX}}; }
  void grow(const float p[3]) {
    for (int k = 0; k < 3; ++k) {
      lo[k] = std::min(lo[k], p[k]);
      hi[k] = std::max(hi[k], p[k]);
    }
  }
  void grow(const Box& b) {
    for (int k = 0; k < 3; ++k) {
      lo[k] = std::min(lo[k], b.lo[k]);
      hi[k] = std::max(hi[k], b.hi[k]);
    }
  }
  float area() const {
    if (lo[0] > hi[0]) return 0;
    const float dx = hi[0] - lo[0], dy = hi[1] - lo[1], dz = hi[2] - lo[2];
    return dx * dy + dy * dz + dz * dx;
  }
};

// A face's centroid is its box's centre, recomputed where needed rather than stored: the build
// is bound by fetching faces in `order`, and one array of boxes is one fetch per face, not two.
float centroid(const Box& b, int k) { return 0.5f * (b.lo[k] + b.hi[k]); }

// What a node needs of its faces before it splits: their boxes' union (the node's box) and
// their centroids' (where its bins go). Min and max only, so it does not depend on the order
// the faces come in.
struct Bounds {
  Box box = Box::empty(), cbox = Box::empty();
  void add(const Box& b) {
    box.grow(b);
    const float c[3] = {centroid(b, 0), centroid(b, 1), centroid(b, 2)};
    cbox.grow(c);
  }
  void grow(const Bounds& o) {
    box.grow(o.box);
    cbox.grow(o.cbox);
  }
};

// The faces' boxes and the permutation of face indices that the build sorts into leaves.
struct Faces {
  const Box* boxes;
  int32_t* order;
};

Bounds bounds_of(const Faces& fs, int32_t begin, int32_t end) {
  Bounds b;
  for (int32_t i = begin; i < end; ++i) b.add(fs.boxes[fs.order[i]]);
  return b;
}

// Which bin a centroid falls in along each axis of a node. An axis is binned only when the
// centroids spread along it and the node is shallower than kSahDepth.
struct Binning {
  float lo[3], extent[3];
  bool on[3];
  bool any = false;
  Binning(const Box& cb, int depth) {
    for (int k = 0; k < 3; ++k) {
      lo[k] = cb.lo[k];
      extent[k] = cb.hi[k] - cb.lo[k];
      on[k] = depth < kSahDepth && extent[k] > 0;
      any = any || on[k];
    }
  }
  int bin(float c, int k) const {
    const int b = static_cast<int>(kBins * (c - lo[k]) / extent[k]);
    return std::clamp(b, 0, kBins - 1);
  }
};

// The boxes and face counts of each axis's bins; like Bounds, independent of the faces' order.
struct Bins {
  Box box[3][kBins];
  int32_t count[3][kBins] = {};
  Bins() { std::fill(&box[0][0], &box[0][0] + 3 * kBins, Box::empty()); }

  // All three axes in one pass: one fetch of each face's box instead of three.
  void add(const Binning& g, const Faces& fs, int32_t begin, int32_t end) {
    if (!g.any) return;
    for (int32_t i = begin; i < end; ++i) {
      const Box& b = fs.boxes[fs.order[i]];
      for (int k = 0; k < 3; ++k) {
        if (!g.on[k]) continue;
        const int j = g.bin(centroid(b, k), k);
        box[k][j].grow(b);
        ++count[k][j];
      }
    }
  }
  void merge(const Bins& o) {
    for (int k = 0; k < 3; ++k)
      for (int j = 0; j < kBins; ++j) {
        box[k][j].grow(o.box[k][j]);
        count[k][j] += o.count[k][j];
      }
  }
};

// A split of a node's faces: bin b >= 0 sends the centroids in bins <= b along `axis` left;
// bin -1 is a median split along `axis`; axis -1 is no split (a leaf).
struct Split {
  int axis = -1;
  int bin = -1;
  bool left(const Binning& g, const Box& b) const {
    return g.bin(centroid(b, axis), axis) <= bin;
  }
};

// The cheapest binned SAH split (the first found on ties: x, y, z, lower bins first), or a
// median split along the longest centroid axis when no binned split leaves both sides
// non-empty, or none when all centroids coincide. The median fallback, and the median splits
// below kSahDepth, bound the depth at kSahDepth + log2(F) whatever the geometry (the query's
// stack is fixed).
Split choose_split(const Binning& g, const Bins& bins, const Box& cb) {
  float best = FLT_MAX;
  Split s;
  for (int k = 0; k < 3; ++k) {
    if (!g.on[k]) continue;
    float right_area[kBins];
    int32_t right_count[kBins];
    Box acc = Box::empty();
    int32_t n = 0;
    for (int b = kBins - 1; b > 0; --b) {
      acc.grow(bins.box[k][b]);
      n += bins.count[k][b];
      right_area[b] = acc.area();
      right_count[b] = n;
    }
    Box lacc = Box::empty();
    int32_t ln = 0;
    for (int b = 0; b < kBins - 1; ++b) {
      lacc.grow(bins.box[k][b]);
      ln += bins.count[k][b];
      if (ln == 0 || right_count[b + 1] == 0) continue;
      const float cost = lacc.area() * ln + right_area[b + 1] * right_count[b + 1];
      if (cost < best) {
        best = cost;
        s = {k, b};
      }
    }
  }
  if (s.axis >= 0) return s;
  int k = 0;
  for (int j = 1; j < 3; ++j)
    if (cb.hi[j] - cb.lo[j] > cb.hi[k] - cb.lo[k]) k = j;
  if (cb.hi[k] - cb.lo[k] > 0) s.axis = k;
  return s;
}

// Puts the lower half of order[first, first + count) by centroid along `axis` first (ties by
// face index, so which faces go in each half has one answer); returns where the upper starts.
int32_t median_split(const Faces& fs, int32_t first, int32_t count, int axis) {
  const int32_t mid = first + count / 2;
  std::nth_element(fs.order + first, fs.order + mid, fs.order + first + count,
                   [&](int32_t a, int32_t b) {
                     const float ca = centroid(fs.boxes[a], axis);
                     const float cb = centroid(fs.boxes[b], axis);
                     return ca < cb || (ca == cb && a < b);
                   });
  return mid;
}

// Partitions order[first, first + count) in place by a binned split, one thread, growing each
// side's bounds on the way so that the children need not fetch their faces again for them.
// Returns where the right side starts.
int32_t partition_serial(const Faces& fs, int32_t first, int32_t count, const Binning& g,
                         const Split& s, Bounds& lb, Bounds& rb) {
  int32_t* i = fs.order + first;
  int32_t* j = i + count;
  for (;;) {
    while (i < j && s.left(g, fs.boxes[*i])) lb.add(fs.boxes[*i++]);
    while (i < j && !s.left(g, fs.boxes[j[-1]])) rb.add(fs.boxes[*--j]);
    if (i == j) break;
    // *i goes right and j[-1] left: swap them.
    rb.add(fs.boxes[*i]);
    lb.add(fs.boxes[j[-1]]);
    std::swap(*i++, *--j);
  }
  return static_cast<int32_t>(i - fs.order);
}

// How a node splits its faces, one thread: the split and where the right side starts (-1: a
// leaf), and the two sides' bounds.
struct Parted {
  int32_t split = -1;
  Bounds left, right;
};

Parted split_serial(const Faces& fs, int32_t first, int32_t count, int depth,
                    const Bounds& bounds) {
  Parted p;
  if (count <= kLeafFaces) return p;
  const Binning g(bounds.cbox, depth);
  Bins bins;
  bins.add(g, fs, first, first + count);
  const Split s = choose_split(g, bins, bounds.cbox);
  if (s.axis < 0) return p;
  if (s.bin >= 0) {
    p.split = partition_serial(fs, first, count, g, s, p.left, p.right);
  } else {
    p.split = median_split(fs, first, count, s.axis);
    p.left = bounds_of(fs, first, p.split);
    p.right = bounds_of(fs, p.split, first + count);
  }
  return p;
}

Bvh::Node make_node(const Box& box) {
  Bvh::Node n;
  std::memcpy(n.lo, box.lo, sizeof box.lo);
  std::memcpy(n.hi, box.hi, sizeof box.hi);
  return n;
}

// Builds the subtree over order[first, first + count) into `nodes`, depth-first, left first,
// child indices counted from the vector's start; returns the subtree root's index.
int32_t build_serial(const Faces& fs, int32_t first, int32_t count, int depth,
                     const Bounds& bounds, std::vector<Bvh::Node>& nodes) {
  const auto index = static_cast<int32_t>(nodes.size());
  nodes.push_back(make_node(bounds.box));
  const Parted p = split_serial(fs, first, count, depth, bounds);
  if (p.split < 0) {
    nodes[index].first = first;
    nodes[index].count = count;
    return index;
  }
  const int32_t left = build_serial(fs, first, p.split - first, depth + 1, p.left, nodes);
  const int32_t right =
      build_serial(fs, p.split, first + count - p.split, depth + 1, p.right, nodes);
  nodes[index].left = left;
  nodes[index].right = right;
  return index;
}

int32_t num_chunks(int32_t count) { return (count + kChunk - 1) / kChunk; }

// The whole build (see the top of the file): the task tree, then the splice.
class ParallelBuild {
 public:
  ParallelBuild(const Box* boxes, int32_t* order, int32_t faces)
      : fs_{boxes, order}, faces_(faces) {}
  std::vector<Bvh::Node> run();

 private:
  // A range of at least kTaskFaces faces (a node whose children are tasks, each child's
  // subtree is its own), or a smaller one built whole into `job`.
  struct Top {
    Bvh::Node node;
    std::unique_ptr<Top> left, right;
    bool is_job = false;
    std::vector<Bvh::Node> job;
  };

  void build(Top& t, int32_t first, int32_t count, int depth, const Bounds& bounds);
  Bounds bounds_wide(int32_t first, int32_t count) const;
  Parted split_wide(int32_t first, int32_t count, int depth, const Bounds& bounds);
  int32_t partition_wide(int32_t first, int32_t count, const Binning& g, const Split& s,
                         Bounds& lb, Bounds& rb);
  struct Placed {
    const Top* job;
    int32_t at;  // the index of the job's root in the whole tree
  };
  int64_t place(const Top& t, int64_t at, std::vector<Placed>& jobs, Bvh::Node* out) const;

  Faces fs_;
  int32_t faces_;
  Top root_;
  // partition_wide's copy of `order` and side of each position, not value-initialized (each
  // partition writes before it reads, in parallel).
  std::unique_ptr<int32_t[]> moved_;
  std::unique_ptr<uint8_t[]> goes_left_;
};

std::vector<Bvh::Node> ParallelBuild::run() {
  std::vector<Bvh::Node> nodes;
  if (faces_ < kTaskFaces) {  // no threads for a small tree: the same nodes as below
    nodes.reserve(2 * static_cast<size_t>(faces_) / kLeafFaces + 1);
    build_serial(fs_, 0, faces_, 0, bounds_of(fs_, 0, faces_), nodes);
    return nodes;
  }
  if (faces_ >= kWideFaces) {
    moved_ = std::make_unique_for_overwrite<int32_t[]>(faces_);
    goes_left_ = std::make_unique_for_overwrite<uint8_t[]>(faces_);
  }
#pragma omp parallel
#pragma omp single
  build(root_, 0, faces_, 0, faces_ >= kWideFaces ? bounds_wide(0, faces_)
                                                  : bounds_of(fs_, 0, faces_));
  // The tree's size first, then every split node in place and every job's vector copied in.
  std::vector<Placed> jobs;
  nodes.resize(place(root_, 0, jobs, nullptr));
  jobs.clear();
  place(root_, 0, jobs, nodes.data());
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t j = 0; j < static_cast<int64_t>(jobs.size()); ++j) {
    const int32_t offset = jobs[j].at;
    Bvh::Node* out = nodes.data() + offset;
    for (const Bvh::Node& n : jobs[j].job->job) {
      *out = n;
      if (n.left >= 0) {
        out->left += offset;
        out->right += offset;
      }
      ++out;
    }
  }
  return nodes;
}

// Builds the subtree of order[first, first + count) into `t`, in tasks where it is big enough.
void ParallelBuild::build(Top& t, int32_t first, int32_t count, int depth,
                          const Bounds& bounds) {
  if (count < kTaskFaces) {
    t.is_job = true;
    t.job.reserve(2 * static_cast<size_t>(count) / kLeafFaces + 1);
    build_serial(fs_, first, count, depth, bounds, t.job);
    return;
  }
  t.node = make_node(bounds.box);
  const Parted p = count >= kWideFaces ? split_wide(first, count, depth, bounds)
                                       : split_serial(fs_, first, count, depth, bounds);
  if (p.split < 0) {  // all centroids in one point
    t.node.first = first;
    t.node.count = count;
    return;
  }
  t.left = std::make_unique<Top>();
  t.right = std::make_unique<Top>();
  Top* l = t.left.get();
  Top* r = t.right.get();
  const int32_t split = p.split, end = first + count;
  const Bounds lb = p.left, rb = p.right;
  // Children write only their own Top and their own range of `order`; the end of the
  // parallel region waits for them all.
#pragma omp task firstprivate(l, first, split, depth, lb)
  build(*l, first, split - first, depth + 1, lb);
#pragma omp task firstprivate(r, split, end, depth, rb)
  build(*r, split, end - split, depth + 1, rb);
}

Bounds ParallelBuild::bounds_wide(int32_t first, int32_t count) const {
  const int32_t chunks = num_chunks(count);
  std::vector<Bounds> part(chunks);
#pragma omp taskloop grainsize(1) default(shared)
  for (int32_t c = 0; c < chunks; ++c) {
    const int32_t begin = first + c * kChunk;
    part[c] = bounds_of(fs_, begin, std::min(begin + kChunk, first + count));
  }
  Bounds all;
  for (const Bounds& b : part) all.grow(b);
  return all;
}

// split_serial with the binning and the partition spread over chunks.
Parted ParallelBuild::split_wide(int32_t first, int32_t count, int depth,
                                 const Bounds& bounds) {
  const Binning g(bounds.cbox, depth);
  const int32_t chunks = num_chunks(count);
  std::vector<Bins> part(g.any ? chunks : 0);
#pragma omp taskloop grainsize(1) default(shared)
  for (int32_t c = 0; c < static_cast<int32_t>(part.size()); ++c) {
    const int32_t begin = first + c * kChunk;
    part[c].add(g, fs_, begin, std::min(begin + kChunk, first + count));
  }
  Bins bins;
  for (const Bins& b : part) bins.merge(b);
  const Split s = choose_split(g, bins, bounds.cbox);
  Parted p;
  if (s.axis < 0) return p;
  if (s.bin >= 0) {
    p.split = partition_wide(first, count, g, s, p.left, p.right);
  } else {  // rare at this size (below kSahDepth only): the serial nth_element will do
    p.split = median_split(fs_, first, count, s.axis);
    p.left = bounds_wide(first, p.split - first);
    p.right = bounds_wide(p.split, first + count - p.split);
  }
  return p;
}

// A stable partition of order[first, first + count) by the split, whose result has one
// answer however the chunks are shared out: each chunk marks and counts its left faces (and
// grows each side's bounds), a prefix sum over the chunks says where each chunk's two sides
// go, and the chunks scatter into `moved_`, copied back. Returns where the right side starts.
int32_t ParallelBuild::partition_wide(int32_t first, int32_t count, const Binning& g,
                                      const Split& s, Bounds& lb, Bounds& rb) {
  const int32_t chunks = num_chunks(count), end = first + count;
  std::vector<int32_t> lefts(chunks);
  std::vector<Bounds> part(2 * static_cast<size_t>(chunks));
#pragma omp taskloop grainsize(1) default(shared)
  for (int32_t c = 0; c < chunks; ++c) {
    int32_t n = 0;
    for (int32_t i = first + c * kChunk; i < std::min(first + (c + 1) * kChunk, end); ++i) {
      const Box& b = fs_.boxes[fs_.order[i]];
      const bool left = s.left(g, b);
      goes_left_[i] = left;
      n += left;
      part[2 * c + !left].add(b);
    }
    lefts[c] = n;
  }
  int32_t split = first;
  for (int32_t c = 0; c < chunks; ++c) {
    split += lefts[c];
    lb.grow(part[2 * c]);
    rb.grow(part[2 * c + 1]);
  }
  std::vector<int32_t> left_at(chunks), right_at(chunks);
  for (int32_t c = 0, l = first, r = split; c < chunks; ++c) {
    left_at[c] = l;
    right_at[c] = r;
    l += lefts[c];
    r += std::min(kChunk, end - (first + c * kChunk)) - lefts[c];
  }
#pragma omp taskloop grainsize(1) default(shared)
  for (int32_t c = 0; c < chunks; ++c) {
    int32_t l = left_at[c], r = right_at[c];
    for (int32_t i = first + c * kChunk; i < std::min(first + (c + 1) * kChunk, end); ++i)
      moved_[goes_left_[i] ? l++ : r++] = fs_.order[i];
  }
  // Only now, every chunk scattered: a chunk's new range may hold another chunk's old faces.
#pragma omp taskloop grainsize(1) default(shared)
  for (int32_t c = 0; c < chunks; ++c) {
    const int32_t begin = first + c * kChunk;
    std::copy(moved_.get() + begin, moved_.get() + std::min(begin + kChunk, end),
              fs_.order + begin);
  }
  return split;
}

// Lays the tree out depth-first from `t`, whose node lands at index `at`: lists each job with
// the index its vector lands at and, when `out` is given, writes each split node there. Returns
// the index after t's subtree.
int64_t ParallelBuild::place(const Top& t, int64_t at, std::vector<Placed>& jobs,
                             Bvh::Node* out) const {
  if (t.is_job) {
    jobs.push_back({&t, static_cast<int32_t>(at)});
    return at + static_cast<int64_t>(t.job.size());
  }
  if (!t.left) {
    if (out) out[at] = t.node;
    return at + 1;
  }
  const int64_t right = place(*t.left, at + 1, jobs, out);
  const int64_t end = place(*t.right, right, jobs, out);
  if (out) {
    out[at] = t.node;
    out[at].left = static_cast<int32_t>(at + 1);
    out[at].right = static_cast<int32_t>(right);
  }
  return end;
}

}  // namespace

float closest_point_on_triangle(const Vec3& p, const Vec3& a, const Vec3& b, const Vec3& c,
                                float uvw[3]) {
  return closest_on_triangle(p.data(), a.data(), b.data(), c.data(), uvw);
}

Bvh::Bvh(const TriMesh& mesh, BvhBuild build) : mesh_(mesh) {
  check_mesh(mesh_, "BVH mesh");
  const int64_t F = mesh_.num_faces();
  S3D_CHECK(F < std::numeric_limits<int32_t>::max() / 2, "BVH mesh: ", F,
            " faces is more than a BVH of 32-bit indices holds");
  if (build == BvhBuild::device) {
    S3D_CHECK(cuda_available(), "BVH: no usable CUDA device");
    device_ = std::make_shared<const DeviceBvh>(mesh_);
    return;
  }
  build_host_tree();
}

void Bvh::build_host_tree() {
  if (has_host_tree()) return;
  const int64_t F = mesh_.num_faces();
  const auto boxes = std::make_unique_for_overwrite<Box[]>(F);  // written by the loop below
  order_.resize(F);
#pragma omp parallel for schedule(static)
  for (int64_t f = 0; f < F; ++f) {
    Box b = Box::empty();
    for (int k = 0; k < 3; ++k) b.grow(&mesh_.positions[3 * mesh_.faces[3 * f + k]]);
    boxes[f] = b;
    order_[f] = static_cast<int32_t>(f);
  }
  nodes_ = ParallelBuild(boxes.get(), order_.data(), static_cast<int32_t>(F)).run();
}

void Bvh::check_host_tree() const {
  S3D_CHECK(has_host_tree(), "BVH: built on the device; build_host_tree() before a CPU query");
}

ClosestHit Bvh::closest(const Vec3& p) const {
  check_host_tree();
  ClosestHit best;
  float best_d2 = FLT_MAX;
  int32_t stack[128];
  int top = 0;
  stack[top++] = 0;
  const float reach = prune_reach(p.data());
  while (top > 0) {
    const Node& n = nodes_[stack[--top]];
    if (out_of_reach(box_distance2(n.lo, n.hi, p.data()), best_d2, reach)) continue;
    if (n.left < 0) {
      for (int32_t i = n.first; i < n.first + n.count; ++i) {
        const int32_t f = order_[i];
        float uvw[3];
        const float d2 = closest_point_on_triangle(p, mesh_.vertex(mesh_.faces[3 * f]),
                                                   mesh_.vertex(mesh_.faces[3 * f + 1]),
                                                   mesh_.vertex(mesh_.faces[3 * f + 2]), uvw);
        // Ties go to the lower face index: the answer does not depend on the traversal.
        if (d2 < best_d2 || (d2 == best_d2 && f < best.face)) {
          best_d2 = d2;
          best.face = f;
          std::memcpy(best.uvw, uvw, sizeof uvw);
        }
      }
      continue;
    }
    const Node& l = nodes_[n.left];
    const Node& r = nodes_[n.right];
    const float dl = box_distance2(l.lo, l.hi, p.data());
    const float dr = box_distance2(r.lo, r.hi, p.data());
    // Push the farther child first so the nearer one is searched first. The stack holds at
    // most one entry per level plus one, and the build bounds the depth (kSahDepth).
    if (dl <= dr) {
      if (!out_of_reach(dr, best_d2, reach)) stack[top++] = n.right;
      if (!out_of_reach(dl, best_d2, reach)) stack[top++] = n.left;
    } else {
      if (!out_of_reach(dl, best_d2, reach)) stack[top++] = n.left;
      if (!out_of_reach(dr, best_d2, reach)) stack[top++] = n.right;
    }
  }
  best.distance = std::sqrt(best_d2);
  return best;
}

std::vector<float> Bvh::leaf_corners() const {
  const int64_t F = static_cast<int64_t>(order_.size());
  std::vector<float> corners(9 * F);
#pragma omp parallel for schedule(static) if (F >= (int64_t{1} << 16))
  for (int64_t s = 0; s < F; ++s)
    for (int k = 0; k < 3; ++k)
      std::memcpy(&corners[9 * s + 3 * k], &mesh_.positions[3 * int64_t(mesh_.faces[3 * order_[s] + k])],
                  3 * sizeof(float));
  return corners;
}

void Bvh::use_device() {
  if (device_) return;
  S3D_CHECK(cuda_available(), "BVH: no usable CUDA device");
  device_ = std::make_shared<const DeviceBvh>(*this);
}

void Bvh::closest_many(const float* points, int64_t n, ClosestHit* out) const {
  if (device_ && n > 0) {
    device_->closest_many_host(points, n, out);
    return;
  }
  if (n > 0) check_host_tree();  // here: an exception must not leave the parallel loop
#pragma omp parallel for schedule(dynamic, 1024)
  for (int64_t i = 0; i < n; ++i) {
    out[i] = closest({points[3 * i], points[3 * i + 1], points[3 * i + 2]});
  }
}

}  // namespace s3d::mesh
