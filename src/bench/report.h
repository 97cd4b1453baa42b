// The two files of `sparse3d bench`: JSON with every raw number and every derived figure,
// and a markdown report for a reader (tools/bench_figure.py plots the JSON).
#pragma once

#include <string>
#include <vector>

#include "bench/result.h"
#include "bench/service_figures.h"
#include "io/json.h"

namespace s3d::bench {

// Raw cells with all repeats, the inputs of every figure, and the figures (figures.h);
// a figure that was not measured is null.
io::Json to_json(const BenchResult& r);

// Header (date, GPU, settings), per-asset latency table, one summary table and one
// leave-one-out table per asset set, baselines that did not run, and how it was measured.
// Leave-one-out variants appear only in their table (and in the JSON).
std::string to_markdown(const BenchResult& r);

// The service protocol's tables (report_service.cpp), which to_markdown puts first: each
// asset's first request beside the repeats' median, the speedup over each baseline in both
// protocols, and what the first requests did. Empty without first requests.
std::string service_markdown(const BenchResult& r, const ServiceFigures& f);

// Writes OUT_DIR/STEM.json and STEM.md, creating OUT_DIR if needed. The figure is drawn from
// the JSON by tools/bench_figure.py (matplotlib; docs/BENCHMARK.md, "The figure").
void write_report_files(const BenchResult& r, const std::string& out_dir, const std::string& stem);

}  // namespace s3d::bench
