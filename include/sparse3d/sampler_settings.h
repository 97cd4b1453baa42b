// sparse3d public API: the sampler's settings (docs/API.md, "Requests").
//
// Part of the vocabulary floor (with types.h, flags.h and messages.h): headers every layer of
// the library may include. The Engine (engine.h) is above them and only its clients see it.
#pragma once

#include <string>
#include <vector>

namespace sparse3d {

// The sampler (TRELLIS.2's FlowEulerGuidanceIntervalSampler). Default: the released
// shape-model settings.
struct SamplerSettings {
  int steps = 12;
  double rescale_t = 3.0;
  double guidance = 7.5;         // g; 1 = no unconditional forward
  double interval_lo = 0.6;      // CFG only for t in [lo, hi]
  double interval_hi = 1.0;
  double guidance_rescale = 0.5;  // rho in [0, 1]
  double sigma_min = 1e-5;

  static SamplerSettings released() { return SamplerSettings{}; }
  // The released pipeline's sparse-structure stage (docs/DENSE_MODEL.md): 12 steps,
  // rescale_t 5, CFG 7.5 on t in [0.6, 1], guidance rescale 0.7.
  static SamplerSettings released_sparse_structure() {
    return SamplerSettings{12, 5.0, 7.5, 0.6, 1.0, 0.7, 1e-5};
  }
  // The most steps a request may take (docs/API.md): far beyond any sampler in use (the
  // released pipeline takes 12), small enough that a schedule and a step list stay small.
  static constexpr int kMaxSteps = 10000;
  // Throws Error naming the first setting out of range (what sample() would refuse).
  void validate() const;
  // The benchmark protocol: 15 steps, CFG 7.5 on every step, no rescale.
  static SamplerSettings protocol() { return SamplerSettings{15, 3.0, 7.5, 0.0, 1.0, 0.0, 1e-5}; }
  // A preset by name: "released", "released_sparse_structure" or "protocol" (a model family's
  // default is ModelInfo::sampler_preset). Throws Error naming the presets otherwise.
  static SamplerSettings preset(const std::string& name);
  static std::vector<std::string> preset_names();
};

}  // namespace sparse3d
