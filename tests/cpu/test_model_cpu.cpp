// The whole model and sampler on the CPU backend with the tiny preset: checkpoint round
// trip, strict key checks, request validation, CFG modes, and what the CPU backend computes
// bit for bit (batching, both CFG modes, chunked MLP, the condition K/V cache). The forward's
// finiteness and repeatability run on both backends in tests/device/test_model.cpp.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "core/rng.h"
#include "io/safetensors.h"
#include "model/checkpoint.h"
#include "model/trunk/transformer.h"
#include "model/trunk/weights.h"
#include "payload/generate.h"
#include "sampler/sampler.h"
#include "../model_inputs.h"
#include "../test_numerics.h"

namespace s3d::model {
namespace {

namespace fs = std::filesystem;

std::string temp_dir(const std::string& name) {
  // ctest runs each test in its own process, in parallel: one folder per process.
  fs::path p = fs::temp_directory_path() /
               ("sparse3d_test_" + name + "_" + std::to_string(getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

using testing::error_of;

struct TinyFixture : ::testing::Test {
  static void SetUpTestSuite() {
    dir = temp_dir("model_cpu");
    make_checkpoint(preset("tiny"), 7, dir + "/tiny", DType::BF16);
  }
  static void TearDownTestSuite() { fs::remove_all(dir); }
  static std::string dir;

  sampler::Inputs inputs(std::vector<int64_t> counts, int cond_tokens, uint64_t seed) {
    return testing::synthetic_inputs(counts, cond_tokens, preset("tiny").cond_channels, 32, seed);
  }
};
std::string TinyFixture::dir;

// The sampler-facing summary is the config's and the family's, and a forward through a
// reference to the model is the model's own.
TEST_F(TinyFixture, TheSummaryIsTheConfigsAndTheFamilys) {
  Transformer m(load_checkpoint(dir + "/tiny.json", Device::CPU));
  const Transformer& d = m;
  const ModelSummary s = d.summary();
  EXPECT_EQ(s.family, "SLatFlowModel");
  EXPECT_EQ(&d.family(), &find_family("SLatFlowModel"));
  EXPECT_FALSE(s.unbiased_rescale_std);
  EXPECT_EQ(s.in_channels, m.config().in_channels);
  EXPECT_EQ(s.out_channels, m.config().out_channels);
  EXPECT_EQ(s.cond_channels, m.config().cond_channels);
  EXPECT_EQ(d.device(), Device::CPU);
  EXPECT_EQ(d.weights_version(), m.weights_version());
  auto in = inputs({19, 6}, 5, 4);
  Tensor t = Tensor::from_floats({900.0f, 300.0f}, {2}, DType::F32);
  Request req = d.prepare(in.coords, 2, 5);
  auto want = m.forward(req, in.noise, t, in.cond).to_floats();
  auto got = d.forward(req, in.noise, t, Condition{in.cond, 0, nullptr}).to_floats();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], want[i]) << i;
  EXPECT_NE(error_of([&] { d.forward(req, in.noise, t, in.cond.reshape({2, 5 * 64})); })
                .find("forward cond"),
            std::string::npos);
}

TEST_F(TinyFixture, AssetsInOneBatchEqualAssetsRunAlone) {
  Transformer m(load_checkpoint(dir + "/tiny.json", Device::CPU));
  auto both = inputs({23, 41}, 9, 5);
  Request req = m.prepare(both.coords, 2, 9);
  Tensor t = Tensor::from_floats({700.0f, 300.0f}, {2}, DType::F32);
  auto v = m.forward(req, both.noise, t, both.cond).to_floats();
  // Asset 1 alone: its rows, batch index 0, its condition and timestep.
  Tensor coords1 = both.coords.rows(23, 64).to(Device::CPU);
  for (int64_t r = 0; r < 41; ++r) coords1.data_as<int32_t>()[4 * r] = 0;
  Tensor cond1 = both.cond.rows(1, 2).to(Device::CPU);
  Request req1 = m.prepare(coords1, 1, 9);
  auto v1 = m.forward(req1, both.noise.rows(23, 64).to(Device::CPU),
                      Tensor::from_floats({300.0f}, {1}, DType::F32), cond1)
                .to_floats();
  for (int64_t i = 0; i < 41 * 32; ++i) ASSERT_EQ(v[23 * 32 + i], v1[i]) << i;
}

TEST_F(TinyFixture, BatchedCfgEqualsSerialCfgOnTheCpu) {
  // The CPU backend computes every row and every asset independently, so both CFG modes
  // give identical bits; on the GPU they differ by GEMM shape (GPU tests bound that).
  Transformer m(load_checkpoint(dir + "/tiny.json", Device::CPU));
  auto in = inputs({31}, 8, 9);
  sampler::SamplerOptions o;
  o.steps = 3;
  o.guidance_rescale = 0.5;
  auto serial = sampler::sample(m, in, o, true);
  o.flags.set(sparse3d::Flag::batched_cfg, true);
  auto batched = sampler::sample(m, in, o, true);
  auto a = serial.latent.to_floats(), b = batched.latent.to_floats();
  for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a[i], b[i]) << i;
  ASSERT_TRUE(serial.first_v_uncond.defined());
  ASSERT_EQ(serial.steps.size(), 3u);
  EXPECT_TRUE(serial.steps[0].cfg);
}

TEST_F(TinyFixture, GuidanceIntervalSkipsTheUnconditionalForward) {
  Transformer m(load_checkpoint(dir + "/tiny.json", Device::CPU));
  auto in = inputs({19}, 5, 11);
  sampler::SamplerOptions o = sampler::SamplerOptions::released();
  o.steps = 4;
  auto out = sampler::sample(m, in, o, true);
  auto ts = sampler::timesteps(4, o.rescale_t);
  for (int k = 0; k < 4; ++k) EXPECT_EQ(out.steps[k].cfg, ts[k] >= 0.6 && ts[k] <= 1.0) << k;
  // g = 1: never an unconditional forward.
  o.guidance = 1.0;
  auto plain = sampler::sample(m, in, o, true);
  EXPECT_FALSE(plain.first_v_uncond.defined());
  for (const auto& s : plain.steps) EXPECT_FALSE(s.cfg);
}

TEST_F(TinyFixture, F32CheckpointLoadsAndAgreesWithBf16) {
  make_checkpoint(preset("tiny"), 7, dir + "/tiny32", DType::F32);
  Transformer m16(load_checkpoint(dir + "/tiny.json", Device::CPU));
  Transformer m32(load_checkpoint(dir + "/tiny32.json", Device::CPU));
  EXPECT_NE(m16.weights_version(), m32.weights_version());
  auto in = inputs({29}, 7, 13);
  Request req = m16.prepare(in.coords, 1, 7);
  Tensor t = Tensor::from_floats({900.0f}, {1}, DType::F32);
  auto a = m16.forward(req, in.noise, t, in.cond).to_floats();
  auto b = m32.forward(req, in.noise, t, in.cond).to_floats();
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (a[i] - b[i]) * double(a[i] - b[i]);
    den += double(b[i]) * b[i];
  }
  EXPECT_LT(std::sqrt(num / den), 2e-2);  // fp32 params rounded to bf16 in one of them
}

TEST_F(TinyFixture, StrictKeysNameEveryProblem) {
  io::SafetensorsFile f = io::SafetensorsFile::open(dir + "/tiny.safetensors");
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const auto& e : f.entries()) {
    if (e.name == "blocks.0.norm2.bias") continue;                          // missing
    Tensor t = f.load(e.name, DType::F32);
    if (e.name == "blocks.1.mlp.mlp.0.bias") t = t.rows(0, 100);             // wrong shape
    tensors.emplace_back(e.name, t);
  }
  tensors.emplace_back("blocks.0.extra.weight", Tensor::zeros({3}, DType::F32, Device::CPU));
  io::write_safetensors(dir + "/broken.safetensors", tensors);
  fs::copy_file(dir + "/tiny.json", dir + "/broken.json", fs::copy_options::overwrite_existing);
  std::string msg = error_of([&] { load_checkpoint(dir + "/broken.json", Device::CPU); });
  EXPECT_NE(msg.find("3 problems"), std::string::npos) << msg;
  EXPECT_NE(msg.find("missing: blocks.0.norm2.bias"), std::string::npos) << msg;
  EXPECT_NE(msg.find("wrong shape: blocks.1.mlp.mlp.0.bias is [100]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("unexpected: blocks.0.extra.weight"), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << "one line: " << msg;
}

// A prefix whose folder cannot be made (a file stands where a folder should be) is an Error
// naming the folder, not a std::filesystem exception, and nothing is written.
TEST_F(TinyFixture, ACheckpointUnderAFileIsAnErrorNamingTheFolder) {
  std::FILE* f = std::fopen((dir + "/plain").c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fclose(f);
  const std::string msg =
      error_of([&] { make_checkpoint(preset("tiny"), 7, dir + "/plain/sub/ck", DType::BF16); });
  EXPECT_NE(msg.find("cannot create the folder " + dir + "/plain/sub"), std::string::npos) << msg;
  EXPECT_TRUE(fs::is_regular_file(dir + "/plain"));
}

TEST_F(TinyFixture, BadRequestsAreRefusedWithTheirReason) {
  Transformer m(load_checkpoint(dir + "/tiny.json", Device::CPU));
  auto in = inputs({12, 9}, 4, 17);
  // Batch indices out of order.
  Tensor swapped = in.coords.to(Device::CPU);
  swapped.data_as<int32_t>()[0] = 1;
  EXPECT_NE(error_of([&] { m.prepare(swapped, 2, 4); }), "<no error>");
  // A negative coordinate (the resolution is not a bound: ResolutionIsNotABoundOnTheCoordinates).
  Tensor outside = in.coords.to(Device::CPU);
  outside.data_as<int32_t>()[4 * 3 + 2] = -3;
  EXPECT_NE(error_of([&] { m.prepare(outside, 2, 4); }).find("y = -3"), std::string::npos);
  // An asset with no tokens: batch 2 promised, only batch 0 present.
  Tensor first = in.coords.rows(0, 12).to(Device::CPU);
  EXPECT_NE(error_of([&] { m.prepare(first, 2, 4); }), "<no error>");
  // Wrong condition shape at forward time.
  Request req = m.prepare(in.coords, 2, 4);
  Tensor t = Tensor::from_floats({1000.0f, 1000.0f}, {2}, DType::F32);
  Tensor bad_cond = Tensor::zeros({2, 5, 64}, DType::BF16, Device::CPU);
  EXPECT_NE(error_of([&] { m.forward(req, in.noise, t, bad_cond); }).find("cond"),
            std::string::npos);
}

// The released 1024 texture model's config says resolution 32 while the pipeline feeds it the
// 64-grid coordinates of the 1024 shape stage; the original never reads the resolution, so
// neither may the engine bound coordinates by it. Negative or absurd coordinates stay errors.
TEST_F(TinyFixture, ResolutionIsNotABoundOnTheCoordinates) {
  Checkpoint ck = load_checkpoint(dir + "/tiny.json", Device::CPU);
  ck.config.resolution = 32;
  Transformer m(std::move(ck));
  Tensor coords = Tensor::from_ints({0, 0, 0, 0, 0, 40, 63, 2, 0, 63, 63, 63}, {3, 4});
  EXPECT_EQ(m.prepare(coords, 1, 4).tokens, 3);
  Tensor negative = Tensor::from_ints({0, 0, -1, 0}, {1, 4});
  EXPECT_NE(error_of([&] { m.prepare(negative, 1, 4); }).find("y = -1"), std::string::npos);
  Tensor huge = Tensor::from_ints({0, 70000, 0, 0}, {1, 4});
  EXPECT_NE(error_of([&] { m.prepare(huge, 1, 4); }).find("x = 70000"), std::string::npos);
}

TEST_F(TinyFixture, ChunkedMlpIsBitwiseOnTheCpuAtOddChunkSizes) {
  // Every op of the MLP is row-wise and the CPU GEMM sums each row alone, so chunks of any
  // size give the unchunked bits there; on the GPU the GEMMs' M changes (a tolerance flag,
  // bounded by the GPU tests). Chunk sizes that divide nothing, one row, and more than T.
  Transformer m(load_checkpoint(dir + "/tiny.json", Device::CPU));
  auto in = inputs({23, 41}, 9, 5);
  Request req = m.prepare(in.coords, 2, 9);
  Tensor t = Tensor::from_floats({700.0f, 300.0f}, {2}, DType::F32);
  const auto whole = m.forward(req, in.noise, t, in.cond).to_floats();
  req.use_flags(sparse3d::FlagSet{sparse3d::Flag::chunked_mlp});
  for (int64_t chunk : {1, 7, 37, 63, 64, 1000}) {
    req.mlp_chunk_tokens = chunk;
    const auto parts = m.forward(req, in.noise, t, in.cond).to_floats();
    ASSERT_EQ(parts.size(), whole.size());
    for (size_t i = 0; i < whole.size(); ++i) ASSERT_EQ(parts[i], whole[i]) << chunk << " " << i;
  }
  req.mlp_chunk_tokens = 0;
  EXPECT_NE(error_of([&] { m.forward(req, in.noise, t, in.cond); }).find("mlp_chunk_tokens"),
            std::string::npos);
}

TEST_F(TinyFixture, TheConditionKvCacheKeepsVAloneAndStaysBitwise) {
  // With K RMSNorm the cache holds the normalised K and V only ([BL, C] each, not to_kv's
  // [BL, 2C] as well): a third less memory, the same attention inputs.
  Transformer m(load_checkpoint(dir + "/tiny.json", Device::CPU));
  ASSERT_TRUE(m.config().qk_rms_norm_cross) << "the tiny preset exercises the K RMSNorm case";
  auto in = inputs({29}, 11, 3);
  sampler::SamplerOptions o;
  o.steps = 3;
  auto plain = sampler::sample(m, in, o, true);
  o.flags.set(sparse3d::Flag::cond_kv_cache, true);
  auto cached = sampler::sample(m, in, o, true);
  const auto a = plain.latent.to_floats(), b = cached.latent.to_floats();
  for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a[i], b[i]) << i;
  ASSERT_EQ(in.cond.dtype(), DType::BF16);
  const CondKV kv = m.precompute_cond_kv(ops::OpPlan(), in.cond);
  const int64_t C = m.config().model_channels;
  ASSERT_EQ(kv.kv.size(), static_cast<size_t>(m.config().num_blocks));
  EXPECT_EQ(kv.kv[0].shape(), (Shape{11, C}));
  EXPECT_EQ(kv.k_normed[0].numel(), 11 * C);
}

}  // namespace
}  // namespace s3d::model
