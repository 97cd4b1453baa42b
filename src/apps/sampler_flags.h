// Sampler flags shared by `run`, `bench` and `profile`, registered once.
#pragma once

#include <CLI/CLI.hpp>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "sparse3d/engine.h"

namespace s3d::apps {

struct SamplerFlags {
  // "released" (run's default: TRELLIS.2's shape-model settings) or "protocol" (bench's).
  std::string preset = "released";
  int steps = -1;
  double rescale_t = NAN, cfg = NAN, rescale = NAN;
  std::vector<double> interval;

  void add_to(CLI::App* sub);
  // The preset with every given override applied.
  sparse3d::SamplerSettings resolve() const;
};

// "a, b, c": every execution path, every optimization flag (for --help texts).
std::string path_names();
std::string flag_names();

}  // namespace s3d::apps
