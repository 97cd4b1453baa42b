// The service protocol's tables: the report's headline when a result has first requests.
#include <sstream>

#include "bench/format.h"
#include "bench/report.h"
#include "core/error.h"

namespace s3d::bench {
namespace {

std::string optional_times(const std::optional<double>& v) { return v ? times(*v) : kDash; }

// What the settings say the warm-up request was ("a raster of 2,748 tokens").
std::string warmup_text(const BenchResult& r) {
  if (r.settings.is_object() && r.settings.contains("service_warmup") &&
      r.settings["service_warmup"].is_string())
    return r.settings["service_warmup"].get<std::string>();
  return "one request at a token count outside the asset set";
}

// Per path and asset: "first / median (first/median)".
void first_request_table(std::ostringstream& o, const BenchResult& r, const ServiceFigures& f) {
  o << "## Service protocol: each asset's first request\n\n"
       "What a user of a fresh service waits for. Per engine path: a new engine with an empty "
       "qualification cache, one warm-up request ("
    << md(warmup_text(r))
    << "), then every asset once in this order, timed as the whole call (host wall time, the "
       "device synchronised: qualification, plan builds and graph captures included). "
       "PyTorch: its first call per asset after its own warm-up at the same token count, in "
       "the same order, in the same run. Each cell: first ms / median ms of the warm repeats "
       "(the repeated protocol, same engine, whole call) (first / median).\n\n";
  std::vector<std::string> head = {"asset", "tokens"};
  for (const auto& p : f.paths) head.push_back(md(p.path));
  row(o, head);
  rule(o, 1, head.size() - 1);
  for (size_t i = 0; i < r.assets.size(); ++i) {
    std::vector<std::string> cells = {md(r.assets[i].name), group_digits(r.assets[i].tokens)};
    for (const auto& p : f.paths) {
      const ServiceAsset& a = p.assets[i];
      if (!a.first_s) {
        cells.push_back(kDash);
        continue;
      }
      const std::string median = a.repeat_median_s ? ms(*a.repeat_median_s) : kDash;
      cells.push_back(ms(*a.first_s) + " / " + median + " (" +
                      optional_times(a.first_over_median) + ")");
    }
    row(o, cells);
  }
  std::vector<std::string> worst = {"largest first / median", ""};
  for (const auto& p : f.paths)
    worst.push_back(p.max_first_over_median
                        ? times(*p.max_first_over_median) + " (" +
                              md(p.max_first_over_median_asset) + ")"
                        : kDash);
  row(o, worst);
  o << '\n';
}

// Per baseline: each engine path's speedup in both protocols and their ratio.
void speedup_tables(std::ostringstream& o, const BenchResult& r, const ServiceFigures& f) {
  std::vector<std::string> baselines;
  for (const auto& p : f.paths)
    if (p.baseline) baselines.push_back(p.path);
  for (size_t b = 0; b < baselines.size(); ++b) {
    o << "## Service protocol: speedup over " << md(baselines[b]) << "\n\n"
      << "Per asset: speedup from the first requests (service) / from the repeats' medians "
         "(repeated) (service / repeated). Geomean over the assets with both.\n\n";
    std::vector<std::string> head = {"asset", "tokens"};
    std::vector<const ServiceComparison*> vs;
    for (const auto& p : f.paths)
      for (const auto& v : p.vs)
        if (v.against == baselines[b]) {
          head.push_back(md(p.path));
          vs.push_back(&v);
        }
    row(o, head);
    rule(o, 1, head.size() - 1);
    for (size_t i = 0; i < r.assets.size(); ++i) {
      std::vector<std::string> cells = {md(r.assets[i].name), group_digits(r.assets[i].tokens)};
      for (const auto* v : vs)
        cells.push_back(optional_times(v->service[i]) + " / " + optional_times(v->repeated[i]) +
                        " (" + (v->ratio[i] ? fixed(*v->ratio[i], 3) : std::string(kDash)) + ")");
      row(o, cells);
    }
    std::vector<std::string> geo = {"geomean", ""}, low = {"smallest service / repeated", ""};
    for (const auto* v : vs) {
      geo.push_back(optional_times(v->geomean_service) + " / " +
                    optional_times(v->geomean_repeated) + " (" + std::to_string(v->n) + " assets)");
      low.push_back(v->min_ratio ? fixed(*v->min_ratio, 3) + " (" + md(v->min_ratio_asset) + ")"
                                 : kDash);
    }
    row(o, geo);
    row(o, low);
    o << '\n';
  }
}

// Where an engine path's first requests spent their time, and what its counters saw.
void first_request_split_table(std::ostringstream& o, const BenchResult& r,
                               const ServiceFigures& f) {
  std::vector<const ServicePath*> engine;
  for (const auto& p : f.paths)
    if (!p.baseline) engine.push_back(&p);
  bool any = false;
  for (const auto& c : r.cells) any |= c.first_request_counters.has_value();
  if (engine.empty() || !any) return;
  o << "## Service protocol: inside the first requests\n\n"
       "Per engine path and asset: ms of the first request outside the sampler's clock "
       "(qualification, plan builds and checks before the set-up) / in its set-up / in its "
       "loop; then null-context qualifications computed, restored from the cache, and "
       "fallbacks counted during that request.\n\n";
  std::vector<std::string> head = {"asset", "tokens"};
  for (const auto* p : engine) head.push_back(md(p->path));
  row(o, head);
  rule(o, 1, head.size() - 1);
  for (const auto& a : r.assets) {
    std::vector<std::string> cells = {md(a.name), group_digits(a.tokens)};
    for (const auto* p : engine) {
      const Cell* c = nullptr;
      for (const auto& x : r.cells)
        if (x.path == p->path && x.asset == a.name) c = &x;
      if (!c || !c->first_request_seconds) {
        cells.push_back(kDash);
        continue;
      }
      const double outside = *c->first_request_seconds - c->first_request_setup_seconds -
                             c->first_request_loop_seconds;
      std::string text = ms(outside) + " / " + ms(c->first_request_setup_seconds) + " / " +
                         ms(c->first_request_loop_seconds);
      if (const auto& k = c->first_request_counters)
        text += cat("; ", k->qualifications_run, " qualified, ", k->qualification_cache_hits,
                    " from cache, ", k->fallbacks, " fallbacks");
      cells.push_back(text);
    }
    row(o, cells);
  }
  o << '\n';
}

}  // namespace

std::string service_markdown(const BenchResult& r, const ServiceFigures& f) {
  if (f.paths.empty()) return "";
  std::ostringstream o;
  first_request_table(o, r, f);
  speedup_tables(o, r, f);
  first_request_split_table(o, r, f);
  return o.str();
}

}  // namespace s3d::bench
