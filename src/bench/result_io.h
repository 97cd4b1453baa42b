// Reading results back: a saved bench JSON (report.h writes it) becomes a BenchResult again,
// and a timing file of the PyTorch baseline (tools/torch_ref/run.py --timing-json) becomes
// its cells. `sparse3d bench-report` uses both to remake a report without a GPU, e.g. from
// an engine run and a baseline run measured in separate calls of the same session.
#pragma once

#include <string>

#include "bench/result.h"
#include "bench/flag_choice.h"
#include "io/json.h"
#include "sparse3d/flags.h"

namespace s3d::bench {

// The raw part of to_json(r) back into a BenchResult; derived figures are ignored. Flags
// and paths are read through sparse3d/flags.h: an unknown flag or path (one that is not a
// baseline's name) is an error naming the known ones.
BenchResult result_from_json(const io::Json& j, const std::string& what);

// The execution plan a result's path names: an ExecutionPlan label, possibly with "#N" (the
// same plan measured again) or "@0,1" (the plan split over those devices) appended. Throws naming the known paths/flags when it is not one.
sparse3d::ExecutionPlan plan_of_path(const std::string& path);

// Adds the baseline `name` ("torch_eager", "torch_compile") from a run.py timing file: one
// cell per asset of `r` found in it, or a BaselineStatus with the reason it did not run
// (a failed torch.compile records why). A baseline may time a subset of the assets (the
// status says which are missing); one that times none is an error.
void add_baseline_timing(BenchResult& r, const io::Json& timing, const std::string& name,
                         const std::string& what);

// The timings bench::choose_flag needs from one bench run: for every asset with cells of
// both `off_path` and `on_path` (one flag apart), the two medians. Throws naming the labels
// when the run timed no asset both ways.
std::vector<bench::FlagTimingPoint> flag_timing_points(const BenchResult& r,
                                                         const std::string& off_path,
                                                         const std::string& on_path,
                                                         const std::string& what);

}  // namespace s3d::bench
