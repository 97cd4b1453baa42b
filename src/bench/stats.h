// The statistics behind the benchmark figures, as the optimization article reports them
// (sections 4.3 and 6.1): per-asset relative reductions averaged with equal weight, the
// geometric mean of per-asset speedups, and leave-one-out rows. Pure CPU code.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "bench/result.h"

namespace s3d::bench {

// The repeats of one measurement. Median of an even count = mean of the two middle values.
struct Spread {
  double median = 0, min = 0, max = 0;
  int n = 0;
};
// Throws on an empty input or a non-finite value.
Spread spread(const std::vector<double>& values);

// Inputs below are per-asset median seconds in the same asset order. Each throws when the
// sizes differ, an input is empty, or a time is not finite and positive.
//
// r_i = 1 - t_path_i / t_ref_i, one per asset.
std::vector<double> per_asset_reductions(const std::vector<double>& ref,
                                         const std::vector<double>& path);
// Mean of r_i: every asset weighs the same, however long it runs (the article's
// "equal-weight latency reduction"), so it is not 1 - sum(t_path) / sum(t_ref).
double macro_reduction(const std::vector<double>& ref, const std::vector<double>& path);
// exp(mean(ln(t_ref_i / t_path_i))).
double geomean_speedup(const std::vector<double>& ref, const std::vector<double>& path);

// One row of the leave-one-out table. Positive = slower with the flag disabled.
struct LooRow {
  std::string flag;
  int64_t calls_per_iteration = -1;  // -1 = not given
  double avg_delta_ms = 0;           // mean over assets of t_off - t_ref
  double avg_delta_pct = 0;          // mean over assets of (t_off - t_ref) / t_ref, in percent
  double largest_delta_ms = 0;       // the same for the asset with the most tokens alone
  double largest_delta_pct = 0;
};
// `ref` = all flags on, `off` = `flag` disabled; `tokens` picks the largest asset (the
// first of equals). Same checks as above, and `tokens` must match in size.
LooRow leave_one_out_row(const std::string& flag, int64_t calls_per_iteration,
                         const std::vector<double>& ref, const std::vector<double>& off,
                         const std::vector<int64_t>& tokens);

// Whether two runs of the same path agree: their [min, max] ranges overlap, or their
// medians differ by less than the wider of the two ranges (max - min). With a handful of
// repeats a range understates the noise: the second branch keeps a tight run whose range
// just misses a noisy one's, while its median sits within the noise, from counting as a
// disagreement. Ranges touching at one end count as overlapping.
bool agree_within_spread(const Spread& a, const Spread& b);

// Derived figures of one cell; nullopt where the cell lacks the data (0 = not measured).
// Each throws when a repeat is not a finite positive time.
//
// The spread of the timed repeats; nullopt without repeats.
std::optional<Spread> wall_spread(const Cell& c);
// attention FLOPs at the measured attention peak + GEMM FLOPs at the measured GEMM peak;
// nullopt unless both FLOP counts and both peaks are positive (half an ideal misleads).
std::optional<double> ideal_seconds(const Cell& c, const Peaks& p);
// Median wall time / ideal time.
std::optional<double> wall_over_ideal(const Cell& c, const Peaks& p);
// GPU time outside attention and GEMM: median wall - attention - GEMM, clamped at 0. The
// split comes from the instrumented loop, which runs slower than the timed ones, so the
// subtraction can go below zero; nullopt unless both attention and GEMM were timed.
std::optional<double> other_seconds(const Cell& c);

}  // namespace s3d::bench
