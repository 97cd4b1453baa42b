// The planar atlas's packing (atlas_chart.h; planar_atlas.cpp says how the charts are made).
// Charts are placed at one scale (texels per unit length). A chart's geometry plus a margin of
// (padding + 1) / 2 texels around it must not meet another's, so two charts' geometry is at
// least padding + 1 texels apart and bilinear lookups never mix them. Two packers:
// - shelves of bounding boxes, tallest first: quick and loose; its binary search gives the
//   scale the skyline starts from;
// - a skyline of the charts' own column profiles (each column's lowest and highest margin
//   point), with the gaps it leaves below it: each chart, tallest first, upright or turned
//   a quarter turn, goes to a gap that holds its whole profile (the first column from the
//   left that has one, at its lowest such gap), else to the lowest place on the skyline.
//   Ragged charts interlock instead of wasting their boxes' corners,
//   and small charts fill what the large ones left under them (at 1M faces and 4096: 0.58 of
//   the texture covered, against 0.51 without the gaps and 0.43 for xatlas's own packer
//   here). It tries many scales above the shelves' at once (a thread each), the largest
//   first, keeps the largest that fits, and gives up the smaller tries once one has fitted.
#include <omp.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <numeric>
#include <vector>

#include "core/error.h"
#include "mesh/atlas_chart.h"

namespace s3d::mesh::atlas {
namespace {

constexpr int kScaleTries = 16;       // skyline scales tried at once, per round
constexpr int kStepsPerWidth = 16;    // skyline columns tried: one per 1/16 of the chart's width,
constexpr int kMaxPositions = 512;    // and no more than about this many per chart
constexpr int kScaleRounds = 1;       // rounds of kScaleTries (a second: 1% more covered)
// Positions per chart and orientation where the gap search lifts the chart column by column
// (the quick refusals aside) before it gives up on gaps for that orientation; the chart then
// rests on the skyline. skyline_pack() says what it saves and costs.
constexpr int kGapLifts = 128;
constexpr double kMostCovered = 0.75;  // of the texture, by the skyline's packing
// Orientations tried per chart, in quarter turns: upright and a quarter turn. All four covered
// 6% more of a 4096 texture at 1M faces before gaps were anchored on the tallest band, and
// nothing more on the horse at 2048 after, for twice the packing time.
constexpr int kTurns = 2;

double margin_of(int32_t padding) { return 0.5 * (padding + 1); }

int32_t box_side(double length, double scale, int32_t padding) {
  return static_cast<int32_t>(std::ceil(length * scale + 2 * margin_of(padding)));
}

// Charts in `order`, left to right on shelves: false when they do not fit size^2.
bool shelf_pack(const std::vector<Chart>& charts, const std::vector<int32_t>& order,
                double scale, int32_t size, int32_t padding, std::vector<Placement>& out) {
  out.assign(charts.size(), Placement{});
  int64_t x = 0, y = 0, shelf = 0;
  for (int32_t i : order) {
    const int32_t w = box_side(charts[i].w, scale, padding);
    const int32_t h = box_side(charts[i].h, scale, padding);
    if (w > size || h > size) return false;
    if (x + w > size) {
      y += shelf;
      x = 0;
      shelf = 0;
    }
    if (y + h > size) return false;
    out[i] = {double(x), double(y), false};
    x += w;
    shelf = std::max<int64_t>(shelf, h);
  }
  return true;
}

// A chart's footprint at a scale: per texel column of its margin box, the lowest and highest
// texel row its geometry plus margin reaches (from each face's bounding box: faces are a few
// texels across, so the profile is close), and the free runs between (holes: a window in a
// wall, the inside of a bent strip), which take other charts as the skyline's gaps do
// (Skyline::place). lo > hi marks an empty column.
struct Profile {
  int32_t w = 0;
  std::vector<double> lo, hi;
  double top = 0;                // the highest hi
  std::vector<int32_t> tallest;  // the non-empty columns, tallest band first
  // gap_height()'s order of asking, as indices into `tallest`: the anchor first, then the
  // bands that last refused (they are likely to refuse at the next position too).
  mutable std::vector<int32_t> ask;
  // Column j's holes: hole_lo/hole_hi[hole_at[j] .. hole_at[j + 1]), rising, each at least
  // the padding + 1 tall (what two bands must leave between them anyway). Empty when none.
  std::vector<int32_t> hole_at;
  std::vector<double> hole_lo, hole_hi;
};

// A chart vertex's coordinates after `turns` quarter turns, in the turned chart's own box
// (width c.w and height c.h, swapped for odd turns).
std::array<double, 2> turned_xy(const Chart& c, int32_t v, int turns) {
  const double x = c.xy[2 * v], y = c.xy[2 * v + 1];
  switch (turns & 3) {
    case 1: return {c.h - y, x};
    case 2: return {c.w - x, c.h - y};
    case 3: return {y, c.w - x};
    default: return {x, y};
  }
}

// Charts smaller than this many texels on a side get no holes: nothing fits in theirs.
constexpr int32_t kHoleChartSide = 12;

// Per column, the rows that no face's band meets, inside the column's band, as holes of at
// least min_gap rows (whole rows: a band marks every row it touches, so a hole is free).
void find_holes(Profile& p, const std::vector<uint8_t>& used, int32_t rows, double min_gap) {
  p.hole_at.assign(p.w + 1, 0);
  for (int32_t j = 0; j < p.w; ++j) {
    p.hole_at[j] = static_cast<int32_t>(p.hole_lo.size());
    if (!(p.lo[j] <= p.hi[j])) continue;
    const uint8_t* col = used.data() + static_cast<size_t>(j) * rows;
    const int32_t r_end = std::min(rows, static_cast<int32_t>(std::ceil(p.hi[j])));
    for (int32_t r = std::max(0, static_cast<int32_t>(std::floor(p.lo[j]))); r < r_end;) {
      if (col[r]) {
        ++r;
        continue;
      }
      int32_t e = r;
      while (e < r_end && !col[e]) ++e;
      if (e < r_end && e - r >= min_gap) p.hole_lo.push_back(r), p.hole_hi.push_back(e);
      r = e;
    }
  }
  p.hole_at[p.w] = static_cast<int32_t>(p.hole_lo.size());
}

// Face f's footprint in the turned chart's margin box at a scale: the columns j0..j1 its
// bounding box and margin reach (clamped to the box's w columns) and the rows lo..hi there.
struct FaceBand {
  int32_t j0, j1;
  double lo, hi;
};

FaceBand face_band(const Chart& c, size_t f, int turns, double scale, double m, int32_t w) {
  double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
  for (int k = 0; k < 3; ++k) {
    const auto [x, y] = turned_xy(c, c.corners[3 * f + k], turns);
    x0 = std::min(x0, x), x1 = std::max(x1, x), y0 = std::min(y0, y), y1 = std::max(y1, y);
  }
  return {std::max(0, static_cast<int32_t>(std::floor(scale * x0))),
          std::min(w - 1, static_cast<int32_t>(std::ceil(scale * x1 + 2 * m)) - 1), scale * y0,
          scale * y1 + 2 * m};
}

Profile profile_of(const Chart& c, double scale, int32_t padding, int turns) {
  const double m = margin_of(padding);
  Profile p;
  p.w = box_side(turns & 1 ? c.h : c.w, scale, padding);
  p.lo.assign(p.w, INFINITY);
  p.hi.assign(p.w, -INFINITY);
  for (size_t f = 0; f < c.faces.size(); ++f) {
    const FaceBand b = face_band(c, f, turns, scale, m, p.w);
    for (int32_t j = b.j0; j <= b.j1; ++j) {
      p.lo[j] = std::min(p.lo[j], b.lo);
      p.hi[j] = std::max(p.hi[j], b.hi);
    }
  }
  for (int32_t j = 0; j < p.w; ++j)
    if (p.lo[j] <= p.hi[j]) {
      p.top = std::max(p.top, p.hi[j]);
      p.tallest.push_back(j);
    }
  // gap_height() lifts by the tallest bands first: they are the likeliest not to fit a gap.
  std::stable_sort(p.tallest.begin(), p.tallest.end(), [&](int32_t a, int32_t b) {
    return p.hi[a] - p.lo[a] > p.hi[b] - p.lo[b];
  });
  p.ask.resize(p.tallest.size());
  std::iota(p.ask.begin(), p.ask.end(), 0);
  return p;
}

// The holes of the profile that profile_of(c, scale, padding, turns) made, found only for the
// orientation a chart is placed in (half the work of finding them for every one tried): each
// face's band marks the rows it touches in a bitmap of the margin box, as in profile_of.
void add_holes(Profile& p, const Chart& c, double scale, int32_t padding, int turns,
               std::vector<uint8_t>& used) {
  const int32_t rows = box_side(turns & 1 ? c.w : c.h, scale, padding);
  if (p.w < kHoleChartSide || rows < kHoleChartSide) return;
  const double m = margin_of(padding);
  used.assign(static_cast<size_t>(p.w) * rows, 0);
  for (size_t f = 0; f < c.faces.size(); ++f) {
    const FaceBand b = face_band(c, f, turns, scale, m, p.w);
    const int32_t r0 = std::max(0, static_cast<int32_t>(std::floor(b.lo)));
    const int32_t r1 = std::min(rows, static_cast<int32_t>(std::ceil(b.hi)));
    for (int32_t j = b.j0; j <= b.j1 && r1 > r0; ++j)
      std::fill_n(used.data() + static_cast<size_t>(j) * rows + r0, r1 - r0, 1);
  }
  find_holes(p, used, rows, 2 * m);
}

// The packing's state: per texel column, the skyline (the height below which the column is
// spoken for) and the gaps left below it (free runs between a chart's bottom and what was
// under it when it was placed). A chart goes into the gaps where it fits there, onto the
// skyline where it does not; its column profile is what must be free.
class Skyline {
 public:
  // recheck_all: gap_height() asks every column again after each lift (ChartOptions::
  // pack_reference), instead of only those whose last answer no longer holds.
  Skyline(int32_t size, double min_gap, bool recheck_all)
      : size_(size),
        min_gap_(min_gap),
        recheck_all_(recheck_all),
        sky_(size, 0.0),
        tallest_gap_(size, 0.0),
        gap_top_(size, -INFINITY),
        gaps_(size) {}

  // The lowest y at which the profile rests on the skyline at column x; `limit` when it would
  // be no lower than limit (the search's pruning).
  double rest_height(const Profile& p, int32_t x, double limit) const {
    double y = 0;
    for (int32_t j = 0; j < p.w; ++j) {
      if (!(p.lo[j] <= p.hi[j])) continue;
      y = std::max(y, sky_[x + j] - p.lo[j]);
      if (y >= limit) return limit;
    }
    return y;
  }

  // The lowest y below `limit` at which the profile at column x is free in every column (in a
  // gap, or above the skyline) with its tallest band in a gap; or limit. Each column in turn
  // lifts y to the lowest height at or above it where that column is free, until all of them
  // agree on one y: every lift skips all the heights that column refuses at once.
  // `lifts` (when given) counts the positions that got past the quick refusals. A column's
  // answer holds for every y up to the top of the gap it found (or for good, above the
  // skyline): after a lift by another column it is asked again only when y has passed that,
  // which gives the same y as asking every column again (the same atlas, bit for bit), for 12%
  // less packing time on regr01 at 1,000,000 faces / 4096.
  double gap_height(const Profile& p, int32_t x, double limit, int* lifts = nullptr) const {
    // Anchored on the tallest band: the fewest gaps hold it.
    if (p.tallest.empty()) return limit;
    const int32_t j0 = p.tallest[0];
    if (p.hi[j0] - p.lo[j0] > tallest_gap_[x + j0] + kTouch) return limit;
    const size_t n = p.tallest.size();
    const double top = std::min(limit, size_ - p.top);  // y above this: no use, or no room
    if (!could_fit(p, x, j0, top)) return limit;
    if (lifts != nullptr) ++*lifts;
    double y = 0;
    holds_.assign(n, -INFINITY);  // per band: a y up to which its last answer holds
    // After a lift by another band the anchor is asked again first, then the bands in `ask`'s
    // order (the tallest first, until some refuse: ask_sooner()).
    for (size_t i = 0; i < n;) {
      const int32_t k = p.ask[i];
      if (!recheck_all_ && y <= holds_[k]) {
        ++i;
        continue;
      }
      const int32_t j = p.tallest[k];
      const double lifted = lowest_free(x + j, p.lo[j], p.hi[j], y, k == 0, holds_[k]);
      if (lifted > top) {
        ask_sooner(p, i);
        return limit;
      }
      if (lifted > y) {
        y = lifted;
        ask_sooner(p, i);
        i = k == 0 ? 1 : 0;
      } else {
        ++i;
      }
    }
    return y;
  }

  // The band asked at i refused (lifted y, or ended the search): it is asked right after the
  // anchor from now on, at this chart's next positions too, where the same band usually
  // refuses again. The order of asking changes no answer: each lift goes to the lowest height
  // at or above y where that column is free, so every order of asking reaches the same lowest
  // y where all are free, or passes `top` all the same (and pack_reference keeps the fixed
  // order, tallest band first, against which MeshAtlasPlanar.PackingSearchGivesTheReference-
  // Atlas checks the atlas bit for bit). On regr01 at 1,000,000 faces / 4096 it takes the
  // packing from 1.18 to 0.74 s on one thread.
  void ask_sooner(const Profile& p, size_t i) const {
    if (recheck_all_ || i < 2) return;
    std::rotate(p.ask.begin() + 1, p.ask.begin() + static_cast<std::ptrdiff_t>(i),
                p.ask.begin() + static_cast<std::ptrdiff_t>(i) + 1);
  }

  // A quick refusal before any lift: the anchor band ends at most at its column's highest gap
  // top, so y <= y_max; a column none of whose gaps is tall enough for its band must then be
  // above the skyline by y_max. When this says no, the lifting would have ended in the same
  // refusal (each bound is looser than the lifting's own by a kTouch), so the packing is the
  // same bit for bit; it refuses about a quarter of the positions the anchor test lets by.
  bool could_fit(const Profile& p, int32_t x, int32_t j0, double top) const {
    const double y_max = std::min(top, gap_top_[x + j0] - p.hi[j0] + 2 * kTouch);
    if (y_max < 0) return false;
    for (int32_t j = 0; j < p.w; ++j) {
      if (!(p.lo[j] <= p.hi[j])) continue;
      const int32_t c = x + j;
      if (p.hi[j] - p.lo[j] > tallest_gap_[c] + kTouch && sky_[c] - p.lo[j] > y_max) return false;
    }
    return true;
  }

  // The chart's band goes above the skyline or into the gap that holds it, and its holes
  // become gaps of their own.
  void place(const Profile& p, int32_t x, double y) {
    const bool any_holes = !p.hole_at.empty();
    for (int32_t j = 0; j < p.w; ++j) {
      if (!(p.lo[j] <= p.hi[j])) continue;
      const int32_t c = x + j;
      const double a = y + p.lo[j], b = y + p.hi[j];
      const int32_t h0 = any_holes ? p.hole_at[j] : 0, h1 = any_holes ? p.hole_at[j + 1] : 0;
      std::vector<Gap>& gs = gaps_[c];
      if (a >= sky_[c] - kTouch) {  // above the skyline: every gap is below, in order
        if (a - sky_[c] >= min_gap_) add_gap(c, gs.end(), {sky_[c], a});
        for (int32_t h = h0; h < h1; ++h)
          add_gap(c, gs.end(), {y + p.hole_lo[h], y + p.hole_hi[h]});
        sky_[c] = std::max(sky_[c], b);
        continue;
      }
      const auto k = containing(gs, a, b);
      if (k == gs.end()) continue;  // cannot be: gap_height() found the gap
      const Gap g = *k;
      auto at = gs.erase(k);
      std::vector<Gap>& pieces = pieces_;
      pieces.clear();
      if (a - g.lo >= min_gap_) pieces.push_back({g.lo, a});
      for (int32_t h = h0; h < h1; ++h) pieces.push_back({y + p.hole_lo[h], y + p.hole_hi[h]});
      if (g.hi - b >= min_gap_) pieces.push_back({b, g.hi});
      gs.insert(at, pieces.begin(), pieces.end());
      gap_top_[c] = gs.empty() ? -INFINITY : gs.back().hi;
      if (g.hi - g.lo >= tallest_gap_[c] - kTouch) {  // it may have been the tallest
        tallest_gap_[c] = 0;
        for (const Gap& e : gs) tallest_gap_[c] = std::max(tallest_gap_[c], e.hi - e.lo);
      }
    }
  }

 private:
  struct Gap {
    double lo, hi;
  };
  static constexpr double kTouch = 1e-9;  // texels: bands that touch do not overlap

  // A gap of column c inserted at `at` (the caller keeps the gaps in rising order).
  void add_gap(int32_t c, std::vector<Gap>::iterator at, Gap g) {
    const bool last = at == gaps_[c].end();
    gaps_[c].insert(at, g);
    tallest_gap_[c] = std::max(tallest_gap_[c], g.hi - g.lo);
    if (last) gap_top_[c] = g.hi;
  }

  // The gap of a column (disjoint, in rising order) that holds [a, b], or end().
  static std::vector<Gap>::const_iterator containing(const std::vector<Gap>& gs, double a,
                                                     double b) {
    auto k = std::upper_bound(gs.begin(), gs.end(), a + kTouch,
                              [](double v, const Gap& g) { return v < g.lo; });
    if (k == gs.begin()) return gs.end();
    --k;
    return b <= k->hi + kTouch ? k : gs.end();
  }

  // The lowest y' >= y at which column c holds the band [y' + lo, y' + hi]: in one of its gaps,
  // or (unless gap_only) above its skyline; infinity when nothing does. `holds`: a y up to
  // which that answer stays y itself (the found gap's top less the band's; infinity above the
  // skyline): asked again at any y'' in [y', holds], the answer would be y''.
  double lowest_free(int32_t c, double lo, double hi, double y, bool gap_only,
                     double& holds) const {
    holds = INFINITY;
    const double above = gap_only ? INFINITY : std::max(y, sky_[c] - lo);
    if (hi - lo > tallest_gap_[c] + kTouch) return above;
    if (y + hi - kTouch > gap_top_[c]) return above;  // every gap ends too low
    const std::vector<Gap>& gs = gaps_[c];
    // Gaps are disjoint and in rising order: the first whose top is high enough, then the
    // first from there that is tall enough.
    auto g = std::lower_bound(gs.begin(), gs.end(), y + hi - kTouch,
                              [](const Gap& gap, double v) { return gap.hi < v; });
    for (; g != gs.end(); ++g)
      if (g->hi - g->lo + kTouch >= hi - lo) {
        const double in_gap = std::max(y, g->lo - lo);
        // (Not the search's own bound, g->hi - hi + kTouch: a y that far up would be
        // compared against g->hi after rounding; below g->hi - hi it certainly holds.)
        if (in_gap < above) holds = g->hi - hi;
        return std::min(above, in_gap);
      }
    return above;
  }

  int32_t size_;
  double min_gap_;
  bool recheck_all_;
  std::vector<double> sky_;
  std::vector<double> tallest_gap_;  // per column: the tallest of its gaps (a quick refusal)
  std::vector<double> gap_top_;      // per column: the top of its highest gap (-inf: none)
  std::vector<std::vector<Gap>> gaps_;
  mutable std::vector<double> holds_;  // gap_height()'s per-band answers (a scratch array)
  std::vector<Gap> pieces_;            // place()'s scratch array
};

// False when some chart does not fit; also, with `given_up` set, as soon as `fitted` (when
// given) passes `rank`: a try of a larger scale has fitted, and only the largest is kept.
bool skyline_pack(const std::vector<Chart>& charts, const std::vector<int32_t>& order,
                  double scale, int32_t size, int32_t padding, bool reference,
                  std::vector<Placement>& out, const std::atomic<int>* fitted, int rank,
                  bool& given_up) {
  out.assign(charts.size(), Placement{});
  Skyline sky(size, 2 * margin_of(padding), reference);
  std::vector<uint8_t> used;  // add_holes()'s scratch bitmap
  given_up = false;
  for (int32_t i : order) {
    if (fitted != nullptr && fitted->load(std::memory_order_relaxed) > rank) {
      given_up = true;
      return false;
    }
    // A gap first (the lowest), the skyline (the lowest) otherwise.
    double best_gap = INFINITY, best_sky = INFINITY;
    Placement gap_at, sky_at;
    Profile gap_p, sky_p;
    for (int turns = 0; turns < kTurns; ++turns) {
      Profile p = profile_of(charts[i], scale, padding, turns);
      if (p.w > size || p.top > size) return false;
      // Columns in steps of a sixteenth of the chart (and the last column that fits): the
      // search stays near linear in the texture's side per chart (1/8: 3% less of the texture
      // used, 1/32: 2% more for twice the time, on a 250k-face mesh at 1024).
      const int32_t step = std::max({1, p.w / kStepsPerWidth, size / kMaxPositions});
      const int32_t last = size - p.w;
      bool gap_better = false, sky_better = false;
      int lifts = 0;
      for (int32_t x = 0;; x = (x + step > last) ? last : x + step) {
        const double g = lifts < kGapLifts ? sky.gap_height(p, x, best_gap, &lifts) : best_gap;
        if (g < best_gap) best_gap = g, gap_at = {double(x), g, turns}, gap_better = true;
        if (best_gap == INFINITY) {
          const double limit = std::min(best_sky, size - p.top + 1e-9);
          const double y = sky.rest_height(p, x, limit);
          if (y < limit) best_sky = y, sky_at = {double(x), y, turns}, sky_better = true;
        }
        if (x == last) break;
        // First fit for gaps: the first column (left to right) where a gap holds the chart
        // ends this orientation's search, at that column's lowest such gap. Scanning on for
        // a lower gap elsewhere cost 2-3x the packing time and covered no more of the
        // texture (0.3556 vs 0.3558 at 500k faces / 2048, 0.5960 vs 0.5961 at 1M / 4096).
        // After kGapLifts positions that needed lifting, gaps are given up (the skyline's
        // heights, which cost little, are still computed): most of the charts that find no
        // gap are small, and lifting them at every column of the texture was most of the
        // packing of a mesh of many charts (regr01 at 1,000,000 faces / 4096 on two cores,
        // with the folds merged: 5.1 s and 0.507 of the texture used; before both, 28,507
        // charts, unbounded: 11.1 s, 0.510; 64 lifts: 3.4 s, 0.484; 256: 8.0 s, 0.530;
        // spider's and bunny's texture use the same or higher than before).
        if (best_gap < INFINITY) break;
      }
      if (gap_better) gap_p = p;
      if (sky_better) sky_p = std::move(p);
    }
    const bool in_gap = best_gap < INFINITY;
    if (!in_gap && best_sky == INFINITY) return false;
    const Placement& at = in_gap ? gap_at : sky_at;
    Profile& chosen = in_gap ? gap_p : sky_p;
    add_holes(chosen, charts[i], scale, padding, at.turns, used);
    sky.place(chosen, static_cast<int32_t>(at.x), at.y);
    out[i] = at;
  }
  return true;
}

}  // namespace

// The largest common scale at which every chart fits (the skyline's, or the shelves' where the
// skyline does no better), and where each chart goes.
double pack(const std::vector<Chart>& charts, int32_t size, int32_t padding, bool reference,
            std::vector<Placement>& out, int* finished) {
  if (finished != nullptr) *finished = 0;
  std::vector<int32_t> order(charts.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return charts[a].h > charts[b].h; });
  double area = 0, longest = 0;
  for (const Chart& c : charts) area += c.area, longest = std::max(longest, c.w);
  S3D_CHECK(shelf_pack(charts, order, 0.0, size, padding, out), "uv_unwrap: ", charts.size(),
            " charts do not fit a ", size, "^2 texture with ", padding,
            " texels of padding even at the smallest scale");
  // Neither more texels than the texture has, nor a chart longer than its side.
  double hi = longest > 0 ? size / longest : 1.0;
  if (area > 0) hi = std::min(hi, size / std::sqrt(area));
  double lo = 0;
  for (double top = hi; top - lo > 1e-6 * top;) {
    const double mid = 0.5 * (lo + top);
    (shelf_pack(charts, order, mid, size, padding, out) ? lo : top) = mid;
  }
  shelf_pack(charts, order, lo, size, padding, out);
  // kScaleTries scales at once between the shelves' and the most the skyline reaches on
  // real meshes (kMostCovered of the texture: 0.5-0.6 measured), in kScaleRounds rounds,
  // each between the largest scale that fitted and the next.
  hi = std::max(lo, std::min(hi, std::sqrt(kMostCovered) * hi));
  double best = lo;
  std::vector<Placement> best_out = out;
  for (int round = 0; round < kScaleRounds && hi > best * (1 + 1e-3); ++round) {
    std::vector<double> scales(kScaleTries);
    for (int k = 0; k < kScaleTries; ++k)
      scales[k] = best + (hi - best) * double(k + 1) / (kScaleTries + 1);
    std::vector<std::vector<Placement>> tries(kScaleTries);
    std::vector<char> fits(kScaleTries, 0);
    // The largest scale is kept, so a try is given up once a larger one has fitted (not in
    // the reference, which runs every try to its end). The tries start from the largest: those
    // that fail do so early (regr01 at 1,000,000 faces / 4096 on one thread: 0.04-0.37 s against
    // 0.74-0.80 s for one that fits), and what fits first stops the smaller ones. The same
    // scale and placements either way, whatever the number of threads; fewer tries run to the
    // end where there are fewer threads than tries.
    std::atomic<int> fitted{-1}, ended{0};
#pragma omp parallel for schedule(dynamic, 1)
    for (int t = 0; t < kScaleTries; ++t) {
      const int k = kScaleTries - 1 - t;
      bool given_up = false;
      fits[k] = skyline_pack(charts, order, scales[k], size, padding, reference, tries[k],
                             reference ? nullptr : &fitted, k, given_up);
      if (!given_up) ++ended;
      if (!fits[k]) continue;
      int seen = fitted.load();
      while (seen < k && !fitted.compare_exchange_weak(seen, k)) {
      }
    }
    int k_best = -1;
    for (int k = 0; k < kScaleTries; ++k)
      if (fits[k]) k_best = k;
    if (k_best >= 0) {
      best = scales[k_best];
      best_out = std::move(tries[k_best]);
    }
    if (k_best + 1 < kScaleTries) hi = scales[k_best + 1];
    if (finished != nullptr) *finished += ended.load();
  }
  out = std::move(best_out);
  return best;
}

// The UV (in [0, 1]) of each chart vertex: the placement, the margin, the scaled xy.
std::vector<float> chart_uvs(const Chart& c, const Placement& p, double scale, int32_t size,
                             int32_t padding) {
  const double m = margin_of(padding);
  std::vector<float> uv(c.xy.size());
  for (size_t i = 0; i < c.verts.size(); ++i) {
    const auto [x, y] = turned_xy(c, static_cast<int32_t>(i), p.turns);
    uv[2 * i] = static_cast<float>((p.x + m + scale * x) / size);
    uv[2 * i + 1] = static_cast<float>((p.y + m + scale * y) / size);
  }
  return uv;
}

}  // namespace s3d::mesh::atlas
