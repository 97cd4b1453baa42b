#include "apps/sampler_flags.h"

#include "apps/commands.h"
#include "core/error.h"

namespace s3d::apps {

namespace {

// --sampler's check: a preset's name (SamplerSettings::preset_names), with the retired
// spelling named as such.
std::string check_preset(const std::string& value) {
  for (const std::string& p : sparse3d::SamplerSettings::preset_names())
    if (value == p) return "";
  if (value == "released-ss")
    return "'released-ss' is now spelt 'released_sparse_structure' (as in the C++ and Python "
           "APIs)";
  return "'" + value + "' is not a sampler preset (released, released_sparse_structure, protocol)";
}

}  // namespace

void SamplerFlags::add_to(CLI::App* sub) {
  CLI::Option* o =
      sub->add_option("--sampler", preset,
                      "released (12 steps, CFG 7.5 on t in [0.6, 1], rescale 0.5: TRELLIS.2's "
                      "shape-model settings), released_sparse_structure (TRELLIS.2's "
                      "sparse-structure stage: 12 steps, rescale_t 5, CFG 7.5 on t in [0.6, 1], "
                      "rescale 0.7) or protocol (the benchmark: 15 steps, CFG 7.5 on every "
                      "step)" + std::string(preset.empty() ? "; default: the model family's "
                                                             "(released or "
                                                             "released_sparse_structure)"
                                                           : ""))
          ->check(CLI::Validator(check_preset, "{released,released_sparse_structure,protocol}",
                                 "sampler preset"));
  if (!preset.empty()) o->capture_default_str();
  // Form and range checked here (decimal digits: CLI11 alone reads "010" as 8), so that the
  // help shows the range enforced: SamplerSettings::validate's [1, kMaxSteps].
  steps_given = sub->add_option("--steps", steps, "Euler steps (overrides the sampler preset)")
                    ->transform(integer_in(1, sparse3d::SamplerSettings::kMaxSteps));
  rescale_t_given =
      sub->add_option("--rescale-t", rescale_t, "Timestep rescale r")->check(kNonEmptyValue);
  cfg_given =
      sub->add_option("--cfg", cfg, "Guidance strength g (1 = no CFG)")->check(kNonEmptyValue);
  sub->add_option("--interval", interval, "Guidance interval LO HI")
      ->expected(2)
      ->check(kNonEmptyValue);
  rescale_given = sub->add_option("--guidance-rescale", rescale, "Guidance rescale rho in [0, 1]")
                      ->check(kNonEmptyValue);
}

namespace {
bool given(const CLI::Option* o) { return o != nullptr && o->count() > 0; }
}  // namespace

sparse3d::SamplerSettings SamplerFlags::resolve(const std::string& model_preset) const {
  sparse3d::SamplerSettings o = sparse3d::SamplerSettings::preset(preset.empty() ? model_preset : preset);
  if (given(steps_given)) o.steps = steps;
  if (given(rescale_t_given)) o.rescale_t = rescale_t;
  if (given(cfg_given)) o.guidance = cfg;
  if (given(rescale_given)) o.guidance_rescale = rescale;
  if (interval.size() == 2) {
    o.interval_lo = interval[0];
    o.interval_hi = interval[1];
  }
  // Refused by the option's name before the settings' own checks (docs/API.md): a negative
  // strength, or an interval reaching outside the times [0, 1], is no setting of the
  // original sampler. (Written so
  // that a NaN passes on to validate(), which names it as not finite.)
  if (given(cfg_given))
    S3D_CHECK(!(cfg < 0), "--cfg ", cfg, ": the guidance strength must be >= 0 (1 = no CFG)");
  if (interval.size() == 2)
    for (double end : interval)
      S3D_CHECK(!(end < 0) && !(end > 1), "--interval ", interval[0], " ", interval[1],
                ": the ends of the guidance interval are times in [0, 1] (t runs from 1 to 0)");
  o.validate();
  return o;
}

std::string path_names() {
  std::string s;
  for (const auto& p : sparse3d::execution_paths())
    s += std::string(s.empty() ? "" : ", ") + std::string(p.name);
  return s;
}

std::string flag_names() {
  std::string s;
  for (const auto& f : sparse3d::flag_infos())
    s += std::string(s.empty() ? "" : ", ") + std::string(f.name);
  return s;
}

}  // namespace s3d::apps
