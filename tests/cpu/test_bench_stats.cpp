// Benchmark statistics on hand-computed inputs: the article's equal-weight reduction and
// geometric-mean speedup, leave-one-out signs, the agreement rule, and a cell's derived
// figures.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "bench/stats.h"
#include "io_test_util.h"

namespace s3d::bench {
namespace {

TEST(BenchStats, SpreadOfOddAndEvenCounts) {
  Spread s = spread({3.0, 1.0, 2.0});
  EXPECT_EQ(s.median, 2.0);
  EXPECT_EQ(s.min, 1.0);
  EXPECT_EQ(s.max, 3.0);
  EXPECT_EQ(s.n, 3);
  s = spread({4.0, 1.0, 3.0, 2.0});  // even: mean of the two middle values
  EXPECT_EQ(s.median, 2.5);
  EXPECT_EQ(s.min, 1.0);
  EXPECT_EQ(s.max, 4.0);
  EXPECT_EQ(s.n, 4);
  s = spread({7.0});
  EXPECT_EQ(s.median, 7.0);
  EXPECT_EQ(s.min, 7.0);
  EXPECT_EQ(s.max, 7.0);
}

TEST(BenchStats, SpreadRejectsEmptyAndNonFinite) {
  EXPECT_ERROR(spread({}), "no values");
  EXPECT_ERROR(spread({1.0, std::nan("")}), "value 1 is not finite");
  EXPECT_ERROR(spread({std::numeric_limits<double>::infinity()}), "not finite");
}

TEST(BenchStats, MacroReductionWeighsAssetsEqually) {
  const std::vector<double> ref = {100, 200}, path = {50, 150};
  const auto r = per_asset_reductions(ref, path);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_DOUBLE_EQ(r[0], 0.5);
  EXPECT_DOUBLE_EQ(r[1], 0.25);
  EXPECT_DOUBLE_EQ(macro_reduction(ref, path), 0.375);
  // Not the reduction of summed time, 1 - 200/300.
  EXPECT_GT(std::fabs(macro_reduction(ref, path) - (1.0 - 200.0 / 300.0)), 0.04);
  EXPECT_DOUBLE_EQ(macro_reduction(ref, ref), 0.0);
  // Slower paths give negative reductions.
  EXPECT_DOUBLE_EQ(macro_reduction({1, 1}, {2, 3}), -1.5);
}

TEST(BenchStats, GeomeanSpeedupOfPerAssetRatios) {
  EXPECT_DOUBLE_EQ(geomean_speedup({100, 200}, {50, 150}), std::sqrt(2.0 * 4.0 / 3.0));
  EXPECT_DOUBLE_EQ(geomean_speedup({4, 9}, {4, 9}), 1.0);
  // Speedups of 4x and 1/4x cancel out, unlike their arithmetic mean.
  EXPECT_NEAR(geomean_speedup({4, 1}, {1, 4}), 1.0, 1e-15);
  EXPECT_NEAR(geomean_speedup({2, 3, 5}, {1, 1, 1}), std::cbrt(30.0), 1e-12);
}

TEST(BenchStats, ComparisonsRejectBadInputs) {
  EXPECT_ERROR(macro_reduction({}, {}), "no assets");
  EXPECT_ERROR(geomean_speedup({}, {}), "no assets");
  EXPECT_ERROR(macro_reduction({1, 2}, {1}), "2 reference times but 1 times");
  EXPECT_ERROR(geomean_speedup({1}, {1, 2}), "1 reference times but 2 times");
  EXPECT_ERROR(macro_reduction({1, 0}, {1, 1}),
               "reference time of asset 1 must be positive, found 0");
  EXPECT_ERROR(geomean_speedup({1, 1}, {-2, 1}), "compared time of asset 0", "found -2");
  EXPECT_ERROR(macro_reduction({std::nan("")}, {1}), "reference time of asset 0");
  EXPECT_ERROR(leave_one_out_row("f", 1, {1, 2}, {1, 2}, {10}), "leave-one-out f",
               "1 token counts");
  EXPECT_ERROR(leave_one_out_row("f", 1, {}, {}, {}), "no assets");
}

TEST(BenchStats, LeaveOneOutSignsAndLargestAsset) {
  // Deltas 100, -100, 400 ms; relative +10%, -5%, +10%. The largest asset is the second.
  LooRow r =
      leave_one_out_row("qk_rmsnorm_rope", 60, {1.0, 2.0, 4.0}, {1.1, 1.9, 4.4}, {100, 300, 200});
  EXPECT_EQ(r.flag, "qk_rmsnorm_rope");
  EXPECT_EQ(r.calls_per_iteration, 60);
  EXPECT_NEAR(r.avg_delta_ms, 400.0 / 3.0, 1e-9);
  EXPECT_NEAR(r.avg_delta_pct, 5.0, 1e-9);
  EXPECT_NEAR(r.largest_delta_ms, -100.0, 1e-9);
  EXPECT_NEAR(r.largest_delta_pct, -5.0, 1e-9);

  // Disabling a flag that made things faster: positive (slower without it).
  EXPECT_GT(leave_one_out_row("f", 1, {1.0}, {1.5}, {10}).avg_delta_ms, 0);
  // Disabling a flag that made things slower: negative.
  EXPECT_LT(leave_one_out_row("f", 1, {1.0}, {0.5}, {10}).avg_delta_pct, 0);
  // Equal token counts: the first of them is the largest.
  r = leave_one_out_row("f", -1, {1.0, 1.0}, {1.2, 1.4}, {5, 5});
  EXPECT_NEAR(r.largest_delta_ms, 200.0, 1e-9);
  EXPECT_EQ(r.calls_per_iteration, -1);
}

TEST(BenchStats, AgreeWithinSpreadBothBranches) {
  auto s = [](double median, double lo, double hi) { return Spread{median, lo, hi, 3}; };
  // Overlapping ranges, and ranges that touch.
  EXPECT_TRUE(agree_within_spread(s(2, 1, 3), s(3, 2.5, 4)));
  EXPECT_TRUE(agree_within_spread(s(1.5, 1, 2), s(2.5, 2, 3)));
  // Disjoint ranges, but the medians are closer than the wider range (10).
  EXPECT_TRUE(agree_within_spread(s(9, 0, 10), s(11, 11, 12)));
  EXPECT_TRUE(agree_within_spread(s(11, 11, 12), s(9, 0, 10)));
  // Disjoint, medians 1.0 apart, ranges 0.1 wide.
  EXPECT_FALSE(agree_within_spread(s(1.05, 1.0, 1.1), s(2.05, 2.0, 2.1)));
  EXPECT_FALSE(agree_within_spread(s(2.05, 2.0, 2.1), s(1.05, 1.0, 1.1)));
  // Disjoint and the median gap equals the wider range: "less than" fails.
  EXPECT_FALSE(agree_within_spread(s(0.5, 0, 1), s(1.5, 1.25, 1.75)));
}

Cell timed_cell(std::vector<double> seconds) {
  Cell c;
  c.path = "beyond";
  c.asset = "bunny";
  c.loop_seconds = std::move(seconds);
  return c;
}

TEST(BenchStats, IdealTimeAndWallRatio) {
  Cell c = timed_cell({3, 5, 4});
  c.attention_flops = 600e12;
  c.gemm_flops = 1500e12;
  const Peaks p{600, 750, "", ""};
  ASSERT_TRUE(ideal_seconds(c, p).has_value());
  EXPECT_DOUBLE_EQ(*ideal_seconds(c, p), 1.0 + 2.0);
  EXPECT_DOUBLE_EQ(*wall_over_ideal(c, p), 4.0 / 3.0);
  // Any missing peak or FLOP count: no ideal, no ratio.
  EXPECT_FALSE(ideal_seconds(c, Peaks{0, 750, "", ""}).has_value());
  EXPECT_FALSE(ideal_seconds(c, Peaks{600, 0, "", ""}).has_value());
  Cell no_flops = timed_cell({1});
  EXPECT_FALSE(ideal_seconds(no_flops, p).has_value());
  EXPECT_FALSE(wall_over_ideal(no_flops, p).has_value());
  c.loop_seconds.clear();
  EXPECT_TRUE(ideal_seconds(c, p).has_value());
  EXPECT_FALSE(wall_over_ideal(c, p).has_value());
}

TEST(BenchStats, OtherTimeIsClampedAtZero) {
  Cell c = timed_cell({4, 4, 5});
  c.attention_seconds = 1.5;
  c.gemm_seconds = 1.0;
  EXPECT_DOUBLE_EQ(*other_seconds(c), 1.5);
  c.attention_seconds = 3.0;  // the instrumented loop ran slower than the median
  c.gemm_seconds = 2.0;
  EXPECT_EQ(*other_seconds(c), 0.0);
  c.gemm_seconds = 0;  // not timed
  EXPECT_FALSE(other_seconds(c).has_value());
  Cell untimed = timed_cell({});
  untimed.attention_seconds = untimed.gemm_seconds = 1;
  EXPECT_FALSE(other_seconds(untimed).has_value());
  EXPECT_FALSE(wall_spread(untimed).has_value());
}

TEST(BenchStats, BadRepeatNamesTheCell) {
  EXPECT_ERROR(wall_spread(timed_cell({1.0, -0.5})), "cell (beyond, bunny)", "repeat 1", "-0.5");
  EXPECT_ERROR(wall_spread(timed_cell({0.0})), "cell (beyond, bunny)", "repeat 0");
}

}  // namespace
}  // namespace s3d::bench
