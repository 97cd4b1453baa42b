// Sampler flags shared by `run`, `bench` and `profile`, registered once.
#pragma once

#include <CLI/CLI.hpp>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "sampler/sampler.h"

namespace s3d::apps {

struct SamplerFlags {
  std::string preset = "protocol";
  int steps = -1;
  double rescale_t = NAN, cfg = NAN, rescale = NAN;
  std::vector<double> interval;

  void add_to(CLI::App* sub);
  // The preset with every given override applied, validated.
  sampler::SamplerOptions resolve() const;
};

}  // namespace s3d::apps
