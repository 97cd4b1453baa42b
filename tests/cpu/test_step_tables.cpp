// step_tables: every step's t-only work (the blocks' modulation) computed
// for the whole schedule in one call before the loop. On the CPU backend a GEMM's row does
// not depend on M, so the contract here is bitwise equality with computing it in every
// forward, for every path, CFG mode and schedule (the GPU test checks the one-ulp contract);
// a given modulation that does not fit the forward is an error.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "contract/fallback.h"
#include "model/checkpoint.h"
#include "model/null_context.h"
#include "sampler/sampler.h"
#include "sparse3d/flags.h"
#include "io_test_util.h"
#include "../model_inputs.h"
#include "../null_context_checks.h"

namespace s3d::model {
namespace {

namespace fs = std::filesystem;

struct StepTablesCpu : ::testing::TestWithParam<bool> {  // param: share_mod
  void SetUp() override {
    dir = (fs::temp_directory_path() /
           ("sparse3d_step_tables_" + std::to_string(getpid()) + (GetParam() ? "_s" : "_o")))
              .string();
    ModelConfig c = preset("tiny");
    c.share_mod = GetParam();
    make_checkpoint(c, 11, dir + "/tiny", DType::BF16);
    contract::reset_fallbacks();
  }
  void TearDown() override { fs::remove_all(dir); }
  std::string dir;
};

TEST_P(StepTablesCpu, EveryPathIsBitwiseTheForwardsOwnModulation) {
  Transformer m(load_checkpoint(dir + "/tiny.json", Device::CPU));
  ASSERT_EQ(m.config().share_mod, GetParam());
  const auto in = testing::synthetic_inputs({19, 7}, 5, m.config().cond_channels,
                                            m.config().out_channels, 31);
  NullContext nc = NullContext::build(m, testing::qualified_options(5, {26}));
  for (bool interval : {false, true}) {
    sampler::SamplerOptions o;
    o.steps = 4;
    o.guidance_rescale = 0.3;
    if (interval) o.interval_lo = 0.5, o.interval_hi = 0.9;  // mixed steps: some without CFG
    for (const char* spec :
         {"pure_eager+step_tables", "pure_eager+step_tables+batched_cfg",
          "kernel_fusion+step_tables", "canonical_cache_null+step_tables+cond_kv_cache",
          "canonical_cache_null+step_tables+batched_cfg"}) {
      SCOPED_TRACE(std::string(spec) + (interval ? " interval" : ""));
      auto ref = testing::reference_run(m, in, o, testing::spec_is_batched(spec));
      if (std::string(spec).rfind("kernel_fusion", 0) == 0) {
        // The epilogue is not bitwise: compare with the same path without the tables.
        sampler::SamplerOptions f = o;
        f.apply(sparse3d::ExecutionPlan::parse("kernel_fusion"));
        ref = sampler::sample(m, in, f, true);
      }
      testing::expect_same_bits_as(ref, m, in, o, spec, &nc);
    }
  }
  EXPECT_TRUE(contract::fallback_counts().empty())
      << contract::format_fallbacks(contract::fallback_counts());
}

TEST_P(StepTablesCpu, AModulationThatDoesNotFitIsAnError) {
  Transformer m(load_checkpoint(dir + "/tiny.json", Device::CPU));
  const auto in = testing::synthetic_inputs({9}, 5, m.config().cond_channels,
                                            m.config().out_channels, 32);
  Request req = m.prepare(in.coords, 1, 5);
  const Tensor t = Tensor::from_floats({700.0f}, {1}, DType::F32);
  const Condition cond{in.cond, 0, nullptr};
  Modulation two =
      m.modulation(ops::OpPlan(), Tensor::from_floats({700.0f, 700.0f}, {2}, DType::F32));
  EXPECT_ERROR(m.forward(req, in.noise, t, cond, nullptr, &two), "forward modulation");
  Modulation short_one = m.modulation(ops::OpPlan(), t);
  short_one.blocks.pop_back();
  EXPECT_ERROR(m.forward(req, in.noise, t, cond, nullptr, &short_one), "holds 1 blocks for 2");
  // And a fitting one gives the forward's own bits.
  const Modulation mine = m.modulation(ops::OpPlan(), t);
  EXPECT_TRUE(testing::same_bits(m.forward(req, in.noise, t, cond, nullptr, &mine),
                                 m.forward(req, in.noise, t, cond), "forward output"));
}

// The table's layout: step k's buffer holds every block's modulation of that step, block by
// block, and its views give the forward's own bits for B and for 2B rows.
TEST_P(StepTablesCpu, TheTableHoldsEachStepsModulationBlockByBlock) {
  Transformer m(load_checkpoint(dir + "/tiny.json", Device::CPU));
  const std::vector<float> t = {1000.f, 1000.f, 1000.f, 1000.f, 812.5f, 812.5f, 812.5f, 812.5f,
                                333.f,  333.f,  333.f,  333.f};
  const ModulationTable table =
      m.modulation_table(ops::OpPlan(), Tensor::from_floats(t, {3, 4}, DType::F32));
  ASSERT_EQ(table.steps(), 3);
  EXPECT_EQ(table.step_buffer(2).shape(), (Shape{m.config().num_blocks * 4, table.width}));
  for (int k = 0; k < 3; ++k)
    for (int used : {2, 4}) {
      const Modulation own = m.modulation(ops::OpPlan(), Tensor::from_floats(
          std::vector<float>(static_cast<size_t>(used), t[static_cast<size_t>(4 * k)]), {used},
          DType::F32));
      const Modulation got = table.step(k, used);
      ASSERT_EQ(got.blocks.size(), own.blocks.size());
      for (size_t i = 0; i < own.blocks.size(); ++i)
        EXPECT_TRUE(testing::same_bits(got.blocks[i], own.blocks[i], "modulation block"))
            << "step " << k << ", block " << i << ", " << used << " rows";
    }
  EXPECT_ERROR(table.step(3, 4), "step 3 of 3");
  EXPECT_ERROR(table.step(0, 5), "with 5 used");
  EXPECT_ERROR(m.modulation_table(ops::OpPlan(), Tensor::from_floats({1.f, 2.f}, {2}, DType::F32)),
               "t must be f32 [steps, rows]");
}

// The hoisted work is paid for: the request's set-up (here with the table) is timed apart
// from the loop, and a request's time is both (what `sparse3d bench` records).
TEST_P(StepTablesCpu, TheRequestsSetUpIsTimedApartFromItsLoop) {
  Transformer m(load_checkpoint(dir + "/tiny.json", Device::CPU));
  const auto in = testing::synthetic_inputs({13}, 5, m.config().cond_channels,
                                            m.config().out_channels, 34);
  sampler::SamplerOptions o;
  o.steps = 2;
  o.flags.set(sparse3d::Flag::step_tables, true);
  const sampler::Output out = sampler::sample(m, in, o);
  EXPECT_GT(out.setup_seconds, 0.0);
  EXPECT_GT(out.loop_seconds, 0.0);
  EXPECT_DOUBLE_EQ(out.request_seconds(), out.setup_seconds + out.loop_seconds);
}

// cuda_graphs on the CPU backend: refused, counted once per request, and the eager forwards
// run (bitwise).
TEST_P(StepTablesCpu, CudaGraphsOnTheCpuFallBackCountedAndBitwise) {
  Transformer m(load_checkpoint(dir + "/tiny.json", Device::CPU));
  const auto in = testing::synthetic_inputs({11}, 5, m.config().cond_channels,
                                            m.config().out_channels, 33);
  sampler::SamplerOptions o;
  o.steps = 3;
  const auto ref = testing::reference_run(m, in, o, false);
  testing::expect_same_bits_as(ref, m, in, o, "pure_eager+cuda_graphs+step_tables", nullptr);
  const auto f = contract::fallback_counts();
  ASSERT_EQ(f.size(), 1u) << contract::format_fallbacks(f);
  EXPECT_EQ(f[0].optimization, "cuda_graphs");
  EXPECT_EQ(f[0].count, 1u);
  EXPECT_NE(f[0].reason.find("CPU backend"), std::string::npos) << f[0].reason;
}

INSTANTIATE_TEST_SUITE_P(ShareMod, StepTablesCpu, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "shared" : "per_block"; });

}  // namespace
}  // namespace s3d::model
