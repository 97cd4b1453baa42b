// Null-context elimination on the CPU backend: the fallback counters, the applicability rule
// (each refusal), start-up qualification with a GEMM stub whose rounding depends on M (so
// that both the pass and the fail branch run), and the invalidation rules.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "contract/fallback.h"
#include "gemm/linear.h"
#include "kernels/elementwise.h"
#include "model/checkpoint.h"
#include "model/null_context.h"
#include "sparse3d/flags.h"
#include "../test_numerics.h"

namespace s3d::model {
namespace {

namespace fs = std::filesystem;

// gemm::linear, then the last bit of every bf16 output flipped when M is below `threshold`
// (or above `above`): a library whose result depends on the M it was called with.
Projection m_dependent_gemm(int64_t threshold, int64_t above = INT64_MAX) {
  return [threshold, above](const Tensor& x, const Linear& l, Tensor& y) {
    gemm::linear(x, l.weight, l.bias_or_null(), y);
    const int64_t M = x.size(0);
    if (M >= threshold && M <= above) return;
    auto* p = y.data_as<uint16_t>();
    for (int64_t i = 0; i < y.numel(); ++i) p[i] ^= 1u;
  };
}

struct NullContextCpu : ::testing::Test {
  static void SetUpTestSuite() {
    dir = (fs::temp_directory_path() / ("sparse3d_null_cpu_" + std::to_string(getpid()))).string();
    fs::create_directories(dir);
    make_checkpoint(preset("tiny"), 7, dir + "/tiny", DType::BF16);
    make_checkpoint(preset("tiny"), 8, dir + "/other", DType::BF16);
  }
  static void TearDownTestSuite() { fs::remove_all(dir); }
  void SetUp() override { contract::reset_fallbacks(); }
  static std::string dir;

  // Qualification at N = 300 (above the stub's threshold, so the reference is unperturbed).
  static NullContextOptions options(Projection gemm, std::vector<int64_t> ms) {
    NullContextOptions o;
    o.context_tokens = 9;
    o.qualify_cache = true;
    o.qualify_slices = true;
    o.qualification.candidate_m = std::move(ms);
    o.qualification.token_counts = {300};
    o.qualification.context_rows = {260};
    o.qualification.projection = std::move(gemm);
    return o;
  }
};
std::string NullContextCpu::dir;

uint64_t count_of(const std::string& optimization) {
  uint64_t n = 0;
  for (const auto& f : contract::fallback_counts())
    if (f.optimization == optimization) n += f.count;
  return n;
}

TEST(FallbackCounters, CountPerKeyLogOnceAndRoundTrip) {
  contract::reset_fallbacks();
  ::testing::internal::CaptureStderr();
  contract::record_fallback(sparse3d::Flag::null_context_cache, "no M");
  contract::record_fallback(sparse3d::Flag::null_context_cache, "no M");
  contract::record_fallback(sparse3d::Flag::null_context_exact, "L = 0");
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(log, "fallback: null_context_cache: no M\nfallback: null_context_exact: L = 0\n");
  auto counts = contract::fallback_counts();
  ASSERT_EQ(counts.size(), 2u);
  EXPECT_EQ(counts[0].optimization, "null_context_cache");
  EXPECT_EQ(counts[0].count, 2u);
  EXPECT_EQ(counts[1].count, 1u);
  EXPECT_NE(contract::format_fallbacks(counts).find("null_context_cache: no M (2x)"),
            std::string::npos);
  auto back = contract::fallbacks_from_json(contract::fallbacks_to_json(counts), "test");
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back[0].reason, "no M");
  EXPECT_EQ(back[0].count, 2u);
  contract::reset_fallbacks();
  EXPECT_TRUE(contract::fallback_counts().empty());
  EXPECT_EQ(contract::format_fallbacks({}), "  none\n");
}

// A result file's fallback names an optimization flag; anything else is refused by name.
TEST(FallbackCounters, UnknownOptimizationInJsonIsAnError) {
  io::Json j = contract::fallbacks_to_json({{"warp_drive", "why", 1}});
  try {
    contract::fallbacks_from_json(j, "r.json");
    FAIL() << "accepted an unknown optimization";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("r.json fallbacks[0]: unknown optimization flag 'warp_drive' (known: "),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("null_context_cache"), std::string::npos) << what;
  }
}

TEST(ExecutionPlanNull, PathsCarryTheirFlags) {
  sparse3d::ExecutionPlan exact = sparse3d::ExecutionPlan::parse("prior_exact_null");
  EXPECT_TRUE(exact.on(sparse3d::Flag::null_context_exact));
  EXPECT_FALSE(exact.on(sparse3d::Flag::null_context_cache));
  sparse3d::ExecutionPlan cache =
      sparse3d::ExecutionPlan::parse("canonical_cache_null+batched_cfg+cond_kv_cache");
  EXPECT_TRUE(cache.on(sparse3d::Flag::null_context_cache));
  EXPECT_TRUE(cache.on(sparse3d::Flag::cond_kv_cache));
  EXPECT_EQ(cache.label(), "canonical_cache_null+batched_cfg+cond_kv_cache");
  sparse3d::ExecutionPlan combined = sparse3d::ExecutionPlan::parse("canonical_cache_combined");
  EXPECT_TRUE(combined.on(sparse3d::Flag::null_context_cache));
  EXPECT_TRUE(combined.on(sparse3d::Flag::modulated_layernorm));
  EXPECT_FALSE(combined.on(sparse3d::Flag::gelu_tanh));
  EXPECT_TRUE(sparse3d::ExecutionPlan::parse("beyond").on(sparse3d::Flag::null_context_cache));
}

TEST(Applicability, EachRuleRefusesWithItsReason) {
  NullContextFacts ok{0.0, false, 4};
  std::vector<BlockProbe> clean(2);
  EXPECT_TRUE(judge_applicability(ok, clean).ok);
  auto reason = [&](NullContextFacts f, std::vector<BlockProbe> b) {
    Applicability a = judge_applicability(f, b);
    EXPECT_FALSE(a.ok);
    return a.reason;
  };
  EXPECT_NE(reason({0.1, false, 4}, clean).find("dropout"), std::string::npos);
  EXPECT_NE(reason({0.0, false, 0}, {}).find("L = 0"), std::string::npos);
  EXPECT_NE(reason({0.0, true, 4}, clean).find("joint attention"), std::string::npos);
  std::vector<BlockProbe> values(2);
  values[1].differing_value_row = 3;
  EXPECT_NE(reason(ok, values).find("block 1: the value rows"), std::string::npos);
  std::vector<BlockProbe> attn(2);
  attn[0].differing_attention_row = 0;
  EXPECT_NE(reason(ok, attn).find("block 0: the null cross-attention output is not v0"),
            std::string::npos);
}

TEST_F(NullContextCpu, ProbeFindsIdenticalValueRowsEqualToTheBias) {
  Transformer m(load_checkpoint(dir + "/tiny.json", Device::CPU));
  NullContextOptions o;
  o.context_tokens = 7;
  NullContext nc = NullContext::build(m, o);
  ASSERT_TRUE(nc.applicability().ok) << nc.applicability().reason;
  ASSERT_EQ(nc.value_rows().size(), 2u);
  // With zero tokens the V half of to_kv is its bias, rounded once to bf16.
  const int64_t C = m.config().model_channels;
  for (int i = 0; i < 2; ++i) {
    const Tensor& bias = m.weights().blocks[static_cast<size_t>(i)].cross_attn.to_kv.bias;
    auto want = bias.to_floats();
    auto got = nc.value_rows()[i].to_floats();
    ASSERT_EQ(got.size(), static_cast<size_t>(C));
    for (int64_t c = 0; c < C; ++c) ASSERT_EQ(got[c], want[C + c]) << "block " << i << " col " << c;
  }
  EXPECT_FALSE(nc.qualification().ran);
}

TEST_F(NullContextCpu, ProbeRefusesAConditionSideTransformThatVariesByPosition) {
  Transformer m(load_checkpoint(dir + "/tiny.json", Device::CPU));
  NullContextOptions o = options(m_dependent_gemm(1), {1});
  // A positional term on the context: V row r gets r added to its first element.
  o.condition_transform = [](int, Tensor& kv) {
    const int64_t C2 = kv.size(1);
    Tensor f = Tensor::from_floats(kv.to_floats(), kv.shape(), DType::F32);
    auto v = f.to_floats();
    for (int64_t r = 0; r < kv.size(0); ++r) v[r * C2 + C2 / 2] += static_cast<float>(r);
    kv.copy_from(Tensor::from_floats(v, kv.shape(), DType::BF16));
  };
  NullContext nc = NullContext::build(m, o);
  EXPECT_FALSE(nc.applicability().ok);
  EXPECT_NE(nc.applicability().reason.find("value rows of the null condition differ"),
            std::string::npos)
      << nc.applicability().reason;
  EXPECT_FALSE(nc.qualification().ran);
  NullPath p = nc.path_for(m, true, false, 9);
  EXPECT_EQ(p.mode, NullContextMode::Reference);
  EXPECT_EQ(count_of("null_context_cache"), 1u);
}

TEST_F(NullContextCpu, ProbeRefusesNoContextAndModelFacts) {
  Transformer m(load_checkpoint(dir + "/tiny.json", Device::CPU));
  NullContextOptions o;
  o.context_tokens = 0;
  NullContext none = NullContext::build(m, o);
  EXPECT_FALSE(none.applicability().ok);
  EXPECT_NE(none.applicability().reason.find("L = 0"), std::string::npos);
  o.context_tokens = 4;
  o.adjust_facts = [](NullContextFacts& f) { f.joint_attention = true; };
  EXPECT_NE(NullContext::build(m, o).applicability().reason.find("joint"), std::string::npos);
  o.adjust_facts = [](NullContextFacts& f) { f.attention_dropout = 0.1; };
  EXPECT_NE(NullContext::build(m, o).applicability().reason.find("dropout"), std::string::npos);
  // A request without context tokens is refused per request too.
  o.adjust_facts = nullptr;
  NullContext nc = NullContext::build(m, o);
  EXPECT_EQ(nc.path_for(m, false, false, 0).mode, NullContextMode::Reference);
  EXPECT_EQ(count_of("null_context_exact"), 1u);
}

TEST_F(NullContextCpu, QualificationKeepsTheSmallestMThatReproducesTheReference) {
  Transformer m(load_checkpoint(dir + "/tiny.json", Device::CPU));
  NullContext nc = NullContext::build(m, options(m_dependent_gemm(256), {1, 64, 128, 256, 512}));
  const Qualification& q = nc.qualification();
  ASSERT_TRUE(q.ran);
  EXPECT_EQ(q.m, 256);
  ASSERT_EQ(q.candidates.size(), 5u);
  for (const auto& c : q.candidates) {
    EXPECT_EQ(c.passed, c.m >= 256) << "M=" << c.m << ": " << c.failure;
    if (!c.passed) {
      EXPECT_NE(c.failure.find("block 0"), std::string::npos) << c.failure;
    }
  }
  EXPECT_EQ(q.summary(), "M=256 (passed: 256, 512; failed: 1, 64, 128)");
  EXPECT_TRUE(q.slices_ok) << q.slice_failure;
  ASSERT_EQ(q.cached_rows.size(), 2u);
  // The cached row is the reference's unconditional row.
  Tensor x = Tensor::empty({300, m.config().model_channels}, DType::BF16, Device::CPU);
  kernels::broadcast_row(nc.value_rows()[1], x);
  Tensor y = Tensor::empty(x.shape(), DType::BF16, Device::CPU);
  const Linear& to_out = m.weights().blocks[1].cross_attn.to_out;
  gemm::linear(x, to_out.weight, &to_out.bias, y);
  EXPECT_TRUE(bits_equal(q.cached_rows[1], y.rows(299, 300)));
  for (bool batched : {false, true}) {
    NullPath p = nc.path_for(m, true, batched, 9);
    EXPECT_EQ(p.mode, NullContextMode::Cache);
    EXPECT_TRUE(bits_equal(p.rows[0], q.cached_rows[0]));
  }
  EXPECT_TRUE(contract::fallback_counts().empty());
  EXPECT_NE(nc.report().find("M=128 failed"), std::string::npos) << nc.report();
}

TEST_F(NullContextCpu, NoCandidatePassingFallsBackToTheExactPathCounted) {
  Transformer m(load_checkpoint(dir + "/tiny.json", Device::CPU));
  NullContext nc = NullContext::build(m, options(m_dependent_gemm(256), {1, 64, 128}));
  EXPECT_EQ(nc.qualification().m, 0);
  EXPECT_EQ(nc.qualification().summary(), "no M passed (passed: none; failed: 1, 64, 128)");
  NullPath p = nc.path_for(m, true, false, 9);
  EXPECT_EQ(p.mode, NullContextMode::Exact);
  EXPECT_TRUE(bits_equal(p.rows[0], nc.value_rows()[0]));
  nc.path_for(m, true, false, 9);
  auto f = contract::fallback_counts();
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].optimization, "null_context_cache");
  EXPECT_EQ(f[0].count, 2u);
  EXPECT_NE(f[0].reason.find("no candidate M"), std::string::npos) << f[0].reason;
  EXPECT_NE(f[0].reason.find("ran null_context_exact"), std::string::npos);
}

TEST_F(NullContextCpu, ATamperedCachedRowFailsQualification) {
  Transformer m(load_checkpoint(dir + "/tiny.json", Device::CPU));
  NullContextOptions o = options(nullptr, {1, 256});
  o.qualification.tamper_cached_row = [](int block, Tensor& row) {
    if (block == 1) row.data_as<uint16_t>()[5] ^= 0x0100u;
  };
  NullContext nc = NullContext::build(m, o);
  EXPECT_EQ(nc.qualification().m, 0);
  EXPECT_NE(nc.qualification().candidates[0].failure.find("block 1"), std::string::npos);
  EXPECT_NE(nc.qualification().candidates[0].failure.find("column 5"), std::string::npos);
  EXPECT_EQ(nc.path_for(m, true, true, 9).mode, NullContextMode::Exact);
  EXPECT_EQ(count_of("null_context_cache"), 1u);
}

TEST_F(NullContextCpu, BatchedSliceMismatchRefusesBothNullPathsInBatchedCfgOnly) {
  Transformer m(load_checkpoint(dir + "/tiny.json", Device::CPU));
  // Perturbs every GEMM above M = 520: the [600] to_q (2 x 300) differs from the [300] one.
  NullContext nc = NullContext::build(m, options(m_dependent_gemm(1, 520), {1}));
  EXPECT_FALSE(nc.qualification().slices_ok);
  EXPECT_NE(nc.qualification().slice_failure.find("to_q [300] vs [600]"), std::string::npos)
      << nc.qualification().slice_failure;
  EXPECT_EQ(nc.path_for(m, false, true, 9).mode, NullContextMode::Reference);
  EXPECT_EQ(nc.path_for(m, true, true, 9).mode, NullContextMode::Reference);
  EXPECT_EQ(count_of("null_context_exact"), 1u);
  EXPECT_EQ(count_of("null_context_cache"), 1u);
  // Serial CFG does not change any conditional GEMM shape: the exact path stays.
  EXPECT_EQ(nc.path_for(m, false, false, 9).mode, NullContextMode::Exact);
}

TEST_F(NullContextCpu, QualificationIsInvalidForOtherWeightsOrAnotherEnvironment) {
  Transformer m(load_checkpoint(dir + "/tiny.json", Device::CPU));
  Transformer other(load_checkpoint(dir + "/other.json", Device::CPU));
  ASSERT_NE(m.weights_version(), other.weights_version());
  NullContext nc = NullContext::build(m, options(nullptr, {1, 64}));
  const Qualification& q = nc.qualification();
  EXPECT_EQ(q.m, 1);
  EXPECT_EQ(q.weights_version, m.weights_version());
  EXPECT_EQ(q.invalid_reason(current_fingerprint(), m.weights_version()), "");
  EXPECT_NE(q.invalid_reason(current_fingerprint(), other.weights_version()).find("weights"),
            std::string::npos);
  contract::Fingerprint moved = current_fingerprint();
  moved.gpu_name = "NVIDIA A100-SXM4-80GB";
  moved.cublaslt = "12.1.0";
  EXPECT_NE(q.invalid_reason(moved, m.weights_version()).find("another environment"),
            std::string::npos);
  EXPECT_NE(Qualification{}.invalid_reason(current_fingerprint(), 0), "");
  // A weight reload: v0 and the cache were read from the old weights; both paths are
  // refused and counted.
  EXPECT_EQ(nc.path_for(other, true, false, 9).mode, NullContextMode::Reference);
  EXPECT_EQ(nc.path_for(other, false, true, 9).mode, NullContextMode::Reference);
  EXPECT_EQ(count_of("null_context_cache"), 1u);
  EXPECT_EQ(count_of("null_context_exact"), 1u);
  EXPECT_NE(contract::fallback_counts()[0].reason.find("weights reloaded"), std::string::npos);
  EXPECT_EQ(nc.path_for(m, true, false, 9).mode, NullContextMode::Cache);
}

}  // namespace
}  // namespace s3d::model
