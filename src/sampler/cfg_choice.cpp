#include "sampler/cfg_choice.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace s3d::sampler {

CfgChoice choose_cfg_mode(std::vector<CfgTimingPoint> points, int64_t tokens) {
  S3D_CHECK(tokens > 0, "CFG choice: token count must be > 0, got ", tokens);
  CfgChoice c;
  if (points.empty()) {
    c.reason = "no measured timings: serial CFG (the original's mode)";
    return c;
  }
  for (const auto& p : points)
    S3D_CHECK(p.tokens > 0 && std::isfinite(p.serial_s) && p.serial_s > 0 &&
                  std::isfinite(p.batched_s) && p.batched_s > 0,
              "CFG choice: a timing point needs tokens > 0 and finite times > 0, got ", p.tokens,
              " tokens, serial ", p.serial_s, " s, batched ", p.batched_s, " s");
  std::sort(points.begin(), points.end(),
            [](const auto& a, const auto& b) { return a.tokens < b.tokens; });
  for (size_t i = 1; i < points.size(); ++i)
    S3D_CHECK(points[i].tokens != points[i - 1].tokens, "CFG choice: two timing points at ",
              points[i].tokens, " tokens");
  auto ratio = [](const CfgTimingPoint& p) { return p.batched_s / p.serial_s; };
  if (tokens <= points.front().tokens) {
    c.predicted_ratio = ratio(points.front());
    c.reason = cat("measured at ", points.front().tokens, " tokens (the smallest measured)");
  } else if (tokens >= points.back().tokens) {
    c.predicted_ratio = ratio(points.back());
    c.reason = cat("measured at ", points.back().tokens, " tokens (the largest measured)");
  } else {
    size_t hi = 1;
    while (points[hi].tokens < tokens) ++hi;
    const CfgTimingPoint &a = points[hi - 1], &b = points[hi];
    const double w = (std::log(double(tokens)) - std::log(double(a.tokens))) /
                     (std::log(double(b.tokens)) - std::log(double(a.tokens)));
    c.predicted_ratio = ratio(a) + w * (ratio(b) - ratio(a));
    c.reason = cat("interpolated between ", a.tokens, " and ", b.tokens, " tokens");
  }
  c.batched = c.predicted_ratio < 1.0;
  c.reason = cat(c.batched ? "batched" : "serial", " CFG: batched / serial = ", c.predicted_ratio,
                 ", ", c.reason);
  return c;
}

}  // namespace s3d::sampler
