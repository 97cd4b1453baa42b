// to_svg and figure_title: the report's figure, one panel per kind of figure the result
// has (svg.h draws them).
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <set>

#include "bench/figures.h"
#include "bench/format.h"
#include "bench/report.h"
#include "bench/stats.h"
#include "bench/svg.h"

namespace s3d::bench {
namespace {

constexpr const char* kNotRecorded = "not recorded";
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// settings[key] when the result has it (not null).
const io::Json* setting(const BenchResult& r, const char* key) {
  if (!r.settings.is_object()) return nullptr;
  const auto it = r.settings.find(key);
  return it == r.settings.end() || it->is_null() ? nullptr : &*it;
}

// 7.5 -> "7.5", 1 -> "1", 0.6 -> "0.6".
std::string short_number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

std::string parameter_count(double n) {
  if (n >= 1e9) return fixed(n / 1e9, 2) + "B parameters";
  if (n >= 1e6) return fixed(n / 1e6, 1) + "M parameters";
  return group_digits(static_cast<int64_t>(n)) + " parameters";
}

// "shape.json (30 blocks, C 1536, 12 heads), 1.29B parameters".
std::string model_text(const BenchResult& r) {
  const io::Json* checkpoint = setting(r, "checkpoint");
  const io::Json* model = setting(r, "model");
  std::string name = kNotRecorded;
  if (checkpoint && checkpoint->is_string() && !checkpoint->get<std::string>().empty())
    name = std::filesystem::path(checkpoint->get<std::string>()).filename().string();
  std::string out = "model " + name;
  if (model && model->is_object()) {
    auto num = [&](const char* k) {
      return model->contains(k) && (*model)[k].is_number() ? (*model)[k].get<int64_t>() : -1;
    };
    std::string shape;
    if (model->contains("family") && (*model)["family"].is_string())
      shape = (*model)["family"].get<std::string>();
    if (num("num_blocks") > 0 && num("model_channels") > 0 && num("num_heads") > 0)
      shape += (shape.empty() ? "" : ", ") + std::to_string(num("num_blocks")) + " blocks, C " +
               std::to_string(num("model_channels")) + ", " + std::to_string(num("num_heads")) +
               " heads";
    if (!shape.empty()) out += " (" + shape + ")";
  }
  const io::Json* params = setting(r, "model_parameters");
  if (params && params->is_number() && params->get<double>() > 0)
    out += ", " + parameter_count(params->get<double>());
  else if (name == kNotRecorded)
    out = "model not recorded";
  else
    out += ", parameter count not recorded";
  return out;
}

std::string protocol_text(const BenchResult& r) {
  const io::Json* p = setting(r, "protocol");
  if (!p || !p->is_string()) return std::string("protocol ") + kNotRecorded;
  const std::string name = p->get<std::string>();
  if (name == "both") return "service + repeated protocols";
  return name + " protocol";
}

std::string steps_text(const BenchResult& r) {
  const io::Json* s = setting(r, "steps");
  if (!s || !s->is_number()) return std::string("steps ") + kNotRecorded;
  const int64_t n = s->get<int64_t>();
  return std::to_string(n) + (n == 1 ? " step" : " steps");
}

// "CFG 7.5 on t in [0.6, 1], guidance rescale 0.7", "no CFG" (guidance 1).
std::string cfg_text(const BenchResult& r) {
  const io::Json* g = setting(r, "guidance");
  if (!g || !g->is_number()) return std::string("CFG ") + kNotRecorded;
  const double guidance = g->get<double>();
  if (guidance == 1.0) return "no CFG (guidance 1)";
  std::string out = "CFG " + short_number(guidance);
  const io::Json* interval = setting(r, "guidance_interval");
  if (interval && interval->is_array() && interval->size() == 2 && (*interval)[0].is_number() &&
      (*interval)[1].is_number())
    out += " on t in [" + short_number((*interval)[0].get<double>()) + ", " +
           short_number((*interval)[1].get<double>()) + "]";
  else
    out += std::string(" (interval ") + kNotRecorded + ")";
  const io::Json* rescale = setting(r, "guidance_rescale");
  if (rescale && rescale->is_number() && rescale->get<double>() > 0)
    out += ", guidance rescale " + short_number(rescale->get<double>());
  return out;
}

std::string device_text(const BenchResult& r) {
  const io::Json* device = setting(r, "device");
  if (device && device->is_string() && device->get<std::string>() == "cpu") return "CPU backend";
  const io::Json& f = r.fingerprint;
  if (f.is_object() && f.contains("gpu_name") && f["gpu_name"].is_string() &&
      !f["gpu_name"].get<std::string>().empty())
    return f["gpu_name"].get<std::string>();
  if (f.is_object() && f.contains("has_gpu") && f["has_gpu"].is_boolean() &&
      !f["has_gpu"].get<bool>())
    return "no GPU";
  return std::string("GPU ") + kNotRecorded;
}

std::string date_text(const BenchResult& r) {
  return r.date.empty() ? std::string("date ") + kNotRecorded : r.date.substr(0, 10);
}

// ---- Panels ------------------------------------------------------------------------------

// One value per asset of the result for one series; nullopt: not measured.
struct AssetSeries {
  std::string name;
  std::vector<std::optional<double>> values;
  int colour = -1;
};

// A line chart over active tokens when the assets with data have at least three distinct
// token counts, else a bar chart with one group per such asset ("a00 (3,664 tokens)").
Panel asset_panel(const BenchResult& r, Panel p, const std::vector<AssetSeries>& series) {
  std::vector<size_t> with_data;
  std::set<int64_t> tokens;
  for (size_t a = 0; a < r.assets.size(); ++a) {
    bool any = false;
    for (const auto& s : series) any |= s.values[a].has_value();
    if (any) with_data.push_back(a), tokens.insert(r.assets[a].tokens);
  }
  const bool lines = tokens.size() >= 3;
  if (!lines)
    for (size_t a : with_data)
      p.categories.push_back(r.assets[a].name + " (" + group_digits(r.assets[a].tokens) +
                             " tokens)");
  for (const auto& s : series) {
    Series out{s.name, {}, s.colour};
    for (size_t k = 0; k < with_data.size(); ++k)
      if (const auto& v = s.values[with_data[k]])
        out.points.emplace_back(lines ? static_cast<double>(r.assets[with_data[k]].tokens)
                                      : static_cast<double>(k),
                                *v);
    p.series.push_back(std::move(out));
  }
  if (lines) {
    p.x_label = "active tokens";
    p.x_unit = "tokens";
  }
  return p;
}

bool any_value(const AssetSeries& s) {
  return std::any_of(s.values.begin(), s.values.end(), [](const auto& v) { return v.has_value(); });
}

// Each shown path's colour, in the order of the figures' paths, so that a path keeps it in
// every panel.
std::map<std::string, int> colours_of(const Figures& fig) {
  std::map<std::string, int> c;
  for (const auto& p : fig.paths)
    if (!p.ablation_variant) c.emplace(p.path, static_cast<int>(c.size()));
  return c;
}

Panel latency_panel(const BenchResult& r, const Figures& fig,
                    const std::map<std::string, int>& colour) {
  Panel p;
  p.heading = "Latency per request: median of the timed repeats";
  p.y_label = "request latency (s)";
  p.unit = "s";
  p.decimals = 3;
  std::vector<AssetSeries> series;
  for (const auto& path : fig.paths) {
    if (path.ablation_variant) continue;
    AssetSeries s{path.path, {}, colour.at(path.path)};
    for (const auto& a : path.assets)
      s.values.push_back(a.wall ? std::optional<double>(a.wall->median) : std::nullopt);
    series.push_back(std::move(s));
  }
  return asset_panel(r, p, series);
}

std::optional<Panel> service_panel(const BenchResult& r, const Figures& fig,
                                   const std::map<std::string, int>& colour) {
  if (fig.service.paths.empty()) return std::nullopt;
  Panel p;
  p.heading = "First request on a fresh engine, whole call (service protocol)";
  p.y_label = "first request (s)";
  p.unit = "s";
  p.decimals = 3;
  std::vector<AssetSeries> series;
  for (const auto& sp : fig.service.paths) {
    const auto c = colour.find(sp.path);
    AssetSeries s{sp.path, {}, c == colour.end() ? -1 : c->second};
    for (const auto& a : sp.assets) s.values.push_back(a.first_s);
    series.push_back(std::move(s));
  }
  if (const io::Json* w = setting(r, "service_warmup"); w && w->is_string())
    p.notes.push_back("Before it, one warm-up request per engine: " + w->get<std::string>() + ".");
  return asset_panel(r, p, series);
}

// Peak device memory in use per path and asset; a note says when the PyTorch baseline's
// own peak is not in the result.
std::optional<Panel> memory_panel(const BenchResult& r, const Figures& fig,
                                  const std::map<std::string, int>& colour) {
  std::vector<AssetSeries> series;
  for (const auto& path : fig.paths) {
    if (path.ablation_variant) continue;
    AssetSeries s{path.path, {}, colour.at(path.path)};
    for (const auto& a : path.assets)
      s.values.push_back(a.peak_bytes
                             ? std::optional<double>(static_cast<double>(*a.peak_bytes) / kGiB)
                             : std::nullopt);
    if (any_value(s)) series.push_back(std::move(s));
  }
  if (series.empty()) return std::nullopt;
  Panel p;
  p.heading = "Peak device memory in use per request";
  p.y_label = "peak memory in use (GiB)";
  p.unit = "GiB";
  p.decimals = 2;
  std::vector<std::string> ran, without;
  for (const auto& b : r.baselines) {
    if (!b.ran) continue;
    ran.push_back(b.name);
    const bool has = std::any_of(series.begin(), series.end(),
                                 [&](const AssetSeries& s) { return s.name == b.name; });
    if (!has) without.push_back(b.name);
  }
  if (ran.empty())
    p.notes.push_back("No PyTorch baseline in this result: engine paths only.");
  else if (!without.empty()) {
    std::string names;
    for (const auto& n : without) names += (names.empty() ? "" : ", ") + n;
    p.notes.push_back("No peak memory recorded for " + names + ".");
  }
  p.notes.push_back(
      "Engine: the allocator's peak during the instrumented loop; PyTorch: "
      "torch.cuda.max_memory_allocated.");
  return asset_panel(r, p, series);
}

// Throughput of K copies in one request against K = 1 (the regular cell), per path and
// asset.
std::optional<Panel> throughput_panel(const BenchResult& r, const Figures& fig) {
  if (r.throughput.empty()) return std::nullopt;
  auto median_of = [](const std::vector<double>& seconds) -> std::optional<double> {
    Cell c;
    c.loop_seconds = seconds;
    const auto s = wall_spread(c);
    return s ? std::optional<double>(s->median) : std::nullopt;
  };
  std::vector<Series> series;
  std::set<double> ks;
  for (size_t a = 0; a < r.assets.size(); ++a)
    for (const auto& path : fig.paths) {
      std::vector<const ThroughputCell*> cells;
      for (const auto& t : r.throughput)
        if (t.asset == r.assets[a].name && t.path == path.path) cells.push_back(&t);
      if (cells.empty() || !path.assets[a].wall) continue;
      const double single = 1.0 / path.assets[a].wall->median;  // assets per second at K = 1
      Series s{path.path + ", " + r.assets[a].name, {{1.0, 1.0}}, -1};
      ks.insert(1.0);
      for (const auto* t : cells)
        if (const auto m = median_of(t->loop_seconds)) {
          s.points.emplace_back(static_cast<double>(t->batch), t->batch / *m / single);
          ks.insert(static_cast<double>(t->batch));
        }
      series.push_back(std::move(s));
    }
  if (series.empty()) return std::nullopt;
  Panel p;
  p.heading = "Multi-asset batching: throughput of K copies in one request vs K = 1";
  p.y_label = "throughput vs K = 1 (x)";
  p.unit = "x";
  p.decimals = 2;
  p.x_unit = "copies";
  if (ks.size() >= 3) {
    p.x_label = "K (copies of the asset per request)";
  } else {
    const std::vector<double> order(ks.begin(), ks.end());
    for (double k : order) p.categories.push_back("K = " + group_digits(std::llround(k)));
    for (auto& s : series)
      for (auto& [x, y] : s.points)
        x = static_cast<double>(std::find(order.begin(), order.end(), x) - order.begin());
  }
  p.series = std::move(series);
  return p;
}

// Leave-one-out: per flag, the mean change in latency with the flag off, one bar per asset
// set; flags in the first table's order (largest effect first).
std::optional<Panel> leave_one_out_panel(const Figures& fig) {
  if (fig.leave_one_out.empty()) return std::nullopt;
  std::vector<std::string> flags;
  for (const auto& t : fig.leave_one_out)
    for (const auto& e : t.rows)
      if (e.row && std::find(flags.begin(), flags.end(), e.flag) == flags.end())
        flags.push_back(e.flag);
  std::vector<std::string> no_data;
  for (const auto& e : fig.leave_one_out.front().rows)
    if (std::find(flags.begin(), flags.end(), e.flag) == flags.end()) no_data.push_back(e.flag);
  Panel p;
  p.heading = "Leave-one-out from " + fig.leave_one_out.front().reference_path +
              ": mean change in latency with one flag off (positive: the flag helps)";
  p.y_label = "mean latency change with the flag off (%)";
  p.unit = "%";
  p.decimals = 2;
  p.categories = flags;
  for (const auto& t : fig.leave_one_out) {
    Series s{t.set + " (" + std::to_string(t.n_assets) + (t.n_assets == 1 ? " asset)" : " assets)"),
             {}, -1};
    for (const auto& e : t.rows)
      if (e.row) {
        const auto at = std::find(flags.begin(), flags.end(), e.flag) - flags.begin();
        s.points.emplace_back(static_cast<double>(at), e.row->avg_delta_pct);
      }
    p.series.push_back(std::move(s));
  }
  if (!no_data.empty()) {
    std::string names;
    for (const auto& n : no_data) names += (names.empty() ? "" : ", ") + n;
    p.notes.push_back("Not shown (its variant did not time every asset the reference did): " +
                      names + ".");
  }
  return p;
}

}  // namespace

std::vector<std::string> figure_title(const BenchResult& r) {
  return {"sparse3d bench: " + model_text(r),
          protocol_text(r) + ", " + steps_text(r) + ", " + cfg_text(r) + ", " + device_text(r) +
              ", " + date_text(r)};
}

std::string to_svg(const BenchResult& r) {
  const Figures fig = derive(r);
  const std::map<std::string, int> colour = colours_of(fig);
  std::vector<Panel> panels;
  if (auto p = service_panel(r, fig, colour)) panels.push_back(std::move(*p));
  panels.push_back(latency_panel(r, fig, colour));
  if (auto p = memory_panel(r, fig, colour)) panels.push_back(std::move(*p));
  if (auto p = throughput_panel(r, fig)) panels.push_back(std::move(*p));
  if (auto p = leave_one_out_panel(fig)) panels.push_back(std::move(*p));
  return figure_svg(figure_title(r), panels);
}

}  // namespace s3d::bench
