// Sampler inputs for model-level tests: B assets of the given token counts (voxelised
// surfaces, packed in batch order), Gaussian condition tokens and the asset noise, all from
// the engine's own generators so that every backend and test sees the same data.
#pragma once

#include <cstdint>
#include <vector>

#include "core/rng.h"
#include "core/tensor.h"
#include "payload/generate.h"
#include "sampler/sampler.h"
#include "sparse3d/engine.h"

namespace s3d::testing {

inline sampler::Inputs synthetic_inputs(const std::vector<int64_t>& counts, int cond_tokens,
                                        int cond_channels, int out_channels, uint64_t seed) {
  sampler::Inputs in;
  in.batch = static_cast<int>(counts.size());
  int64_t T = 0;
  for (int64_t n : counts) T += n;
  in.coords = Tensor::empty({T, 4}, DType::I32, Device::CPU);
  int32_t* dst = in.coords.data_as<int32_t>();
  int64_t row = 0;
  for (size_t b = 0; b < counts.size(); ++b) {
    Tensor one = payload::voxelize_surface(static_cast<int>(b), counts[b], 64, seed + b);
    const int32_t* src = one.data_as<int32_t>();
    for (int64_t t = 0; t < counts[b]; ++t) {
      dst[4 * (row + t)] = static_cast<int32_t>(b);
      for (int k = 1; k < 4; ++k) dst[4 * (row + t) + k] = src[4 * t + k];
    }
    row += counts[b];
  }
  std::vector<float> cond(static_cast<size_t>(in.batch) * cond_tokens * cond_channels);
  normal_fill(seed ^ 0x55, 0, cond.size(), cond.data());
  in.cond = Tensor::from_floats(cond, {in.batch, cond_tokens, cond_channels}, DType::BF16);
  in.noise = Tensor::empty({T, out_channels}, DType::F32, Device::CPU);
  normal_fill(seed, 0, static_cast<uint64_t>(in.noise.numel()), in.noise.data_as<float>());
  return in;
}

// A public-API request over `in`'s tensors (they must outlive it): the released sampler
// with `steps` steps, noise drawn from `seed`.
inline sparse3d::SampleRequest sample_request(sampler::Inputs& in, uint64_t seed, int steps) {
  auto view = [](Tensor& t) {
    return sparse3d::TensorView{t.data(), t.dtype(), t.device(), 0, t.shape()};
  };
  sparse3d::SampleRequest r;
  r.coords = view(in.coords);
  r.batch = in.batch;
  r.cond = view(in.cond);
  r.seed = seed;
  r.sampler = sparse3d::SamplerSettings::released();
  r.sampler.steps = steps;
  return r;
}

}  // namespace s3d::testing
