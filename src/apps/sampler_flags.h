// Sampler flags shared by `run`, `bench` and `profile`, registered once.
#pragma once

#include <CLI/CLI.hpp>

#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "sparse3d/engine.h"

namespace s3d::apps {

struct SamplerFlags {
  explicit SamplerFlags(std::string default_preset) : preset(std::move(default_preset)) {}
  // "released" (TRELLIS.2's shape-model settings), "released_sparse_structure" (TRELLIS.2's
  // sparse-structure stage) or "protocol" (bench's default); empty (run's default): the
  // model family's own (ModelInfo::sampler_preset), given to resolve().
  std::string preset;
  int steps = 0;
  double rescale_t = 0, cfg = 0, rescale = 0;
  std::vector<double> interval;
  // The options, to tell a value given from one left out: a given value is used as given
  // (no value is a sentinel meaning "absent"), then checked.
  CLI::Option *steps_given = nullptr, *rescale_t_given = nullptr, *cfg_given = nullptr,
              *rescale_given = nullptr;

  void add_to(CLI::App* sub);
  // The preset with every given override applied; throws Error naming a value out of range
  // (--steps -1, --cfg nan), before anything is loaded.
  // model_preset: the preset when none was given (the loaded model's family's).
  sparse3d::SamplerSettings resolve(const std::string& model_preset = "released") const;
};

// "a, b, c": every execution path, every optimization flag (for --help texts).
std::string path_names();
std::string flag_names();

}  // namespace s3d::apps
