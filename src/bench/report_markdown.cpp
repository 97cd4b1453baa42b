// to_markdown: the report a reader takes in, in the article's formats (sections 4.3, 6.1).
#include <algorithm>
#include <functional>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "bench/figures.h"
#include "bench/format.h"
#include "bench/report.h"
#include "bench/result_io.h"
#include "bench/stats.h"
#include "core/error.h"

namespace s3d::bench {
namespace {

// The article's signed deltas: "+93.3", "-1.3".
std::string signed_fixed(double v, int decimals) {
  std::string s = fixed(v, decimals);
  return s[0] == '-' || s.find_first_not_of("0.") == std::string::npos ? s : "+" + s;
}
// Marks a figure that only some of the set's assets have.
std::string coverage(int n, int of) { return n < of ? cat(" (", n, "/", of, " assets)") : ""; }
std::string assets(int n) { return cat(n, n == 1 ? " asset" : " assets"); }

std::string mean_text(const AssetMean& m, const std::function<std::string(double)>& format) {
  return m.value ? format(*m.value) + coverage(m.n, m.of) : kDash;
}
// "500.0 (40.0%)": the mean time and the mean per-asset share of the wall time.
std::string split_text(const AssetMean& s, const AssetMean& share) {
  if (!s.value) return kDash;
  return ms(*s.value) + (share.value ? " (" + pct(*share.value, 1) + ")" : "") +
         coverage(s.n, s.of);
}

std::string json_text(const io::Json& v) {
  return v.is_string() ? v.get<std::string>()
                       : v.dump(-1, ' ', false, io::Json::error_handler_t::replace);
}

std::string key_values(const io::Json& obj) {
  if (!obj.is_object()) return obj.is_null() ? kDash : json_text(obj);
  std::string out;
  for (const auto& [k, v] : obj.items()) out += (out.empty() ? "" : ", ") + k + ": " + json_text(v);
  return out.empty() ? kDash : out;
}

void header(std::ostringstream& o, const BenchResult& r, const Figures& fig) {
  o << "# sparse3d bench, " << (r.date.empty() ? kDash : r.date) << "\n\n";
  if (r.fingerprint.is_object() && r.fingerprint.contains("gpu_name"))
    o << "- GPU: " << json_text(r.fingerprint["gpu_name"]) << "\n";
  o << "- Environment: " << key_values(r.fingerprint) << "\n"
    << "- Settings: " << key_values(r.settings) << "\n"
    << "- Reference path: " << (fig.reference.empty() ? kDash : fig.reference) << "\n\n";
}


void latency_table(std::ostringstream& o, const BenchResult& r,
                   const std::vector<const PathFigures*>& shown) {
  o << "## Denoise latency per asset\n\nms per request (the sampler's set-up + the denoise "
       "loop): median (min-max) over the timed repeats.\n\n";
  std::vector<std::string> head = {"asset", "set", "tokens"};
  for (const auto* p : shown) head.push_back(md(p->path));
  row(o, head);
  rule(o, 2, head.size() - 2);
  for (size_t a = 0; a < r.assets.size(); ++a) {
    std::vector<std::string> cells = {md(r.assets[a].name), md(r.assets[a].set),
                                      group_digits(r.assets[a].tokens)};
    for (const auto* p : shown) {
      const auto& w = p->assets[a].wall;
      cells.push_back(w ? ms(w->median) + " (" + ms(w->min) + "-" + ms(w->max) + ")" : kDash);
    }
    row(o, cells);
  }
  o << '\n';
}

// Per asset and engine path: wall / ideal, and the launches per loop (the paths the
// instrumented loop measured; baselines have neither).
void ideal_table(std::ostringstream& o, const BenchResult& r,
                 const std::vector<const PathFigures*>& shown) {
  std::vector<const PathFigures*> measured;
  for (const auto* p : shown) {
    bool any = false;
    for (const auto& a : p->assets) any |= a.wall_over_ideal.has_value();
    if (any) measured.push_back(p);
  }
  if (measured.empty()) return;
  o << "## Wall / ideal per asset\n\nMedian wall time over the ideal time (attention and GEMM "
       "FLOPs at the measured library peaks; see How measured), and launches per loop.\n\n";
  std::vector<std::string> head = {"asset", "tokens"};
  for (const auto* p : measured) head.push_back(md(p->path));
  row(o, head);
  rule(o, 1, head.size() - 1);
  for (size_t a = 0; a < r.assets.size(); ++a) {
    std::vector<std::string> cells = {md(r.assets[a].name), group_digits(r.assets[a].tokens)};
    for (const auto* p : measured) {
      const auto& f = p->assets[a];
      cells.push_back(
          (f.wall_over_ideal ? times(*f.wall_over_ideal) : kDash) + " / " +
          (f.launches ? group_digits(static_cast<int64_t>(*f.launches)) : kDash));
    }
    row(o, cells);
  }
  o << '\n';
}

// Per asset and path: peak device memory in use and reserved, GiB, from the instrumented
// loop (engine paths) or the baseline's own allocator counters (PyTorch).
void memory_table(std::ostringstream& o, const BenchResult& r,
                  const std::vector<const PathFigures*>& shown) {
  auto cell_of = [&](const std::string& path, const std::string& asset) -> const Cell* {
    for (const auto& c : r.cells)
      if (c.path == path && c.asset == asset && c.peak_bytes > 0) return &c;
    return nullptr;
  };
  std::vector<std::string> paths;
  for (const auto* p : shown)
    for (const auto& a : r.assets)
      if (cell_of(p->path, a.name)) {
        paths.push_back(p->path);
        break;
      }
  if (paths.empty()) return;
  const auto torch = std::find(paths.begin(), paths.end(), "torch_eager");
  o << "## Device memory per asset\n\nPeak GiB in use / reserved / device-wide during one "
       "request: bytes in tensors (the weights included; comparable to "
       "torch.cuda.max_memory_allocated), bytes held from the driver (max_memory_reserved: "
       "cached blocks and CUDA-graph pools included), and device-wide (cudaMemGetInfo read "
       "every 2 ms: the weights plus everything the request made the device hold, library "
       "workspaces included, from nothing cached).";
  if (torch != paths.end())
    o << " A * marks an engine path whose peak in use is above torch_eager's for that asset.";
  o << "\n\n";
  std::vector<std::string> head = {"asset", "tokens"};
  for (const auto& p : paths) head.push_back(md(p));
  row(o, head);
  rule(o, 1, head.size() - 1);
  const auto gib = [](size_t b) { return fixed(static_cast<double>(b) / (1ull << 30), 2); };
  for (const auto& a : r.assets) {
    std::vector<std::string> cells = {md(a.name), group_digits(a.tokens)};
    const Cell* t = torch != paths.end() ? cell_of(*torch, a.name) : nullptr;
    for (const auto& p : paths) {
      const Cell* c = cell_of(p, a.name);
      if (!c) {
        cells.push_back(kDash);
        continue;
      }
      const bool above = t && c != t && c->peak_bytes > t->peak_bytes;
      cells.push_back(gib(c->peak_bytes) + " / " +
                      (c->peak_reserved_bytes ? gib(c->peak_reserved_bytes) : kDash) + " / " +
                      (c->device_peak_bytes ? gib(c->device_peak_bytes) : kDash) +
                      (above ? " *" : ""));
    }
    row(o, cells);
  }
  o << '\n';
}

std::string launches_text(const SetSummary& s) {
  if (!s.launches_min) return kDash;
  const std::string lo = group_digits(static_cast<int64_t>(*s.launches_min));
  return *s.launches_min == *s.launches_max
             ? lo
             : lo + "-" + group_digits(static_cast<int64_t>(*s.launches_max));
}

void summary_table(std::ostringstream& o, const Figures& fig, size_t set, int n_assets,
                   const std::vector<const PathFigures*>& shown) {
  o << "## Summary: " << md(fig.sets[set]) << " set (" << assets(n_assets) << ")\n\n";
  const std::string ref = fig.reference.empty() ? kDash : md(fig.reference);
  std::vector<std::string> head = {"path", "reduction vs " + ref, "speedup vs " + ref};
  for (size_t c = 1; c < fig.comparators.size(); ++c) {
    if (c <= fig.path_comparators) head.push_back("reduction vs " + md(fig.comparators[c]));
    head.push_back("speedup vs " + md(fig.comparators[c]));
  }
  for (const char* h : {"peak GiB", "launches/loop", "attention ms (%)", "GEMM ms (%)",
                        "other ms (%)", "ideal ms", "wall/ideal"})
    head.push_back(h);
  row(o, head);
  rule(o, 1, head.size() - 1);
  for (const auto* p : shown) {
    const SetSummary& s = p->sets[set];
    std::vector<std::string> cells = {md(p->path)};
    if (s.vs.empty()) cells.insert(cells.end(), {kDash, kDash});  // no reference path
    for (size_t c = 0; c < s.vs.size(); ++c) {
      const Comparison& v = s.vs[c];
      if (c <= fig.path_comparators)
        cells.push_back(v.macro_reduction ? pct(*v.macro_reduction, 2) + coverage(v.n, v.of)
                                          : kDash);
      cells.push_back(v.geomean_speedup ? times(*v.geomean_speedup) + coverage(v.n, v.of) : kDash);
    }
    cells.push_back(s.peak_bytes ? fixed(static_cast<double>(*s.peak_bytes) / (1ull << 30), 2)
                                 : kDash);
    cells.push_back(launches_text(s));
    cells.push_back(split_text(s.attention_s, s.attention_share));
    cells.push_back(split_text(s.gemm_s, s.gemm_share));
    cells.push_back(split_text(s.other_s, s.other_share));
    cells.push_back(mean_text(s.ideal_s, ms));
    cells.push_back(mean_text(s.wall_over_ideal, times));
    row(o, cells);
  }
  o << '\n';
}

void loo_table(std::ostringstream& o, const LooTable& t) {
  o << "## Leave-one-out: " << md(t.set) << " set\n\nReference `" << md(t.reference_path)
    << "` with every flag on; each row disables one. Averages over the " << assets(t.n_assets)
    << " the reference timed; largest asset "
    << (t.largest_asset.empty() ? kDash : md(t.largest_asset)) << " ("
    << group_digits(t.largest_tokens) << " tokens). A positive delta means the run "
    << "became slower with the candidate disabled.\n\n";
  row(o, {"Candidate", "Calls/iter", "avg delta ms (%)", "largest-asset delta ms (%)"});
  rule(o, 1, 3);
  for (const auto& e : t.rows) {
    const std::string calls =
        e.calls_per_iteration >= 0 ? group_digits(e.calls_per_iteration) : kDash;
    if (e.row) {
      row(o, {md(e.flag), calls,
              signed_fixed(e.row->avg_delta_ms, 1) + " (" + signed_fixed(e.row->avg_delta_pct, 2) +
                  "%)",
              signed_fixed(e.row->largest_delta_ms, 1) + " (" +
                  signed_fixed(e.row->largest_delta_pct, 2) + "%)"});
    } else {
      const std::string missing = std::string(kDash).append(coverage(e.n, t.n_assets));
      row(o, {md(e.flag), calls, missing, missing});
    }
  }
  o << '\n';
}

// " (of k steps, scaled to the loop's n)" when the instrumented loop was shorter.
std::string instrumented_note(const BenchResult& r) {
  if (!r.settings.is_object() || !r.settings.contains("instrumented_steps") ||
      !r.settings.contains("steps"))
    return "";
  const int k = r.settings["instrumented_steps"].get<int>(), n = r.settings["steps"].get<int>();
  if (k >= n) return "";
  return " (" + std::to_string(k) + " of the " + std::to_string(n) +
         " steps, CFG on each, counts and times scaled by " + std::to_string(n) + "/" +
         std::to_string(k) + ")";
}

// Multi-asset batching: per (asset, path), K = 1 (the regular cell) and each measured K.
void queue_table(std::ostringstream& o, const BenchResult& r) {
  if (r.queue.empty()) return;
  o << "## Serving a queue: independent GPUs or one split engine\n\n"
       "The assets, each once in manifest order, as a queue: P engines of one GPU each (each "
       "takes the next asset when it is free) against one engine split over the same P GPUs "
       "(one asset at a time). Each engine is fresh after one warm-up request. Throughput "
       "favours independent engines when the queue is long; latency per asset favours the "
       "split engine.\n\n";
  const std::vector<std::string> head = {"path", "serving", "assets", "queue s", "assets/hour",
                                         "mean latency s", "largest latency s"};
  row(o, head);
  rule(o, 2, head.size() - 2);
  for (const auto& q : r.queue) {
    double sum = 0, most = 0;
    for (double v : q.latency_seconds) {
      sum += v;
      most = std::max(most, v);
    }
    const double n = static_cast<double>(q.latency_seconds.size());
    row(o, {q.path,
            q.mode == "split" ? cat("1 engine over ", q.devices_per_engine, " GPUs")
                              : cat(q.engines, " engines, 1 GPU each"),
            std::to_string(q.latency_seconds.size()), fixed(q.wall_seconds, 2),
            fixed(n * 3600.0 / q.wall_seconds, 0), fixed(sum / n, 2), fixed(most, 2)});
  }
  o << "\n";
}

void throughput_table(std::ostringstream& o, const BenchResult& r) {
  if (r.throughput.empty()) return;
  o << "## Throughput: multi-asset batching\n\n"
       "K copies of one asset (each with its own noise) packed into one varlen request; all K "
       "finish together, so each asset's latency is the request's time. K = 1 is the asset's "
       "regular cell above.\n\n";
  const std::vector<std::string> head = {"asset", "tokens", "path", "K", "request ms",
                                         "latency per asset ms", "assets/hour",
                                         "throughput vs K = 1", "peak GiB"};
  row(o, head);
  rule(o, 3, head.size() - 3);
  auto spread_of = [](const std::vector<double>& seconds) {
    Cell c;
    c.loop_seconds = seconds;
    return wall_spread(c);
  };
  for (const auto& a : r.assets)
    for (const auto& path : r.paths) {
      std::vector<const ThroughputCell*> ks;
      for (const auto& t : r.throughput)
        if (t.asset == a.name && t.path == path) ks.push_back(&t);
      if (ks.empty()) continue;
      std::optional<double> single;  // assets per second at K = 1
      std::vector<std::pair<int, std::pair<std::vector<double>, size_t>>> rows;
      for (const auto& c : r.cells)
        if (c.asset == a.name && c.path == path && !c.loop_seconds.empty())
          rows.push_back({1, {c.loop_seconds, c.peak_bytes}});
      for (const auto* t : ks) rows.push_back({t->batch, {t->loop_seconds, t->peak_bytes}});
      std::stable_sort(rows.begin(), rows.end(),
                       [](const auto& x, const auto& y) { return x.first < y.first; });
      for (const auto& [k, v] : rows) {
        const auto sp = spread_of(v.first);
        if (!sp) continue;
        const double per_s = k / sp->median;
        if (k == 1) single = per_s;
        row(o, {md(a.name), group_digits(a.tokens), md(path), std::to_string(k),
                ms(sp->median) + " (" + ms(sp->min) + "-" + ms(sp->max) + ")", ms(sp->median),
                fixed(per_s * 3600, 0), single ? times(per_s / *single) : kDash,
                v.second ? fixed(static_cast<double>(v.second) / (1ull << 30), 2) : kDash});
      }
    }
  o << '\n';
}

// The paths a graph path is compared with: its plan without cuda_graphs (as measured, by
// label) and, for the ablation's reference, the leave-one-out variant without graphs.
std::vector<std::string> eager_partners(const BenchResult& r, const std::string& path) {
  using sparse3d::Flag;
  std::vector<std::string> partners = {plan_of_path(path).disable(Flag::cuda_graphs).label()};
  if (r.ablation.reference_path == path)
    if (auto it = r.ablation.variant_path.find(Flag::cuda_graphs);
        it != r.ablation.variant_path.end())
      partners.push_back(it->second);
  return partners;
}

// cuda_graphs: per asset, what capturing cost and what the graphs saved, against the same
// path without graphs measured in the same run (the path minus cuda_graphs, given as a path
// or as the leave-one-out variant), and the per-token-count decision `run --graph-choice`
// makes from this result.
void graph_table(std::ostringstream& o, const BenchResult& r) {
  auto cell_of = [&](const std::string& path, const std::string& asset) -> const Cell* {
    for (const auto& c : r.cells)
      if (c.path == path && c.asset == asset && !c.loop_seconds.empty()) return &c;
    return nullptr;
  };
  // Only paths that captured graphs have a row (baselines never do).
  auto captured = [&](const std::string& path) {
    return std::any_of(r.cells.begin(), r.cells.end(), [&](const Cell& c) {
      return c.path == path && c.graphs_captured > 0;
    });
  };
  bool header_done = false;
  for (const auto& path : r.paths) {
    if (!captured(path)) continue;
    for (const auto& eager_path : eager_partners(r, path)) {
      std::vector<std::vector<std::string>> rows;
      for (const auto& a : r.assets) {
        const Cell* g = cell_of(path, a.name);
        const Cell* e = cell_of(eager_path, a.name);
        if (!g || !e || g->graphs_captured == 0) continue;
        const double tg = wall_spread(*g)->median, te = wall_spread(*e)->median;
        rows.push_back({md(a.name), group_digits(a.tokens), std::to_string(g->graphs_captured),
                        group_digits(static_cast<int64_t>(g->graph_nodes)),
                        fixed(g->graph_capture_seconds * 1e3, 2),
                        group_digits(static_cast<int64_t>(e->launches)) + " -> " +
                            group_digits(static_cast<int64_t>(g->launches)),
                        ms(te), ms(tg), signed_fixed((te - tg) * 1e3, 1),
                        pct(1 - tg / te, 2), tg < te ? "capture" : "eager"});
      }
      if (rows.empty()) continue;
      if (!header_done) {
        o << "## CUDA graphs: capture cost vs time saved\n\n"
             "Per asset: graphs captured per request, their nodes, capture + instantiation "
             "time (paid by every request, inside its time), launches per loop without and "
             "with graphs, the medians of both, and the time saved net of the capture. "
             "Decision: capture where the graphs measured faster; `sparse3d run --graph-choice "
             "<this result's JSON>` makes it per asset, interpolating between these token "
             "counts.\n\n";
        header_done = true;
      }
      o << "`" << md(path) << "` vs `" << md(eager_path) << "`:\n\n";
      const std::vector<std::string> head = {"asset", "tokens", "graphs", "nodes",
                                             "capture ms", "launches/loop", "eager ms",
                                             "graphs ms", "saved ms", "saved", "decision"};
      row(o, head);
      rule(o, 2, head.size() - 2);
      for (const auto& cells : rows) row(o, cells);
      o << '\n';
      break;
    }
  }
}

void how_measured(std::ostringstream& o, const BenchResult& r) {
  auto peak = [](double tflops, const std::string& shape) {
    return tflops > 0 ? fixed(tflops, 1) + " TFLOPS" + (shape.empty() ? "" : " at " + shape)
                      : std::string("not measured");
  };
  o << "## How measured\n\n"
    << "Each latency is the CUDA-synchronised wall time of one whole request after warm-up: "
       "the sampler's set-up (layouts, the condition's upload, and what a path computes once "
       "per request instead of in the loop: condition K/V, step tables) plus the denoise loop "
       "(with any graph capture), over the timed repeats (median, and min-max in parentheses); the order of "
       "assets and paths rotates between repeats so that drift hits every path alike. "
       "Reduction is the equal-weight mean over assets of 1 - t_path / t_ref (positive = "
       "faster), and speedup the geometric mean of the per-asset t_ref / t_path, t being "
       "per-asset medians: not ratios of summed time. Launches, peak memory and the attention/GEMM "
       "split come from "
       "one extra instrumented loop per cell"
    << instrumented_note(r)
    << "; other = median wall - attention - GEMM, clamped "
       "at 0 because the instrumented loop runs slower than the timed ones. Ideal = attention "
       "FLOPs at the measured attention peak ("
    << peak(r.peaks.attention_tflops, r.peaks.attention_shape)
    << ") + GEMM FLOPs at the measured GEMM peak (" << peak(r.peaks.gemm_tflops, r.peaks.gemm_shape)
    << "). Summary figures are equal-weight means over a set's assets (peak memory: the "
       "largest); shares are means of per-asset shares, so they need not equal the ratio of "
       "the mean times. \"(k/N assets)\" marks a figure that only k of the set's N assets "
       "have; \"-\" marks one that was not measured. The leave-one-out configurations appear "
       "only in their tables here; the JSON holds their cells and figures.\n";
}

// The searched cuBLASLt/cuDNN plans (tuned_gemm, tuned_attention): per shape, what the search
// kept against the heuristic's default, or that it came from the qualification cache.
void searched_plans_table(std::ostringstream& o, const BenchResult& r) {
  if (r.searched_plans.empty()) return;
  o << "## Searched plans\n\nPer shape: the library's candidates (timed / offered), the "
       "heuristic's default and the chosen candidate in ms per call, gain = default / best, "
       "the chosen index in the library's list, and whether it was searched in this run or "
       "restored from the qualification cache (its times are then those of the search).\n\n";
  row(o, {"kind", "shape", "candidates", "default ms", "best ms", "gain", "index", "source"});
  o << "|---|---|---:|---:|---:|---:|---:|---|\n";
  for (const auto& p : r.searched_plans)
    row(o, {p.kind, md(p.shape),
            p.source == "cache" ? std::to_string(p.candidates)
                                : cat(p.timed, " / ", p.candidates),
            fixed(p.default_ms, 4), fixed(p.best_ms, 4), times(p.gain()), std::to_string(p.index),
            p.source});
  o << '\n';
}

}  // namespace

std::string to_markdown(const BenchResult& r) {
  const Figures fig = derive(r);
  std::vector<const PathFigures*> shown;
  for (const auto& p : fig.paths)
    if (!p.ablation_variant) shown.push_back(&p);
  std::ostringstream o;
  header(o, r, fig);
  const std::string service = service_markdown(r, fig.service);
  o << service;
  if (!service.empty())
    o << "## Repeated protocol\n\nThe tables below: the warm repeats that followed the "
         "first requests on the same engines (median of the sampler's set-up + loop per "
         "request), as in results before the service protocol.\n\n";
  latency_table(o, r, shown);
  for (size_t s = 0; s < fig.sets.size(); ++s) {
    int n = 0;
    for (const auto& a : r.assets) n += a.set == fig.sets[s];
    summary_table(o, fig, s, n, shown);
  }
  ideal_table(o, r, shown);
  memory_table(o, r, shown);
  for (const auto& t : fig.leave_one_out) loo_table(o, t);
  bool any_missing = false;
  for (const auto& b : r.baselines) any_missing |= !b.ran;
  if (any_missing) {
    o << "## Baselines that did not run\n\n";
    for (const auto& b : r.baselines)
      if (!b.ran)
        o << "- " << b.name << ": " << (b.reason.empty() ? "no reason given" : b.reason) << "\n";
    o << '\n';
  }
  throughput_table(o, r);
  queue_table(o, r);
  graph_table(o, r);
  searched_plans_table(o, r);
  if (!r.null_context.empty())
    o << "## Null-context qualification\n\n```\n" << r.null_context << "```\n\n";
  o << "## Fallbacks\n\n";
  if (r.fallbacks.empty()) o << "None: every requested fast path ran.\n";
  for (const auto& f : r.fallbacks)
    o << "- " << md(f.optimization) << ": " << md(f.reason) << " (" << f.count << "x)\n";
  o << '\n';
  how_measured(o, r);
  return o.str();
}

}  // namespace s3d::bench
