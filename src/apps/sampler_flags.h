// Sampler and execution-plan options shared by `run`, `bench` and `profile`, registered once.
#pragma once

#include <CLI/CLI.hpp>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "sampler/sampler.h"
#include "sparse3d/flags.h"

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

// "a, b, c": every execution path, every optimization flag (for --help texts).
std::string path_names();
std::string flag_names();

// The --path spec, then every --enable, then every --disable, by name through
// sparse3d/flags.h (an unknown path or flag throws naming the known ones).
sparse3d::ExecutionPlan resolve_plan(const std::string& path,
                                     const std::vector<std::string>& enable,
                                     const std::vector<std::string>& disable);

}  // namespace s3d::apps
