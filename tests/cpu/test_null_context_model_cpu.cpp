// Null-context paths and the condition K/V cache at model level on the CPU backend (tiny
// preset): latents and first-step denoiser outputs bitwise equal to pure_eager, in serial and
// batched CFG, for several assets and the released sampler's interval; the symbolic null
// forward; refused applicability; the K/V cache's size. The CPU backend computes every GEMM
// row on its own, so every M gives the same bits and bitwise equality must hold for every
// path (on the GPU it holds after qualification). Every path on two assets and the forced
// qualification failure run on both backends in tests/device/test_null_context.cpp.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "contract/fallback.h"
#include "model/checkpoint.h"
#include "model/null_context.h"
#include "sampler/sampler.h"
#include "sparse3d/flags.h"
#include "../model_inputs.h"
#include "../null_context_checks.h"
#include "../test_numerics.h"

namespace s3d::model {
namespace {

namespace fs = std::filesystem;

using testing::same_bits;

struct NullModelCpu : ::testing::Test {
  static void SetUpTestSuite() {
    dir = (fs::temp_directory_path() / ("sparse3d_null_model_" + std::to_string(getpid()))).string();
    fs::create_directories(dir);
    make_checkpoint(preset("tiny"), 7, dir + "/tiny", DType::BF16);
  }
  static void TearDownTestSuite() { fs::remove_all(dir); }
  void SetUp() override { contract::reset_fallbacks(); }
  static std::string dir;

  static NullContextOptions options(int L, std::vector<int64_t> tokens) {
    return testing::qualified_options(L, std::move(tokens));
  }

  // Runs `spec` and pure_eager (+ the same CFG mode) and compares everything bitwise.
  static void expect_same_as_pure_eager(const Transformer& m, const sampler::Inputs& in,
                                        const sampler::SamplerOptions& base,
                                        const std::string& spec, const NullContext* nc) {
    auto ref = testing::reference_run(m, in, base, testing::spec_is_batched(spec));
    testing::expect_same_bits_as(ref, m, in, base, spec, nc);
  }
};
std::string NullModelCpu::dir;

TEST_F(NullModelCpu, EveryPathIsBitwisePureEagerThreeAssetsWithAnInterval) {
  // Several assets of different sizes (the conditional part's layouts), and the released
  // sampler: steps outside the guidance interval run the conditional forward alone.
  Transformer m(load_checkpoint(dir + "/tiny.json", Device::CPU));
  auto in = testing::synthetic_inputs({17, 40, 5}, 6, m.config().cond_channels, 32, 5);
  NullContext nc = NullContext::build(m, options(6, {62}));
  sampler::SamplerOptions o = sampler::SamplerOptions::released();
  o.steps = 4;
  testing::expect_every_path_bitwise(m, in, o, nc, "three assets");
  EXPECT_TRUE(contract::fallback_counts().empty());
}

TEST_F(NullModelCpu, SymbolicNullForwardEqualsTheZeroTensorForward) {
  Transformer m(load_checkpoint(dir + "/tiny.json", Device::CPU));
  auto in = testing::synthetic_inputs({23, 30}, 5, m.config().cond_channels, 32, 7);
  NullContext nc = NullContext::build(m, options(5, {53}));
  Request req = m.prepare(in.coords, 2, 5);
  Tensor t = Tensor::from_floats({800.0f, 200.0f}, {2}, DType::F32);
  Tensor zero = Tensor::zeros(in.cond.shape(), DType::BF16, Device::CPU);
  Tensor ref = m.forward(req, in.noise, t, zero);
  for (bool cache : {false, true}) {
    NullPath p = nc.path_for(m, cache, false, 5);
    ASSERT_EQ(p.mode, cache ? NullContextMode::Cache : NullContextMode::Exact);
    Tensor got = m.forward(req, in.noise, t, Condition{Tensor(), 2, nullptr}, &p);
    EXPECT_TRUE(same_bits(ref, got, cache ? "cache" : "exact"));
  }
  // Asset 1 null, asset 0 conditional, in one forward.
  Request half = m.prepare(in.coords, 2, 5, Tensor(), 1);
  Tensor mixed = Tensor::zeros(in.cond.shape(), DType::BF16, Device::CPU);
  mixed.rows(0, 1).copy_from(in.cond.rows(0, 1));
  Tensor want = m.forward(req, in.noise, t, mixed);
  for (bool cache : {false, true}) {
    NullPath p = nc.path_for(m, cache, true, 5);
    Tensor got = m.forward(half, in.noise, t, Condition{in.cond.rows(0, 1), 1, nullptr}, &p);
    EXPECT_TRUE(same_bits(want, got, cache ? "mixed cache" : "mixed exact"));
  }
  // A symbolic null without a null-context path is an error, not a silent zero.
  EXPECT_NE(testing::error_of([&] { m.forward(req, in.noise, t, Condition{Tensor(), 2, nullptr}); })
                .find("symbolic null condition needs a null-context path"),
            std::string::npos);
  EXPECT_NE(testing::error_of([&] {
              NullPath p = nc.path_for(m, false, false, 5);
              m.forward(req, in.noise, t, Condition{in.cond.rows(0, 1), 1, nullptr}, &p);
            }).find("prepared for 0"),
            std::string::npos);
}

TEST_F(NullModelCpu, RefusedApplicabilityRunsTheReferenceCountedAndBitwise) {
  Transformer m(load_checkpoint(dir + "/tiny.json", Device::CPU));
  auto in = testing::synthetic_inputs({30}, 4, m.config().cond_channels, 32, 11);
  NullContextOptions o = options(4, {30});
  o.condition_transform = [](int block, Tensor& kv) {
    if (block == 1) kv.rows(1, 2).copy_from(Tensor::zeros({1, kv.size(1)}, DType::BF16, Device::CPU));
  };
  NullContext nc = NullContext::build(m, o);
  ASSERT_FALSE(nc.applicability().ok);
  sampler::SamplerOptions s;
  s.steps = 2;
  expect_same_as_pure_eager(m, in, s, "prior_exact_null+batched_cfg", &nc);
  EXPECT_EQ(contract::fallback_counts().size(), 1u);
  EXPECT_NE(contract::fallback_counts()[0].reason.find("not applicable: block 1"),
            std::string::npos);
}

TEST_F(NullModelCpu, NullFlagsWithoutANullContextAreAnError) {
  Transformer m(load_checkpoint(dir + "/tiny.json", Device::CPU));
  auto in = testing::synthetic_inputs({10}, 3, m.config().cond_channels, 32, 1);
  sampler::SamplerOptions s;
  s.steps = 1;
  s.apply(sparse3d::ExecutionPlan::parse("prior_exact_null"));
  EXPECT_NE(testing::error_of([&] { sampler::sample(m, in, s); }).find("NullContext"),
            std::string::npos);
}

TEST_F(NullModelCpu, CondKvCacheHoldsBlocksTimesRowsTimesTwoC) {
  Transformer m(load_checkpoint(dir + "/tiny.json", Device::CPU));
  auto in = testing::synthetic_inputs({10}, 3, m.config().cond_channels, 32, 1);
  CondKV kv = m.precompute_cond_kv(ops::OpPlan(), in.cond);
  const size_t C = m.config().model_channels;
  // The RMS-normalised K [BL, C] (qk_rms_norm_cross) and V alone [BL, C], bf16, per block:
  // the raw K half of to_kv's output is not kept.
  EXPECT_EQ(kv.bytes(), 2u * 3u * (C + C) * 2u);
}

}  // namespace
}  // namespace s3d::model
