// The operands of one trunk forward for the sequence-parallel tests (tests/parallel/ and
// tests/gpu/test_sequence_parallel_gpu.cpp): B assets of the given token counts, L condition
// tokens, the first B - null_assets with real condition tokens, on `device`.
#pragma once

#include <cstdint>
#include <vector>

#include "../model_inputs.h"
#include "model/trunk/transformer.h"
#include "sparse3d/flags.h"

namespace s3d::testing {

struct ForwardCase {
  model::Request req;
  Tensor x, t1000, cond;
};

inline ForwardCase forward_case(const model::Transformer& m, const std::vector<int64_t>& counts,
                                int L, int null_assets, const sparse3d::FlagSet& flags,
                                uint64_t seed, Device device) {
  const model::ModelConfig& c = m.config();
  auto in = synthetic_inputs(counts, L, c.cond_channels, c.out_channels, seed);
  ForwardCase k;
  k.req = m.prepare(in.coords, in.batch, L, Tensor(), null_assets);
  k.req.use_flags(flags);
  k.x = in.noise.to(device);
  std::vector<float> t(counts.size());
  for (size_t b = 0; b < t.size(); ++b) t[b] = 1000.0f * (0.3f + 0.1f * static_cast<float>(b));
  k.t1000 = Tensor::from_floats(t, {in.batch}, DType::F32).to(device);
  k.cond = in.cond.to(device);
  return k;
}

}  // namespace s3d::testing
