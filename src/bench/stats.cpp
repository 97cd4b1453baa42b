#include "bench/stats.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace s3d::bench {
namespace {

// The common checks of the per-asset comparisons; `what` names the caller in errors.
void check_paired(const std::vector<double>& ref, const std::vector<double>& other,
                  const char* what) {
  S3D_CHECK(!ref.empty(), what, ": no assets to compare");
  S3D_CHECK(ref.size() == other.size(), what, ": ", ref.size(), " reference times but ",
            other.size(), " times to compare");
  for (size_t i = 0; i < ref.size(); ++i) {
    S3D_CHECK(std::isfinite(ref[i]) && ref[i] > 0, what, ": reference time of asset ", i,
              " must be positive, found ", ref[i]);
    S3D_CHECK(std::isfinite(other[i]) && other[i] > 0, what, ": compared time of asset ", i,
              " must be positive, found ", other[i]);
  }
}

double mean(const std::vector<double>& v) {
  double sum = 0;
  for (double x : v) sum += x;
  return sum / static_cast<double>(v.size());
}

}  // namespace

Spread spread(const std::vector<double>& values) {
  S3D_CHECK(!values.empty(), "spread: no values");
  for (size_t i = 0; i < values.size(); ++i)
    S3D_CHECK(std::isfinite(values[i]), "spread: value ", i, " is not finite (", values[i], ")");
  std::vector<double> v = values;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  const double median = n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  return {median, v.front(), v.back(), static_cast<int>(n)};
}

std::vector<double> per_asset_reductions(const std::vector<double>& ref,
                                         const std::vector<double>& path) {
  check_paired(ref, path, "per-asset reduction");
  std::vector<double> r(ref.size());
  for (size_t i = 0; i < ref.size(); ++i) r[i] = 1.0 - path[i] / ref[i];
  return r;
}

double macro_reduction(const std::vector<double>& ref, const std::vector<double>& path) {
  return mean(per_asset_reductions(ref, path));
}

double geomean_speedup(const std::vector<double>& ref, const std::vector<double>& path) {
  check_paired(ref, path, "geometric-mean speedup");
  std::vector<double> logs(ref.size());
  for (size_t i = 0; i < ref.size(); ++i) logs[i] = std::log(ref[i] / path[i]);
  return std::exp(mean(logs));
}

LooRow leave_one_out_row(const std::string& flag, int64_t calls_per_iteration,
                         const std::vector<double>& ref, const std::vector<double>& off,
                         const std::vector<int64_t>& tokens) {
  check_paired(ref, off, "leave-one-out");
  S3D_CHECK(tokens.size() == ref.size(), "leave-one-out ", flag, ": ", ref.size(),
            " assets timed but ", tokens.size(), " token counts");
  std::vector<double> delta_ms(ref.size()), delta_pct(ref.size());
  size_t largest = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    delta_ms[i] = (off[i] - ref[i]) * 1e3;
    delta_pct[i] = (off[i] - ref[i]) / ref[i] * 100.0;
    if (tokens[i] > tokens[largest]) largest = i;
  }
  return {flag,
          calls_per_iteration,
          mean(delta_ms),
          mean(delta_pct),
          delta_ms[largest],
          delta_pct[largest]};
}

bool agree_within_spread(const Spread& a, const Spread& b) {
  const bool overlap = a.min <= b.max && b.min <= a.max;
  const double wider = std::max(a.max - a.min, b.max - b.min);
  return overlap || std::fabs(a.median - b.median) < wider;
}

std::optional<Spread> wall_spread(const Cell& c) {
  if (c.loop_seconds.empty()) return std::nullopt;
  for (size_t i = 0; i < c.loop_seconds.size(); ++i)
    S3D_CHECK(std::isfinite(c.loop_seconds[i]) && c.loop_seconds[i] > 0, "cell (", c.path, ", ",
              c.asset, "): repeat ", i, " took ", c.loop_seconds[i],
              " s, expected a positive time");
  return spread(c.loop_seconds);
}

std::optional<double> ideal_seconds(const Cell& c, const Peaks& p) {
  if (c.attention_flops <= 0 || c.gemm_flops <= 0 || p.attention_tflops <= 0 || p.gemm_tflops <= 0)
    return std::nullopt;
  return c.attention_flops / (p.attention_tflops * 1e12) + c.gemm_flops / (p.gemm_tflops * 1e12);
}

std::optional<double> wall_over_ideal(const Cell& c, const Peaks& p) {
  auto wall = wall_spread(c);
  auto ideal = ideal_seconds(c, p);
  if (!wall || !ideal) return std::nullopt;
  return wall->median / *ideal;
}

std::optional<double> other_seconds(const Cell& c) {
  auto wall = wall_spread(c);
  if (!wall || c.attention_seconds <= 0 || c.gemm_seconds <= 0) return std::nullopt;
  return std::max(0.0, wall->median - c.attention_seconds - c.gemm_seconds);
}

}  // namespace s3d::bench
