// to_json and the files; to_markdown is in report_markdown.cpp.
#include "bench/report.h"

#include <filesystem>
#include <fstream>

#include "bench/figures.h"
#include "core/error.h"
#include "io/atomic_file.h"
#include "io/fallback_json.h"

namespace s3d::bench {
namespace {

template <class T>
io::Json opt(const std::optional<T>& v) {
  return v ? io::Json(*v) : io::Json(nullptr);
}

io::Json mean_json(const AssetMean& m) { return {{"mean", opt(m.value)}, {"n_assets", m.n}}; }

// Flags by name (result_io.cpp reads them back with parse_flag); the maps as objects keyed
// by name, as before the flags were typed.
io::Json ablation_json(const Ablation& a) {
  io::Json flags = io::Json::array(), calls = io::Json::object(), variants = io::Json::object();
  for (sparse3d::Flag f : a.flags) flags.push_back(std::string(sparse3d::name(f)));
  for (const auto& [f, n] : a.calls_per_iteration) calls[std::string(sparse3d::name(f))] = n;
  for (const auto& [f, p] : a.variant_path) variants[std::string(sparse3d::name(f))] = p;
  return {{"reference_path", a.reference_path},
          {"flags", flags},
          {"calls_per_iteration", calls},
          {"variant_path", variants}};
}

io::Json counters_json(const std::optional<RequestCounters>& c) {
  if (!c) return nullptr;
  return {{"qualifications_run", c->qualifications_run},
          {"qualification_cache_hits", c->qualification_cache_hits},
          {"fallbacks", c->fallbacks}};
}

io::Json raw_json(const BenchResult& r) {
  io::Json j;
  j["schema"] = "sparse3d-bench/1";
  j["date"] = r.date;
  j["fingerprint"] = r.fingerprint;
  j["settings"] = r.settings;
  j["paths"] = r.paths;
  j["assets"] = io::Json::array();
  for (const auto& a : r.assets)
    j["assets"].push_back({{"name", a.name}, {"tokens", a.tokens}, {"set", a.set}});
  j["peaks"] = {{"attention_tflops", r.peaks.attention_tflops},
                {"gemm_tflops", r.peaks.gemm_tflops},
                {"attention_shape", r.peaks.attention_shape},
                {"gemm_shape", r.peaks.gemm_shape}};
  j["ablation"] = ablation_json(r.ablation);
  j["baselines"] = io::Json::array();
  for (const auto& b : r.baselines)
    j["baselines"].push_back({{"name", b.name}, {"ran", b.ran}, {"reason", b.reason}});
  j["fallbacks"] = io::fallbacks_to_json(r.fallbacks);
  j["null_context"] = r.null_context;
  j["searched_plans"] = io::Json::array();
  for (const auto& p : r.searched_plans)
    j["searched_plans"].push_back({{"kind", p.kind},
                                   {"shape", p.shape},
                                   {"candidates", p.candidates},
                                   {"timed", p.timed},
                                   {"index", p.index},
                                   {"default_ms", p.default_ms},
                                   {"best_ms", p.best_ms},
                                   {"source", p.source}});
  j["throughput"] = io::Json::array();
  for (const auto& t : r.throughput)
    j["throughput"].push_back({{"path", t.path},
                               {"asset", t.asset},
                               {"batch", t.batch},
                               {"loop_seconds", t.loop_seconds},
                               {"peak_bytes", t.peak_bytes}});
  j["queue"] = io::Json::array();
  for (const auto& q : r.queue)
    j["queue"].push_back({{"path", q.path},
                          {"mode", q.mode},
                          {"engines", q.engines},
                          {"devices_per_engine", q.devices_per_engine},
                          {"wall_seconds", q.wall_seconds},
                          {"latency_seconds", q.latency_seconds}});
  j["cells"] = io::Json::array();
  for (const auto& c : r.cells) {
    j["cells"].push_back({{"path", c.path},
                          {"asset", c.asset},
                          {"loop_seconds", c.loop_seconds},
                          {"setup_seconds", c.setup_seconds},
                          {"graphs_captured", c.graphs_captured},
                          {"graph_capture_seconds", c.graph_capture_seconds},
                          {"graph_nodes", c.graph_nodes},
                          {"devices", c.devices},
                          {"launches", c.launches},
                          {"launches_by_op", c.launches_by_op},
                          {"peak_bytes", c.peak_bytes},
                          {"peak_reserved_bytes", c.peak_reserved_bytes},
                          {"device_peak_bytes", c.device_peak_bytes},
                          {"attention_seconds", c.attention_seconds},
                          {"gemm_seconds", c.gemm_seconds},
                          {"attention_flops", c.attention_flops},
                          {"gemm_flops", c.gemm_flops}});
    io::Json& cj = j["cells"].back();
    cj["first_request_seconds"] = opt(c.first_request_seconds);
    cj["first_request_setup_seconds"] = c.first_request_setup_seconds;
    cj["first_request_loop_seconds"] = c.first_request_loop_seconds;
    cj["first_request_counters"] = counters_json(c.first_request_counters);
    cj["request_wall_seconds"] = c.request_wall_seconds;
    cj["repeat_counters"] = counters_json(c.repeat_counters);
  }
  return j;
}

io::Json asset_json(const AssetFigures& f) {
  io::Json j;
  j["median_s"] = f.wall ? io::Json(f.wall->median) : io::Json(nullptr);
  j["min_s"] = f.wall ? io::Json(f.wall->min) : io::Json(nullptr);
  j["max_s"] = f.wall ? io::Json(f.wall->max) : io::Json(nullptr);
  j["repeats"] = f.wall ? f.wall->n : 0;
  j["launches"] = opt(f.launches);
  j["peak_bytes"] = opt(f.peak_bytes);
  j["attention_s"] = opt(f.attention_s);
  j["gemm_s"] = opt(f.gemm_s);
  j["other_s"] = opt(f.other_s);
  j["attention_share"] = opt(f.attention_share);
  j["gemm_share"] = opt(f.gemm_share);
  j["other_share"] = opt(f.other_share);
  j["ideal_s"] = opt(f.ideal_s);
  j["wall_over_ideal"] = opt(f.wall_over_ideal);
  return j;
}

io::Json summary_json(const SetSummary& s) {
  io::Json j;
  j["vs"] = io::Json::object();
  for (const auto& c : s.vs)
    j["vs"][c.against] = {{"macro_reduction", opt(c.macro_reduction)},
                          {"geomean_speedup", opt(c.geomean_speedup)},
                          {"n_assets", c.n}};
  j["latency_s"] = mean_json(s.latency_s);
  j["attention_s"] = mean_json(s.attention_s);
  j["gemm_s"] = mean_json(s.gemm_s);
  j["other_s"] = mean_json(s.other_s);
  j["attention_share"] = mean_json(s.attention_share);
  j["gemm_share"] = mean_json(s.gemm_share);
  j["other_share"] = mean_json(s.other_share);
  j["ideal_s"] = mean_json(s.ideal_s);
  j["wall_over_ideal"] = mean_json(s.wall_over_ideal);
  j["peak_bytes"] = opt(s.peak_bytes);
  j["launches_min"] = opt(s.launches_min);
  j["launches_max"] = opt(s.launches_max);
  return j;
}

io::Json loo_json(const LooTable& t) {
  io::Json j = {{"reference_path", t.reference_path},
                {"n_assets", t.n_assets},
                {"largest_asset", t.largest_asset},
                {"largest_tokens", t.largest_tokens},
                {"rows", io::Json::array()}};
  for (const auto& e : t.rows) {
    io::Json row = {
        {"flag", e.flag},
        {"variant_path", e.variant_path},
        {"calls_per_iteration",
         e.calls_per_iteration >= 0 ? io::Json(e.calls_per_iteration) : io::Json(nullptr)},
        {"n_assets", e.n}};
    row["avg_delta_ms"] = e.row ? io::Json(e.row->avg_delta_ms) : io::Json(nullptr);
    row["avg_delta_pct"] = e.row ? io::Json(e.row->avg_delta_pct) : io::Json(nullptr);
    row["largest_delta_ms"] = e.row ? io::Json(e.row->largest_delta_ms) : io::Json(nullptr);
    row["largest_delta_pct"] = e.row ? io::Json(e.row->largest_delta_pct) : io::Json(nullptr);
    j["rows"].push_back(row);
  }
  return j;
}

// The service protocol's figures: per path and asset the first request, the repeats'
// median and their ratio; per engine path and baseline the speedup in each protocol.
io::Json service_json(const BenchResult& r, const ServiceFigures& f) {
  io::Json paths = io::Json::object();
  for (const auto& p : f.paths) {
    io::Json pj = {{"baseline", p.baseline},
                   {"max_first_over_median", opt(p.max_first_over_median)},
                   {"max_first_over_median_asset", p.max_first_over_median_asset},
                   {"assets", io::Json::object()},
                   {"vs", io::Json::object()}};
    for (size_t i = 0; i < r.assets.size(); ++i) {
      const ServiceAsset& a = p.assets[i];
      pj["assets"][r.assets[i].name] = {{"first_s", opt(a.first_s)},
                                        {"repeat_median_s", opt(a.repeat_median_s)},
                                        {"first_over_median", opt(a.first_over_median)}};
    }
    for (const auto& v : p.vs) {
      io::Json vj = {{"geomean_service_speedup", opt(v.geomean_service)},
                     {"geomean_repeated_speedup", opt(v.geomean_repeated)},
                     {"min_ratio", opt(v.min_ratio)},
                     {"min_ratio_asset", v.min_ratio_asset},
                     {"n_assets", v.n},
                     {"assets", io::Json::object()}};
      for (size_t i = 0; i < r.assets.size(); ++i)
        vj["assets"][r.assets[i].name] = {{"service_speedup", opt(v.service[i])},
                                          {"repeated_speedup", opt(v.repeated[i])},
                                          {"ratio", opt(v.ratio[i])}};
      pj["vs"][v.against] = vj;
    }
    paths[p.path] = pj;
  }
  return {{"paths", paths}};
}

void write_text(const std::string& path, const std::string& text) {
  io::write_file_atomic(path, text);
}

}  // namespace

io::Json to_json(const BenchResult& r) {
  const Figures fig = derive(r);
  io::Json j = raw_json(r);
  io::Json& d = j["derived"];
  d["reference_path"] = fig.reference;
  d["comparators"] = fig.comparators;
  d["sets"] = fig.sets;
  d["paths"] = io::Json::object();
  for (const auto& p : fig.paths) {
    io::Json& pj = d["paths"][p.path];
    pj["ablation_variant"] = p.ablation_variant;
    pj["assets"] = io::Json::object();
    for (size_t i = 0; i < r.assets.size(); ++i)
      pj["assets"][r.assets[i].name] = asset_json(p.assets[i]);
    pj["sets"] = io::Json::object();
    for (const auto& s : p.sets) pj["sets"][s.set] = summary_json(s);
  }
  d["leave_one_out"] = io::Json::object();
  for (const auto& t : fig.leave_one_out) d["leave_one_out"][t.set] = loo_json(t);
  d["service"] = service_json(r, fig.service);
  return j;
}

void write_report_files(const BenchResult& r, const std::string& out_dir, const std::string& stem) {
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  S3D_CHECK(!ec, "bench report: cannot create folder ", out_dir, ": ", ec.message());
  const std::string base = (std::filesystem::path(out_dir) / stem).string();
  // Everything is rendered before the first write, so an error leaves no partial set.
  const std::string json = io::dump_readable(to_json(r)) + "\n";
  const std::string md = to_markdown(r);
  write_text(base + ".json", json);
  write_text(base + ".md", md);
}

}  // namespace s3d::bench
