#include "bench/flag_choice.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace s3d::bench {

FlagChoice choose_flag(sparse3d::Flag which, std::vector<FlagTimingPoint> points,
                       int64_t tokens) {
  const std::string_view flag = sparse3d::name(which);
  S3D_CHECK(tokens > 0, flag, " choice: token count must be > 0, got ", tokens);
  FlagChoice c;
  if (points.empty()) {
    c.reason = cat(flag, " off: no measured timings");
    return c;
  }
  for (const auto& p : points)
    S3D_CHECK(p.tokens > 0 && std::isfinite(p.off_s) && p.off_s > 0 && std::isfinite(p.on_s) &&
                  p.on_s > 0,
              flag, " choice: a timing point needs tokens > 0 and finite times > 0, got ",
              p.tokens, " tokens, off ", p.off_s, " s, on ", p.on_s, " s");
  std::sort(points.begin(), points.end(),
            [](const auto& a, const auto& b) { return a.tokens < b.tokens; });
  for (size_t i = 1; i < points.size(); ++i)
    S3D_CHECK(points[i].tokens != points[i - 1].tokens, flag, " choice: two timing points at ",
              points[i].tokens, " tokens");
  auto ratio = [](const FlagTimingPoint& p) { return p.on_s / p.off_s; };
  std::string evidence;
  if (tokens <= points.front().tokens) {
    c.predicted_ratio = ratio(points.front());
    evidence = cat("measured at ", points.front().tokens, " tokens (the smallest measured)");
  } else if (tokens >= points.back().tokens) {
    c.predicted_ratio = ratio(points.back());
    evidence = cat("measured at ", points.back().tokens, " tokens (the largest measured)");
  } else {
    size_t hi = 1;
    while (points[hi].tokens < tokens) ++hi;
    const FlagTimingPoint &a = points[hi - 1], &b = points[hi];
    const double w = (std::log(double(tokens)) - std::log(double(a.tokens))) /
                     (std::log(double(b.tokens)) - std::log(double(a.tokens)));
    c.predicted_ratio = ratio(a) + w * (ratio(b) - ratio(a));
    evidence = cat("interpolated between ", a.tokens, " and ", b.tokens, " tokens");
  }
  c.on = c.predicted_ratio < 1.0;
  c.reason = cat(flag, c.on ? " on" : " off", ": on / off = ", c.predicted_ratio, ", ", evidence);
  return c;
}

}  // namespace s3d::bench
