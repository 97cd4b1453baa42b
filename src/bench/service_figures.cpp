#include "bench/service_figures.h"

#include <algorithm>
#include <cmath>

#include "bench/stats.h"
#include "core/error.h"

namespace s3d::bench {
namespace {

const Cell* find_cell(const BenchResult& r, const std::string& path, const std::string& asset) {
  for (const auto& c : r.cells)
    if (c.path == path && c.asset == asset) return &c;
  return nullptr;
}

bool is_baseline(const BenchResult& r, const std::string& path) {
  return std::any_of(r.baselines.begin(), r.baselines.end(),
                     [&](const BaselineStatus& b) { return b.name == path && b.ran; });
}

ServiceAsset service_asset(const Cell* c) {
  ServiceAsset a;
  if (c == nullptr) return a;
  if (c->first_request_seconds) {
    S3D_CHECK(std::isfinite(*c->first_request_seconds) && *c->first_request_seconds > 0,
              "bench result: cell (", c->path, ", ", c->asset, ") has first request time ",
              *c->first_request_seconds, "; expected a finite time > 0");
    a.first_s = c->first_request_seconds;
  }
  a.repeat_median_s = repeat_call_median(*c);
  if (a.first_s && a.repeat_median_s) a.first_over_median = *a.first_s / *a.repeat_median_s;
  return a;
}

ServiceComparison compare(const BenchResult& r, const ServicePath& path,
                          const ServicePath& base) {
  ServiceComparison c;
  c.against = base.path;
  std::vector<double> first_base, first_path, rep_base, rep_path;
  for (size_t i = 0; i < r.assets.size(); ++i) {
    const ServiceAsset &p = path.assets[i], &b = base.assets[i];
    auto ratio_of = [](const std::optional<double>& num, const std::optional<double>& den) {
      return num && den ? std::optional<double>(*num / *den) : std::nullopt;
    };
    c.service.push_back(ratio_of(b.first_s, p.first_s));
    c.repeated.push_back(ratio_of(b.repeat_median_s, p.repeat_median_s));
    c.ratio.push_back(ratio_of(c.service.back(), c.repeated.back()));
    if (!c.ratio.back()) continue;
    first_base.push_back(*b.first_s);
    first_path.push_back(*p.first_s);
    rep_base.push_back(*b.repeat_median_s);
    rep_path.push_back(*p.repeat_median_s);
    if (!c.min_ratio || *c.ratio.back() < *c.min_ratio) {
      c.min_ratio = c.ratio.back();
      c.min_ratio_asset = r.assets[i].name;
    }
  }
  c.n = static_cast<int>(first_base.size());
  if (c.n > 0) {
    c.geomean_service = geomean_speedup(first_base, first_path);
    c.geomean_repeated = geomean_speedup(rep_base, rep_path);
  }
  return c;
}

}  // namespace

std::optional<double> repeat_call_median(const Cell& c) {
  const std::vector<double>& v = c.request_wall_seconds.empty() ? c.loop_seconds
                                                                : c.request_wall_seconds;
  if (v.empty()) return std::nullopt;
  try {
    return spread(v).median;
  } catch (const Error& e) {
    fail("bench result: cell (", c.path, ", ", c.asset, "): ", e.what());
  }
}

ServiceFigures derive_service(const BenchResult& r, const std::vector<std::string>& paths,
                              const std::vector<std::string>& variants) {
  ServiceFigures f;
  for (const auto& path : paths) {
    if (std::find(variants.begin(), variants.end(), path) != variants.end()) continue;
    ServicePath p;
    p.path = path;
    p.baseline = is_baseline(r, path);
    bool any_first = false;
    for (const auto& a : r.assets) {
      p.assets.push_back(service_asset(find_cell(r, path, a.name)));
      const ServiceAsset& s = p.assets.back();
      any_first |= s.first_s.has_value();
      if (s.first_over_median &&
          (!p.max_first_over_median || *s.first_over_median > *p.max_first_over_median)) {
        p.max_first_over_median = s.first_over_median;
        p.max_first_over_median_asset = a.name;
      }
    }
    if (any_first) f.paths.push_back(std::move(p));
  }
  for (auto& p : f.paths) {
    if (p.baseline) continue;
    for (const auto& b : f.paths)
      if (b.baseline) p.vs.push_back(compare(r, p, b));
  }
  return f;
}

}  // namespace s3d::bench
