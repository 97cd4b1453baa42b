// The service protocol's figures (docs/BENCHMARK.md, "Protocols"): per path and asset, the
// first request on a fresh engine against the median of the warm repeats, and per engine
// path and baseline, the speedup in each protocol and their ratio. Part of figures.h's
// derive(); nullopt = not measured ("-").
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "bench/result.h"

namespace s3d::bench {

// The whole-call wall time of a cell's repeats: request_wall_seconds where recorded, else
// loop_seconds (a baseline's timing file without call times, a result written before the
// service protocol). nullopt without repeats.
std::optional<double> repeat_call_median(const Cell& c);

struct ServiceAsset {
  std::optional<double> first_s;            // Cell::first_request_seconds
  std::optional<double> repeat_median_s;    // repeat_call_median
  std::optional<double> first_over_median;  // first_s / repeat_median_s
};

// One engine path against one baseline, per asset: speedup = t_baseline / t_path, from the
// first requests (service) and from the repeats' medians (repeated), and service / repeated.
struct ServiceComparison {
  std::string against;
  std::vector<std::optional<double>> service, repeated, ratio;  // per asset
  // Over the assets that have both protocols' speedups: geometric means, and the smallest
  // ratio with its asset (the figure "service speedup >= 0.95x the repeated one" reads).
  std::optional<double> geomean_service, geomean_repeated;
  std::optional<double> min_ratio;
  std::string min_ratio_asset;
  int n = 0;
};

struct ServicePath {
  std::string path;
  bool baseline = false;
  std::vector<ServiceAsset> assets;  // in BenchResult::assets order
  // The largest first / median over the assets, and its asset.
  std::optional<double> max_first_over_median;
  std::string max_first_over_median_asset;
  std::vector<ServiceComparison> vs;  // one per baseline that ran (engine paths only)
};

struct ServiceFigures {
  // Every path (leave-one-out variants left out) with a first request in at least one cell;
  // empty when the result has no service protocol.
  std::vector<ServicePath> paths;
};

// `paths`: the result's paths in report order, `variants` those that are leave-one-out
// configurations (figures.h decides both).
ServiceFigures derive_service(const BenchResult& r, const std::vector<std::string>& paths,
                              const std::vector<std::string>& variants);

}  // namespace s3d::bench
