// The parameter list of an SLatFlowModel: every tensor's checkpoint name, shape, run-time
// dtype and synthetic initialisation, derived from the config alone. The loader checks a
// checkpoint against it, make-checkpoint writes it, the model binds to it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "model/config.h"

namespace s3d::model {

// How make-checkpoint fills a tensor: value = mean + std * N(0, 1).
struct Init {
  float mean = 0.0f;
  float std = 0.0f;
};

struct ParamSpec {
  std::string name;
  Shape shape;
  DType runtime_dtype;  // bf16 for the Linear layers inside blocks, f32 for everything else
  Init init;
};

std::vector<ParamSpec> param_specs(const ModelConfig& config);
int64_t parameter_count(const ModelConfig& config);

}  // namespace s3d::model
