#include "bench/figures.h"

#include <algorithm>
#include <map>
#include <set>

#include "core/error.h"

namespace s3d::bench {
namespace {

using CellIndex = std::map<std::pair<std::string, std::string>, const Cell*>;  // (path, asset)

CellIndex index_cells(const BenchResult& r) {
  std::set<std::string> assets;
  for (const auto& a : r.assets)
    S3D_CHECK(assets.insert(a.name).second, "bench result: asset '", a.name, "' listed twice");
  std::set<std::string> paths;
  for (const auto& p : r.paths)
    S3D_CHECK(paths.insert(p).second, "bench result: path '", p, "' listed twice");
  CellIndex cells;
  for (const auto& c : r.cells) {
    S3D_CHECK(assets.count(c.asset), "bench result: cell (", c.path, ", ", c.asset,
              ") names an asset that is not in the manifest");
    S3D_CHECK(cells.emplace(std::make_pair(c.path, c.asset), &c).second,
              "bench result: two cells for (", c.path, ", ", c.asset, ")");
  }
  return cells;
}

AssetFigures asset_figures(const Cell* c, const Peaks& peaks) {
  AssetFigures f;
  if (c == nullptr) return f;
  f.wall = wall_spread(*c);
  if (c->launches > 0) f.launches = c->launches;
  if (c->peak_bytes > 0) f.peak_bytes = c->peak_bytes;
  if (c->attention_seconds > 0) f.attention_s = c->attention_seconds;
  if (c->gemm_seconds > 0) f.gemm_s = c->gemm_seconds;
  f.other_s = other_seconds(*c);
  f.ideal_s = ideal_seconds(*c, peaks);
  f.wall_over_ideal = wall_over_ideal(*c, peaks);
  if (f.wall) {
    auto share = [&](const std::optional<double>& s) {
      return s ? std::optional<double>(*s / f.wall->median) : std::nullopt;
    };
    f.attention_share = share(f.attention_s);
    f.gemm_share = share(f.gemm_s);
    f.other_share = share(f.other_s);
  }
  return f;
}

const PathFigures* find_path(const Figures& fig, const std::string& path) {
  for (const auto& p : fig.paths)
    if (p.path == path) return &p;
  return nullptr;
}

std::optional<double> median_of(const AssetFigures& f) {
  return f.wall ? std::optional<double>(f.wall->median) : std::nullopt;
}

AssetMean mean_over(const std::vector<size_t>& set, const std::vector<AssetFigures>& assets,
                    std::optional<double> (*get)(const AssetFigures&)) {
  AssetMean m;
  m.of = static_cast<int>(set.size());
  double sum = 0;
  for (size_t i : set)
    if (auto v = get(assets[i])) sum += *v, ++m.n;
  if (m.n > 0) m.value = sum / m.n;
  return m;
}

Comparison compare(const std::string& against, const std::vector<size_t>& set,
                   const std::vector<AssetFigures>& path, const std::vector<AssetFigures>& ref) {
  Comparison c{against, std::nullopt, std::nullopt, 0, static_cast<int>(set.size())};
  std::vector<double> t_ref, t_path;
  for (size_t i : set)
    if (path[i].wall && ref[i].wall) {
      t_ref.push_back(ref[i].wall->median);
      t_path.push_back(path[i].wall->median);
    }
  c.n = static_cast<int>(t_ref.size());
  if (c.n > 0) {
    c.macro_reduction = macro_reduction(t_ref, t_path);
    c.geomean_speedup = geomean_speedup(t_ref, t_path);
  }
  return c;
}

SetSummary summarize(const std::string& name, const std::vector<size_t>& set, const PathFigures& p,
                     const Figures& fig) {
  SetSummary s;
  s.set = name;
  for (const auto& against : fig.comparators)
    s.vs.push_back(compare(against, set, p.assets, find_path(fig, against)->assets));
  s.latency_s = mean_over(set, p.assets, median_of);
  s.attention_s = mean_over(set, p.assets, [](const AssetFigures& f) { return f.attention_s; });
  s.gemm_s = mean_over(set, p.assets, [](const AssetFigures& f) { return f.gemm_s; });
  s.other_s = mean_over(set, p.assets, [](const AssetFigures& f) { return f.other_s; });
  s.attention_share =
      mean_over(set, p.assets, [](const AssetFigures& f) { return f.attention_share; });
  s.gemm_share = mean_over(set, p.assets, [](const AssetFigures& f) { return f.gemm_share; });
  s.other_share = mean_over(set, p.assets, [](const AssetFigures& f) { return f.other_share; });
  s.ideal_s = mean_over(set, p.assets, [](const AssetFigures& f) { return f.ideal_s; });
  s.wall_over_ideal =
      mean_over(set, p.assets, [](const AssetFigures& f) { return f.wall_over_ideal; });
  for (size_t i : set) {
    const AssetFigures& f = p.assets[i];
    if (f.peak_bytes) s.peak_bytes = std::max(s.peak_bytes.value_or(0), *f.peak_bytes);
    if (f.launches) {
      s.launches_min = std::min(s.launches_min.value_or(*f.launches), *f.launches);
      s.launches_max = std::max(s.launches_max.value_or(0), *f.launches);
    }
  }
  return s;
}

LooTable loo_table(const std::string& name, const std::vector<size_t>& set, const BenchResult& r,
                   const Figures& fig) {
  LooTable t;
  t.set = name;
  t.reference_path = r.ablation.reference_path;
  const PathFigures* ref = find_path(fig, t.reference_path);
  // The assets of the set the reference timed and the ablation covered (bench
  // --ablate-assets may run the leave-one-out variants on a subset).
  std::vector<const PathFigures*> variant_figs;
  for (const auto& flag : r.ablation.flags) {
    const auto vp = r.ablation.variant_path.find(flag);
    if (vp != r.ablation.variant_path.end())
      if (const PathFigures* v = find_path(fig, vp->second)) variant_figs.push_back(v);
  }
  std::vector<size_t> timed;
  for (size_t i : set) {
    if (!ref || !ref->assets[i].wall) continue;
    bool covered = variant_figs.empty();
    for (const PathFigures* v : variant_figs) covered |= v->assets[i].wall.has_value();
    if (covered) timed.push_back(i);
  }
  t.n_assets = static_cast<int>(timed.size());
  std::vector<int64_t> tokens;
  for (size_t i : timed) {
    tokens.push_back(r.assets[i].tokens);
    if (t.largest_asset.empty() || r.assets[i].tokens > t.largest_tokens)
      t.largest_asset = r.assets[i].name, t.largest_tokens = r.assets[i].tokens;
  }
  for (const auto& flag : r.ablation.flags) {
    LooEntry e;
    e.flag = std::string(sparse3d::name(flag));
    const auto vp = r.ablation.variant_path.find(flag);
    if (vp != r.ablation.variant_path.end()) e.variant_path = vp->second;
    const auto calls = r.ablation.calls_per_iteration.find(flag);
    if (calls != r.ablation.calls_per_iteration.end()) e.calls_per_iteration = calls->second;
    const PathFigures* off = find_path(fig, e.variant_path);
    std::vector<double> t_ref, t_off;
    for (size_t i : timed)
      if (off && off->assets[i].wall) {
        t_ref.push_back(ref->assets[i].wall->median);
        t_off.push_back(off->assets[i].wall->median);
      }
    e.n = static_cast<int>(t_off.size());
    // A row over fewer assets than the others would not compare like with like.
    if (e.n > 0 && e.n == t.n_assets)
      e.row = leave_one_out_row(e.flag, e.calls_per_iteration, t_ref, t_off, tokens);
    t.rows.push_back(e);
  }
  std::stable_sort(t.rows.begin(), t.rows.end(), [](const LooEntry& a, const LooEntry& b) {
    if (a.row.has_value() != b.row.has_value()) return a.row.has_value();
    return a.row && a.row->avg_delta_ms > b.row->avg_delta_ms;
  });
  return t;
}

}  // namespace

Figures derive(const BenchResult& r) {
  const CellIndex cells = index_cells(r);
  Figures fig;
  if (!r.paths.empty()) {
    fig.reference = r.paths[0];
    fig.comparators.push_back(fig.reference);
    if (r.settings.is_object() && r.settings.contains("also_compare"))
      for (const auto& p : r.settings.at("also_compare")) {
        const std::string path = p.get<std::string>();
        S3D_CHECK(std::find(r.paths.begin(), r.paths.end(), path) != r.paths.end(),
                  "bench result: also_compare names '", path, "', which is not a measured path");
        if (path == fig.reference) continue;
        fig.comparators.push_back(path);
        ++fig.path_comparators;
      }
    for (const auto& b : r.baselines)
      if (b.ran && b.name != fig.reference) fig.comparators.push_back(b.name);
  }

  std::vector<std::vector<size_t>> members;  // asset indices per set
  for (size_t i = 0; i < r.assets.size(); ++i) {
    auto it = std::find(fig.sets.begin(), fig.sets.end(), r.assets[i].set);
    if (it == fig.sets.end()) {
      fig.sets.push_back(r.assets[i].set);
      members.emplace_back();
      it = fig.sets.end() - 1;
    }
    members[static_cast<size_t>(it - fig.sets.begin())].push_back(i);
  }

  // The ablation's paths and the baselines get figures even when the runner did not list
  // them as paths, so that their rows and comparisons can be computed.
  std::vector<std::string> paths = r.paths;
  auto add_path = [&](const std::string& p) {
    if (std::find(paths.begin(), paths.end(), p) == paths.end()) paths.push_back(p);
  };
  std::set<std::string> variants;
  if (!r.ablation.flags.empty() && !r.ablation.reference_path.empty())
    add_path(r.ablation.reference_path);
  for (const auto& flag : r.ablation.flags) {
    const auto it = r.ablation.variant_path.find(flag);
    if (it == r.ablation.variant_path.end() || it->second == r.ablation.reference_path) continue;
    variants.insert(it->second);
    add_path(it->second);
  }
  for (size_t i = 1; i < fig.comparators.size(); ++i) add_path(fig.comparators[i]);
  for (const auto& path : paths) {
    PathFigures p;
    p.path = path;
    p.ablation_variant = variants.count(path) > 0;
    for (const auto& a : r.assets) {
      const auto it = cells.find({path, a.name});
      p.assets.push_back(asset_figures(it == cells.end() ? nullptr : it->second, r.peaks));
    }
    fig.paths.push_back(std::move(p));
  }
  for (auto& p : fig.paths)
    for (size_t s = 0; s < fig.sets.size(); ++s)
      p.sets.push_back(summarize(fig.sets[s], members[s], p, fig));
  if (!r.ablation.flags.empty())
    for (size_t s = 0; s < fig.sets.size(); ++s)
      fig.leave_one_out.push_back(loo_table(fig.sets[s], members[s], r, fig));
  fig.service = derive_service(r, paths, {variants.begin(), variants.end()});
  return fig;
}

}  // namespace s3d::bench
