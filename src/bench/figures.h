// Every figure the reports show, derived once from a BenchResult, so that the JSON, the
// markdown and the plot cannot disagree. nullopt = the figure was not measured ("-").
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "bench/result.h"
#include "bench/service_figures.h"
#include "bench/stats.h"

namespace s3d::bench {

// One (path, asset) cell's figures; all nullopt when the cell is missing.
struct AssetFigures {
  std::optional<Spread> wall;  // seconds per denoise loop over the timed repeats
  std::optional<uint64_t> launches;
  std::optional<size_t> peak_bytes;
  std::optional<double> attention_s, gemm_s, other_s;  // stats.h: other is clamped at 0
  // Fractions of the median wall time.
  std::optional<double> attention_share, gemm_share, other_share;
  std::optional<double> ideal_s, wall_over_ideal;
};

// A per-asset figure averaged with equal weight over the assets of a set that have it.
struct AssetMean {
  std::optional<double> value;
  int n = 0;   // assets that have the figure
  int of = 0;  // assets in the set
};

// Macro reduction and geometric-mean speedup of a path against another, over the assets
// of a set that both timed.
struct Comparison {
  std::string against;
  std::optional<double> macro_reduction, geomean_speedup;
  int n = 0, of = 0;
};

struct SetSummary {
  std::string set;
  std::vector<Comparison> vs;  // one per Figures::comparators
  AssetMean latency_s, attention_s, gemm_s, other_s;
  AssetMean attention_share, gemm_share, other_share, ideal_s, wall_over_ideal;
  std::optional<size_t> peak_bytes;                    // the largest over the set
  std::optional<uint64_t> launches_min, launches_max;  // differ when shapes change launches
};

struct PathFigures {
  std::string path;
  bool ablation_variant = false;     // a leave-one-out configuration, not a path asked for
  std::vector<AssetFigures> assets;  // in BenchResult::assets order
  std::vector<SetSummary> sets;      // in Figures::sets order
};

struct LooEntry {
  std::string flag, variant_path;
  int64_t calls_per_iteration = -1;  // -1 = not given
  std::optional<LooRow> row;  // nullopt unless the variant timed every asset the reference did
  int n = 0;                  // assets of the table the variant timed
};

// The leave-one-out table of one asset set, over the assets the reference timed; rows in
// descending order of average delta (the article's order), rows without data last.
struct LooTable {
  std::string set, reference_path;
  int n_assets = 0;
  std::string largest_asset;
  int64_t largest_tokens = 0;
  std::vector<LooEntry> rows;
};

struct Figures {
  std::string reference;                 // BenchResult::paths[0]
  // The reference, then the engine paths named in settings "also_compare" (bench
  // --also-compare), then each baseline that ran.
  std::vector<std::string> comparators;
  size_t path_comparators = 0;  // how many of comparators[1..] are such engine paths
  std::vector<std::string> sets;         // asset sets in order of first appearance
  // BenchResult::paths in order, then any ablation path or baseline that it lacks.
  std::vector<PathFigures> paths;
  std::vector<LooTable> leave_one_out;  // one per set; empty without an ablation
  ServiceFigures service;                // empty paths without the service protocol
};

// Throws on a result the figures cannot be trusted from: duplicate asset or path names,
// two cells for one (path, asset), a cell naming an asset not in the manifest.
Figures derive(const BenchResult& r);

}  // namespace s3d::bench
