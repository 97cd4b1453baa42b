// The three files of `sparse3d bench`: JSON with every raw number and every derived
// figure, a markdown report for a reader, and the latency-vs-tokens SVG plot.
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

// The figure's title: line 1 the model (checkpoint file, shape where recorded, parameter
// count), line 2 the protocol, sampler steps and CFG, the GPU and the date, each taken from
// the result's settings and fingerprint; a field an older result lacks reads "not recorded".
std::vector<std::string> figure_title(const BenchResult& r);

// The figure (report_svg.cpp), under figure_title: one panel per kind of figure the result
// has, each a line chart over active tokens when its assets have three or more token counts
// and a bar chart per asset otherwise. In order: the service protocol's first requests;
// latency (median of the repeats); peak device memory in use, with the PyTorch baseline's
// where recorded; throughput against K = 1 (bench --batch); leave-one-out (bench --ablate).
// Leave-one-out variants appear only in their panel; a path keeps its colour in every panel.
std::string to_svg(const BenchResult& r);

// Writes OUT_DIR/STEM.json, STEM.md and STEM.svg, creating OUT_DIR if needed.
void write_report_files(const BenchResult& r, const std::string& out_dir, const std::string& stem);

}  // namespace s3d::bench
