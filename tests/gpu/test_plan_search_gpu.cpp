// Searched library plans on the GPU (tuned_gemm, tuned_attention; core/plan_search.h): the
// searched cuBLASLt algorithm at the model's GEMM shapes and the searched cuDNN SDPA plan
// each match the default within rel L2 1e-2 (outputs poisoned before every run); a second
// search of the same key takes the stored choice without timing; a shape first seen during
// a CUDA graph capture runs the default and is counted. The report (kind, shape,
// candidates, default and best ms, gain, index, source) is printed for the record.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "../test_numerics.h"
#include "attention/attention.h"
#include "core/context.h"
#include "core/cuda_util.h"
#include "core/fallback.h"
#include "core/plan_search.h"
#include "engine/qualification_cache.h"
#include "gemm/linear.h"

namespace s3d {
namespace {

using gemm::Epilogue;
using plan_search::Kind;
using plan_search::Source;
using testing::random_tensor;

#define S3D_REQUIRE_GPU() \
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device on this machine"

constexpr double kTolerance = 1e-2;  // rel L2, tuned vs default (docs/CONTRACTS.md)

// A fresh context per test: its own plans, report and fallback counters.
struct PlanSearchGpu : ::testing::Test {
  void SetUp() override {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device on this machine";
    ctx = std::make_unique<Context>(0);
    scope = std::make_unique<ContextScope>(*ctx);
  }
  void TearDown() override {
    if (!ctx) return;
    std::printf("%s", plan_search::format_report(plan_search::report()).c_str());
    scope.reset();
    ctx.reset();
  }
  // The report's row for `kind` whose shape contains `needle`, or null.
  static const plan_search::Row* row_of(const std::vector<plan_search::Row>& rows, Kind kind,
                                        const std::string& needle) {
    for (const auto& r : rows)
      if (r.kind == kind && r.shape.find(needle) != std::string::npos) return &r;
    return nullptr;
  }
  std::unique_ptr<Context> ctx;
  std::unique_ptr<ContextScope> scope;
};

struct GemmShape {
  int64_t k, n;
  Epilogue epilogue;
};

// The 1536-wide model's GEMMs: to_qkv, to_out / to_q, fc1 with bias+GELU, fc2, to_kv.
const std::vector<GemmShape> kShapes = {{1536, 4608, Epilogue::Bias},
                                        {1536, 1536, Epilogue::Bias},
                                        {1536, 6144, Epilogue::BiasGelu},
                                        {6144, 1536, Epilogue::Bias},
                                        {1024, 3072, Epilogue::Bias}};

// y = linear(x, w, b) into a poisoned output, tuned or not.
Tensor run_linear(const Tensor& x, const Tensor& w, const Tensor& b, Epilogue e, bool tuned) {
  Tensor y = Tensor::empty({x.size(0), w.size(0)}, DType::BF16, Device::CUDA);
  y.poison();
  const uint64_t calls = launch_counts().by_op["gemm"];
  gemm::linear(x, w, &b, y, e, plan_search::Search{tuned, nullptr});
  synchronize();
  EXPECT_EQ(launch_counts().by_op["gemm"], calls + 1) << "the search's timing calls are not "
                                                          "counted as the model's";
  EXPECT_EQ(testing::count_poisoned(y), 0) << "elements the GEMM did not write";
  return y;
}

TEST_F(PlanSearchGpu, TunedGemmMatchesTheDefaultAtTheModelShapes) {
  uint64_t seed = 900;
  double worst = 0;
  for (int64_t M : {int64_t{1}, int64_t{37}, int64_t{3664}, int64_t{30227}}) {
    for (const GemmShape& s : kShapes) {
      const Tensor x = random_tensor({M, s.k}, DType::BF16, seed += 3).to(Device::CUDA);
      const Tensor w = random_tensor({s.n, s.k}, DType::BF16, seed + 1,
                                     1.0f / std::sqrt(static_cast<float>(s.k)))
                           .to(Device::CUDA);
      const Tensor b = random_tensor({s.n}, DType::BF16, seed + 2, 0.5f).to(Device::CUDA);
      const Tensor y_default = run_linear(x, w, b, s.epilogue, false);
      const Tensor y_tuned = run_linear(x, w, b, s.epilogue, true);
      const std::string what = cat("M=", M, " N=", s.n, " K=", s.k, " ");
      const double err = testing::rel_l2(y_tuned.to_floats(), y_default.to_floats());
      EXPECT_LE(err, kTolerance) << what;
      worst = std::max(worst, err);
      // A second call of the same key reuses the plan: no new row, same output bits.
      const Tensor again = run_linear(x, w, b, s.epilogue, true);
      EXPECT_TRUE(testing::bitwise_equal(again, y_tuned)) << what;
      const auto rows = plan_search::report();
      const plan_search::Row* r = row_of(rows, Kind::Gemm, what);
      ASSERT_NE(r, nullptr) << what;
      EXPECT_EQ(r->source, Source::Searched);
      EXPECT_GE(r->choice.candidates, 1);
      EXPECT_LE(r->choice.candidates, plan_search::kMaxCandidates);
      EXPECT_LT(r->choice.index, r->choice.candidates);
      EXPECT_GE(r->choice.timed, 1);
      EXPECT_GT(r->choice.best_ms, 0);
      EXPECT_LE(r->choice.best_ms, r->choice.default_ms);
    }
  }
  EXPECT_EQ(plan_search::report().size(), 4 * kShapes.size());
  std::printf("[plan search] gemm: worst rel L2 tuned vs default %.3e\n", worst);
  EXPECT_TRUE(fallback_counts().empty());
}

TEST_F(PlanSearchGpu, SecondSearchOfTheSameKeyTakesTheStoredChoice) {
  engine::QualificationCache store("", nullptr);  // in memory
  const Tensor x = random_tensor({37, 1536}, DType::BF16, 11).to(Device::CUDA);
  const Tensor w = random_tensor({4608, 1536}, DType::BF16, 12, 0.025f).to(Device::CUDA);
  const Tensor b = random_tensor({4608}, DType::BF16, 13, 0.5f).to(Device::CUDA);
  const plan_search::Search tuned{true, &store};
  Tensor y1 = Tensor::empty({37, 4608}, DType::BF16, Device::CUDA);
  y1.poison();
  gemm::linear(x, w, &b, y1, Epilogue::Bias, tuned);
  auto rows = plan_search::report();
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].source, Source::Searched);
  EXPECT_EQ(store.stats().stores, 1u);
  const plan_search::Choice first = rows[0].choice;

  gemm::release_resources();  // the plan is gone; the store still has the choice
  Tensor y2 = Tensor::empty({37, 4608}, DType::BF16, Device::CUDA);
  y2.poison();
  gemm::linear(x, w, &b, y2, Epilogue::Bias, tuned);
  synchronize();
  rows = plan_search::report();
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].source, Source::Cache);
  EXPECT_EQ(rows[0].choice.index, first.index);
  EXPECT_EQ(rows[0].choice.candidates, first.candidates);
  EXPECT_EQ(store.stats().hits, 1u);
  EXPECT_EQ(store.stats().refusals, 0u);
  EXPECT_EQ(store.stats().stores, 1u);  // nothing timed, nothing stored again
  EXPECT_TRUE(testing::bitwise_equal(y1, y2)) << "the same algorithm gives the same bits";

  // A stored index the list no longer has is refused, counted and searched again.
  gemm::release_resources();
  plan_search::Choice bogus = first;
  bogus.index = plan_search::kMaxCandidates + 1;
  bogus.candidates = plan_search::kMaxCandidates + 2;
  store.store_plan(Kind::Gemm, rows[0].shape, bogus);
  Tensor y3 = Tensor::empty({37, 4608}, DType::BF16, Device::CUDA);
  gemm::linear(x, w, &b, y3, Epilogue::Bias, tuned);
  synchronize();
  EXPECT_EQ(store.stats().refusals, 1u);
  EXPECT_EQ(plan_search::report()[0].source, Source::Searched);
  EXPECT_LE(testing::rel_l2(y3.to_floats(), y1.to_floats()), kTolerance);
}

// Packed self-attention [T, 3, H, D] at the model's heads, default vs tuned.
TEST_F(PlanSearchGpu, TunedSdpaMatchesTheDefault) {
  const int H = 12, D = 128;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  uint64_t seed = 1300;
  for (const std::vector<int32_t>& lens :
       {std::vector<int32_t>{3664}, {1, 37, 300}, {4096, 4096}}) {
    int64_t T = 0;
    for (int32_t l : lens) T += l;
    const int64_t HD = int64_t{H} * D;
    const Tensor qkv = random_tensor({T, 3, H, D}, DType::BF16, seed += 7).to(Device::CUDA);
    const RowView q{qkv, 0, T, HD, 3 * HD}, k{qkv, HD, T, HD, 3 * HD}, v{qkv, 2 * HD, T, HD, 3 * HD};
    const attention::SeqLayout layout = attention::make_seq_layout(lens, Device::CUDA);
    auto run = [&](bool tuned) {
      Tensor out = Tensor::empty({T, HD}, DType::BF16, Device::CUDA);
      out.poison();
      const uint64_t calls = launch_counts().by_op["sdpa"];
      attention::sdpa_varlen(q, layout, k, v, layout, H, D, scale, out,
                             attention::Config{{}, plan_search::Search{tuned, nullptr}});
      synchronize();
      EXPECT_EQ(launch_counts().by_op["sdpa"], calls + 1);
      EXPECT_EQ(testing::count_poisoned(out), 0) << "rows cuDNN did not write";
      return out;
    };
    const Tensor ref = run(false);
    const Tensor got = run(true);
    const double err = testing::rel_l2(got.to_floats(), ref.to_floats());
    std::printf("[plan search] sdpa B=%zu T=%lld: rel L2 tuned vs default %.3e\n", lens.size(),
                static_cast<long long>(T), err);
    EXPECT_LE(err, kTolerance);
    EXPECT_TRUE(testing::bitwise_equal(run(true), got)) << "the kept plan is deterministic";
  }
  const auto rows = plan_search::report();
  ASSERT_EQ(rows.size(), 3u);
  for (const auto& r : rows) {
    EXPECT_EQ(r.kind, Kind::Attention);
    EXPECT_EQ(r.source, Source::Searched);
    EXPECT_LT(r.choice.index, r.choice.candidates);
    EXPECT_FALSE(r.choice.variant.empty());
    EXPECT_LE(r.choice.best_ms, r.choice.default_ms);
  }
  EXPECT_TRUE(fallback_counts().empty());
}

TEST_F(PlanSearchGpu, SecondSdpaSearchTakesTheStoredChoice) {
  engine::QualificationCache store("", nullptr);
  const int H = 12, D = 128;
  const std::vector<int32_t> lens = {1000, 700};
  const int64_t T = 1700, HD = int64_t{H} * D;
  const Tensor qkv = random_tensor({T, 3, H, D}, DType::BF16, 77).to(Device::CUDA);
  const RowView q{qkv, 0, T, HD, 3 * HD}, k{qkv, HD, T, HD, 3 * HD}, v{qkv, 2 * HD, T, HD, 3 * HD};
  const attention::SeqLayout layout = attention::make_seq_layout(lens, Device::CUDA);
  const attention::Config tuned{{}, plan_search::Search{true, &store}};
  auto run = [&] {
    Tensor out = Tensor::empty({T, HD}, DType::BF16, Device::CUDA);
    out.poison();
    attention::sdpa_varlen(q, layout, k, v, layout, H, D, 0.08838834764f, out, tuned);
    synchronize();
    return out;
  };
  const Tensor first = run();
  ASSERT_EQ(plan_search::report().size(), 1u);
  const plan_search::Choice searched = plan_search::report()[0].choice;
  attention::release_resources();
  const Tensor second = run();
  const auto rows = plan_search::report();
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].source, Source::Cache);
  EXPECT_EQ(rows[0].choice.index, searched.index);
  EXPECT_EQ(rows[0].choice.variant, searched.variant);
  EXPECT_EQ(store.stats().hits, 1u);
  EXPECT_EQ(store.stats().stores, 1u);
  EXPECT_TRUE(testing::bitwise_equal(first, second));
}

// A shape first seen inside a capture cannot be timed: the default runs, counted.
TEST_F(PlanSearchGpu, ShapeFirstSeenDuringCaptureRunsTheDefaultCounted) {
  const Tensor x = random_tensor({53, 1536}, DType::BF16, 21).to(Device::CUDA);
  const Tensor w = random_tensor({1536, 1536}, DType::BF16, 22, 0.025f).to(Device::CUDA);
  const Tensor b = random_tensor({1536}, DType::BF16, 23, 0.5f).to(Device::CUDA);
  const Tensor y_default = run_linear(x, w, b, Epilogue::Bias, false);
  // Warm the handle and workspace (another shape) so nothing is allocated inside the capture.
  const Tensor warm = random_tensor({8, 1536}, DType::BF16, 24).to(Device::CUDA);
  run_linear(warm, w, b, Epilogue::Bias, true);
  plan_search::reset_report();

  Tensor y = Tensor::empty({53, 1536}, DType::BF16, Device::CUDA);
  y.poison();
  cudaStream_t stream = nullptr;
  S3D_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  ctx->set_stream(stream);
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  {
    S3D_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    gemm::linear(x, w, &b, y, Epilogue::Bias, plan_search::Search{true, nullptr});
    S3D_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  }
  S3D_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  S3D_CUDA_CHECK(cudaGraphLaunch(exec, stream));
  S3D_CUDA_CHECK(cudaStreamSynchronize(stream));
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  ctx->set_stream(nullptr);
  cudaStreamDestroy(stream);

  EXPECT_TRUE(testing::bitwise_equal(y, y_default)) << "the default algorithm ran";
  EXPECT_TRUE(plan_search::report().empty()) << "nothing was searched";
  bool counted = false;
  for (const auto& f : fallback_counts())
    counted |= f.optimization == "tuned_gemm" && f.reason.find("capture") != std::string::npos;
  EXPECT_TRUE(counted);
}

}  // namespace
}  // namespace s3d
