#include "bench/result_io.h"

#include <algorithm>

#include "bench/stats.h"
#include "core/error.h"
#include "io/fallback_json.h"

namespace s3d::bench {
namespace {

// parse_flag's error, prefixed with the file it came from.
sparse3d::Flag flag_in(const std::string& name, const std::string& what) {
  try {
    return sparse3d::parse_flag(name);
  } catch (const Error& e) {
    fail(what, ": ", e.what());
  }
}

Ablation ablation_from_json(const io::Json& ab, const std::string& what) {
  Ablation a;
  a.reference_path = ab.at("reference_path").get<std::string>();
  for (const auto& f : ab.at("flags").get<std::vector<std::string>>())
    a.flags.push_back(flag_in(f, what));
  for (const auto& [f, n] : ab.at("calls_per_iteration").get<std::map<std::string, int64_t>>())
    a.calls_per_iteration[flag_in(f, what)] = n;
  for (const auto& [f, p] : ab.at("variant_path").get<std::map<std::string, std::string>>())
    a.variant_path[flag_in(f, what)] = p;
  return a;
}

// An optional RequestCounters object of a cell (absent or null: nullopt).
std::optional<RequestCounters> counters_from_json(const io::Json& cell, const char* key) {
  if (!cell.contains(key) || cell[key].is_null()) return std::nullopt;
  const io::Json& j = cell[key];
  return RequestCounters{j.at("qualifications_run").get<uint64_t>(),
                         j.at("qualification_cache_hits").get<uint64_t>(),
                         j.at("fallbacks").get<uint64_t>()};
}

// Every path is a baseline's name or an execution plan's label.
void check_paths(const BenchResult& r, const std::string& what) {
  for (const auto& p : r.paths) {
    const bool baseline = std::any_of(r.baselines.begin(), r.baselines.end(),
                                      [&](const BaselineStatus& b) { return b.name == p; });
    if (baseline) continue;
    try {
      plan_of_path(p);
    } catch (const Error& e) {
      fail(what, ": path '", p, "': ", e.what());
    }
  }
}

// One entry of a result's "queue" (bench --queue), checked.
QueueRun queue_run(const io::Json& q, const std::string& what) {
  QueueRun qr;
  qr.path = q.at("path").get<std::string>();
  qr.mode = q.at("mode").get<std::string>();
  qr.engines = q.at("engines").get<int>();
  qr.devices_per_engine = q.at("devices_per_engine").get<int>();
  qr.wall_seconds = q.at("wall_seconds").get<double>();
  qr.latency_seconds = q.at("latency_seconds").get<std::vector<double>>();
  S3D_CHECK((qr.mode == "independent" || qr.mode == "split") && qr.engines >= 1 &&
                qr.devices_per_engine >= 1 && qr.wall_seconds > 0 && !qr.latency_seconds.empty(),
            what, ": queue run (", qr.path, ", ", qr.mode, ") is not a measured queue");
  return qr;
}

// One entry of a result's "searched_plans", checked.
sparse3d::SearchedPlan searched_plan_from_json(const io::Json& p, const std::string& what) {
  sparse3d::SearchedPlan sp;
  sp.kind = p.at("kind").get<std::string>();
  sp.shape = p.at("shape").get<std::string>();
  sp.candidates = p.at("candidates").get<int>();
  sp.timed = p.at("timed").get<int>();
  sp.index = p.at("index").get<int>();
  sp.default_ms = p.at("default_ms").get<double>();
  sp.best_ms = p.at("best_ms").get<double>();
  sp.source = p.at("source").get<std::string>();
  S3D_CHECK((sp.kind == "gemm" || sp.kind == "attention") &&
                (sp.source == "searched" || sp.source == "cache") && sp.index >= 0 &&
                sp.index < sp.candidates,
            what, ": searched plan '", sp.shape, "' has kind '", sp.kind, "', source '",
            sp.source, "', index ", sp.index, " of ", sp.candidates);
  return sp;
}

// One entry of a result's "throughput" (bench --batch), checked.
ThroughputCell throughput_cell_from_json(const io::Json& t, const std::string& what) {
  ThroughputCell tc;
  tc.path = t.at("path").get<std::string>();
  tc.asset = t.at("asset").get<std::string>();
  tc.batch = t.at("batch").get<int>();
  tc.loop_seconds = t.at("loop_seconds").get<std::vector<double>>();
  tc.peak_bytes = t.at("peak_bytes").get<size_t>();
  S3D_CHECK(tc.batch >= 1 && !tc.loop_seconds.empty(), what, ": throughput cell (",
            tc.path, ", ", tc.asset, ", K ", tc.batch, ") has no timing or K < 1");
  return tc;
}

// One entry of a result's "cells": one (path, asset) measurement. Fields added after the first
// results are read with defaults, so older results still load.
Cell cell_from_json(const io::Json& c) {
  Cell cell;
  cell.path = c.at("path").get<std::string>();
  cell.asset = c.at("asset").get<std::string>();
  cell.loop_seconds = c.at("loop_seconds").get<std::vector<double>>();
  cell.launches = c.at("launches").get<uint64_t>();
  cell.launches_by_op = c.at("launches_by_op").get<std::map<std::string, uint64_t>>();
  cell.peak_bytes = c.at("peak_bytes").get<size_t>();
  cell.peak_reserved_bytes = c.value("peak_reserved_bytes", size_t{0});  // since 2026-11-30
  cell.device_peak_bytes = c.value("device_peak_bytes", size_t{0});      // since 2026-12-02
  cell.attention_seconds = c.at("attention_seconds").get<double>();
  cell.gemm_seconds = c.at("gemm_seconds").get<double>();
  cell.attention_flops = c.at("attention_flops").get<double>();
  cell.gemm_flops = c.at("gemm_flops").get<double>();
  // Absent in results written before the request set-up and graphs were recorded.
  cell.setup_seconds = c.value("setup_seconds", std::vector<double>());
  cell.graphs_captured = c.value("graphs_captured", 0);
  cell.graph_capture_seconds = c.value("graph_capture_seconds", 0.0);
  cell.graph_nodes = c.value("graph_nodes", size_t{0});
  cell.devices = c.value("devices", 1);  // since sequence parallelism, 2026-12-01
  // Absent (or null) in results written before the service protocol.
  if (c.contains("first_request_seconds") && !c["first_request_seconds"].is_null())
    cell.first_request_seconds = c["first_request_seconds"].get<double>();
  cell.first_request_setup_seconds = c.value("first_request_setup_seconds", 0.0);
  cell.first_request_loop_seconds = c.value("first_request_loop_seconds", 0.0);
  cell.first_request_counters = counters_from_json(c, "first_request_counters");
  cell.request_wall_seconds = c.value("request_wall_seconds", std::vector<double>());
  cell.repeat_counters = counters_from_json(c, "repeat_counters");
  return cell;
}

}  // namespace

sparse3d::ExecutionPlan plan_of_path(const std::string& path) {
  // "PATH#2": a repeat of PATH; "PATH@0,1": PATH split over devices 0 and 1.
  return sparse3d::ExecutionPlan::parse(path.substr(0, path.find_first_of("#@")));
}

BenchResult result_from_json(const io::Json& j, const std::string& what) {
  try {
    S3D_CHECK(j.value("schema", std::string()) == "sparse3d-bench/1", what,
              ": not a sparse3d bench result (schema ", j.value("schema", std::string("missing")),
              ")");
    BenchResult r;
    r.date = j.at("date").get<std::string>();
    r.fingerprint = j.at("fingerprint");
    r.settings = j.at("settings");
    r.paths = j.at("paths").get<std::vector<std::string>>();
    for (const auto& a : j.at("assets"))
      r.assets.push_back(AssetInfo{a.at("name").get<std::string>(), a.at("tokens").get<int64_t>(),
                                   a.at("set").get<std::string>()});
    const auto& p = j.at("peaks");
    r.peaks = Peaks{p.at("attention_tflops").get<double>(), p.at("gemm_tflops").get<double>(),
                    p.at("attention_shape").get<std::string>(), p.at("gemm_shape").get<std::string>()};
    r.ablation = ablation_from_json(j.at("ablation"), what);
    for (const auto& b : j.at("baselines"))
      r.baselines.push_back(BaselineStatus{b.at("name").get<std::string>(), b.at("ran").get<bool>(),
                                           b.at("reason").get<std::string>()});
    // Absent in results written before null-context elimination.
    if (j.contains("fallbacks")) r.fallbacks = io::fallbacks_from_json(j.at("fallbacks"), what);
    r.null_context = j.value("null_context", std::string());
    // Absent in results written before searched plans.
    if (j.contains("searched_plans"))
      for (const auto& p : j.at("searched_plans"))
        r.searched_plans.push_back(searched_plan_from_json(p, what));
    // Absent in results written before multi-asset batching.
    if (j.contains("throughput"))
      for (const auto& t : j.at("throughput"))
        r.throughput.push_back(throughput_cell_from_json(t, what));
    // Absent in results written before sequence parallelism (2026-12-01).
    if (j.contains("queue"))
      for (const auto& q : j.at("queue")) r.queue.push_back(queue_run(q, what));
    for (const auto& c : j.at("cells")) r.cells.push_back(cell_from_json(c));
    check_paths(r, what);
    return r;
  } catch (const io::Json::exception& e) {
    fail(what, ": malformed bench result: ", e.what());
  }
}

void add_baseline_timing(BenchResult& r, const io::Json& timing, const std::string& name,
                         const std::string& what) {
  BaselineStatus st{name, false, ""};
  if (timing.contains("compile") && !timing["compile"].value("ok", true)) {
    st.reason = cat("torch.compile failed at ", timing["compile"].value("stage", std::string("?")),
                    ": ", timing["compile"].value("reason", std::string("no reason given")));
    r.baselines.push_back(st);
    return;
  }
  S3D_CHECK(timing.contains("assets") && timing["assets"].is_object(), what,
            ": no \"assets\" object in the baseline timing file");
  int timed = 0;
  std::string missing;
  for (const auto& a : r.assets) {
    if (!timing["assets"].contains(a.name)) {
      missing += (missing.empty() ? "" : ", ") + a.name;
      continue;
    }
    const io::Json& e = timing["assets"][a.name];
    // run.py --service: the first call after its warm-up at another token count, and each
    // call's whole wall time (total_seconds is the loop alone); a service-only run has no
    // repeats.
    const bool first = e.contains("first_seconds") && e["first_seconds"].is_number();
    S3D_CHECK(first || (e.contains("total_seconds") && e["total_seconds"].is_array() &&
                        !e["total_seconds"].empty()),
              what, ": asset ", a.name, " has no total_seconds (nor first_seconds)");
    Cell c;
    c.path = name;
    c.asset = a.name;
    for (const auto& v : e.value("total_seconds", io::Json::array()))
      c.loop_seconds.push_back(v.get<double>());
    if (first) c.first_request_seconds = e["first_seconds"].get<double>();
    c.request_wall_seconds = e.value("call_seconds", std::vector<double>());
    S3D_CHECK(c.request_wall_seconds.empty() ||
                  c.request_wall_seconds.size() == c.loop_seconds.size(),
              what, ": asset ", a.name, " has ", c.request_wall_seconds.size(),
              " call_seconds for ", c.loop_seconds.size(), " total_seconds");
    // Optional (run.py on a GPU): torch.cuda.max_memory_allocated / max_memory_reserved.
    c.peak_bytes = e.value("peak_allocated_bytes", size_t{0});
    c.peak_reserved_bytes = e.value("peak_reserved_bytes", size_t{0});
    // Since 2026-12-02: device-wide (the weights + the highest cudaMemGetInfo reading during
    // the timed calls above the reading before them, PyTorch's cache emptied first).
    c.device_peak_bytes = e.value("device_peak_bytes", size_t{0});
    r.cells.push_back(std::move(c));
    ++timed;
  }
  S3D_CHECK(timed > 0, what, ": the baseline timed none of the benchmark's assets");
  // A baseline may cover a subset (an expensive torch.compile run, say): say which.
  if (!missing.empty()) st.reason = cat("timed ", timed, " of ", r.assets.size(), " assets (not: ", missing, ")");
  st.ran = true;
  if (std::find(r.paths.begin(), r.paths.end(), name) == r.paths.end()) r.paths.push_back(name);
  r.baselines.push_back(st);
}

std::vector<bench::FlagTimingPoint> flag_timing_points(const BenchResult& r,
                                                         const std::string& off_path,
                                                         const std::string& on_path,
                                                         const std::string& what) {
  std::vector<bench::FlagTimingPoint> points;
  for (const auto& a : r.assets) {
    const Cell *off = nullptr, *on = nullptr;
    for (const auto& c : r.cells) {
      if (c.asset != a.name || c.loop_seconds.empty()) continue;
      if (c.path == off_path) off = &c;
      if (c.path == on_path) on = &c;
    }
    if (!off || !on) continue;
    points.push_back({a.tokens, wall_spread(*off)->median, wall_spread(*on)->median});
  }
  S3D_CHECK(!points.empty(), what, ": no asset was timed both as ", off_path, " and as ",
            on_path, " (bench --paths ", off_path, " ", on_path, ")");
  return points;
}

}  // namespace s3d::bench
