// The `fast` and `low_memory` paths through the public Engine on the GPU: their final latent
// against pure_eager's (the epilogue path's tolerance, docs/CONTRACTS.md), the chunked MLP
// against the whole one per forward, and the memory limit that drops the costly flags.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <iostream>

#include "core/cuda_util.h"
#include "model/checkpoint.h"
#include "model/trunk/transformer.h"
#include "sparse3d/sparse3d.h"
#include "../model_inputs.h"
#include "../test_numerics.h"

namespace {

namespace fs = std::filesystem;
using sparse3d::DType;
using sparse3d::Device;

std::vector<float> floats_of(const sparse3d::Array& a) {
  std::vector<float> out(a.view.nbytes() / sizeof(float));
  const auto kind = a.view.device == Device::CUDA ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost;
  EXPECT_EQ(cudaMemcpy(out.data(), a.view.data, a.view.nbytes(), kind), cudaSuccess);
  return out;
}

struct FastPathGpu : ::testing::Test {
  void SetUp() override {
    if (!s3d::cuda_available()) GTEST_SKIP() << "no CUDA device";
    dir = (fs::temp_directory_path() / ("sparse3d_fast_gpu_" + std::to_string(getpid()))).string();
    fs::create_directories(dir);
  }
  void TearDown() override { fs::remove_all(dir); }
  sparse3d::EngineOptions options(const std::string& path, double limit_gib = 0) const {
    sparse3d::EngineOptions o;
    o.device = sparse3d::DeviceChoice::CUDA;
    o.path = path;
    o.cache_dir = dir + "/cache";
    o.max_device_memory_gib = limit_gib;
    return o;
  }
  // The request over host inputs (the engine uploads them), protocol sampler, `steps` steps.
  static sparse3d::SampleRequest request(s3d::sampler::Inputs& in, int steps) {
    auto view = [](s3d::Tensor& t) {
      return sparse3d::TensorView{t.data(), t.dtype(), t.device(), 0, t.shape()};
    };
    sparse3d::SampleRequest r;
    r.coords = view(in.coords);
    r.batch = in.batch;
    r.cond = view(in.cond);
    r.noise = view(in.noise);
    r.sampler = sparse3d::SamplerSettings::protocol();
    r.sampler.steps = steps;
    return r;
  }
  std::string dir;
};

// Tiny preset at odd token counts, and two full-width blocks at 9,001 tokens (more than one
// MLP chunk of 8,192 rows: the low_memory path chunks there).
TEST_F(FastPathGpu, FinalLatentWithinTheEpilogueToleranceOfPureEager) {
  struct Case {
    std::string name;
    s3d::model::ModelConfig config;
    std::vector<int64_t> tokens;
    int cond_tokens;
  };
  s3d::model::ModelConfig full = s3d::model::preset("trellis2-shape-1024");
  full.num_blocks = 2;
  for (const Case& c : {Case{"tiny", s3d::model::preset("tiny"), {333, 7, 1}, 13},
                        Case{"full2", full, {9001}, 4101}}) {
    s3d::model::make_checkpoint(c.config, 17, dir + "/" + c.name, DType::BF16);
    auto in = s3d::testing::synthetic_inputs(c.tokens, c.cond_tokens, c.config.cond_channels,
                                             c.config.out_channels, 71);
    std::vector<float> ref;
    for (const std::string path : {"pure_eager", "fast", "low_memory"}) {
      sparse3d::Engine e(dir + "/" + c.name + ".json", options(path));
      const sparse3d::SampleResult res = e.sample(request(in, 4));
      const std::vector<float> lat = floats_of(res.latent);
      if (path == "pure_eager") {
        ref = lat;
        continue;
      }
      const s3d::testing::ErrorStats err = s3d::testing::compare(lat, ref);
      std::cout << "[ fast path ] " << c.name << " " << path << " vs pure_eager: latent rel L2 "
                << err.rel_l2 << ", max abs " << err.max_abs << ", peak in use "
                << res.stats.peak_device_bytes << " B, reserved "
                << res.stats.peak_device_reserved_bytes << " B\n";
      EXPECT_EQ(err.non_finite, 0) << c.name << " " << path;
      EXPECT_LE(err.rel_l2, 2e-2) << c.name << " " << path;
      EXPECT_GE(res.stats.peak_device_reserved_bytes, res.stats.peak_device_bytes);
      for (const auto& f : e.counters().fallbacks)
        ADD_FAILURE() << c.name << " " << path << ": fallback " << f.optimization << ": "
                      << f.reason;
    }
  }
}

// Per forward at full width: the chunked MLP (odd chunks, the last one short) against the
// whole MLP, on the same GPU.
TEST_F(FastPathGpu, ChunkedMlpStaysWithinItsToleranceOfTheWholeMlp) {
  s3d::model::ModelConfig full = s3d::model::preset("trellis2-shape-1024");
  full.num_blocks = 2;
  s3d::model::make_checkpoint(full, 19, dir + "/full2", DType::BF16);
  s3d::model::Transformer m(s3d::model::load_checkpoint(dir + "/full2.json", s3d::Device::CUDA));
  auto in = s3d::testing::synthetic_inputs({1001, 2222}, 77, full.cond_channels,
                                           full.out_channels, 73);
  s3d::model::Request req = m.prepare(in.coords, 2, 77);
  const s3d::Tensor x = in.noise.to(s3d::Device::CUDA);
  const s3d::Tensor t =
      s3d::Tensor::from_floats({640.0f, 210.0f}, {2}, DType::F32).to(s3d::Device::CUDA);
  const s3d::Tensor cond = in.cond.to(s3d::Device::CUDA);
  req.use_flags(sparse3d::ExecutionPlan::parse("kernel_fusion").flags());
  const std::vector<float> whole = m.forward(req, x, t, cond).to_floats();
  req.use_flags(sparse3d::ExecutionPlan::parse("kernel_fusion+chunked_mlp").flags());
  for (int64_t chunk : {37, 1024, 3000}) {
    req.mlp_chunk_tokens = chunk;
    const std::vector<float> parts = m.forward(req, x, t, cond).to_floats();
    const s3d::testing::ErrorStats err = s3d::testing::compare(parts, whole);
    std::cout << "[ chunked  ] chunk " << chunk << ": forward rel L2 " << err.rel_l2
              << ", max abs " << err.max_abs << "\n";
    EXPECT_EQ(err.non_finite, 0);
    EXPECT_LE(err.rel_l2, 1e-2) << chunk;
  }
}

// A request that does not fit under the limit even without cond_kv_cache and batched_cfg is
// refused before anything runs, and counts no fallback (the ladder itself, drops counted in
// order when the request then fits, is checked on the CPU backend, whose limit is exact:
// RequestValidation.AMemoryLimitDropsTheCostlyFlagsInOrderBeforeRefusing).
TEST_F(FastPathGpu, AMemoryLimitRefusesBeforeAnythingRuns) {
  s3d::model::make_checkpoint(s3d::model::preset("tiny"), 5, dir + "/tiny", DType::BF16);
  auto in = s3d::testing::synthetic_inputs({333}, 13, 64, 32, 3);
  {
    sparse3d::Engine e(dir + "/tiny.json", options("beyond"));
    e.sample(request(in, 2));
    EXPECT_TRUE(e.counters().fallbacks.empty());
  }
  sparse3d::Engine e(dir + "/tiny.json", options("beyond", 1e-3));
  std::string error;
  try {
    e.sample(request(in, 2));
  } catch (const sparse3d::Error& err) {
    error = err.what();
  }
  EXPECT_NE(error.find("nothing was run"), std::string::npos) << error;
  EXPECT_TRUE(e.counters().fallbacks.empty()) << "fallbacks: " << e.counters().fallbacks.size();
  EXPECT_EQ(e.counters().requests, 0u);
}

}  // namespace
