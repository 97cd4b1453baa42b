// Sequence parallelism (model/trunk/sequence_parallel.h) on P simulated ranks of one device
// (parallel::LocalGroup): built into the CPU tests, where the sharded forward must be bitwise equal
// to Transformer::forward for every P, and into the GPU suite, where it must stay within the
// contract's rel L2 of 1e-2 (docs/CONTRACTS.md, "Sequence parallelism"). A 12-head model, as the
// released ones: P = 1, 2, 3, 4, 6 divide its heads. Token counts split unevenly, and assets are
// cut between ranks.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "../device_under_test.h"
#include "../expect_error.h"
#include "../model_inputs.h"
#include "../null_context_checks.h"
#include "../test_numerics.h"
#include "contract/fallback.h"
#include "core/context.h"
#include "core/cuda_util.h"
#include "forward_case.h"
#include "model/checkpoint.h"
#include "model/config.h"
#include "model/null_context.h"
#include "model/trunk/sequence_parallel.h"
#include "ops/op.h"
#include "parallel/group.h"
#include "parallel/shard_plan.h"
#include "sampler/sampler.h"
#include "sparse3d/flags.h"

namespace s3d::model {
namespace {

namespace fs = std::filesystem;
using test::kTestDevice;

constexpr double kGpuBound = 1e-2;  // per forward, against the unsharded forward (CONTRACTS.md)
const std::vector<int> kParts = {1, 2, 3, 4, 6};
constexpr int kPerRank = 0;  // expect_matches' groups: G = P, whole assets per rank

// 12 heads of 24 channels: RoPE's 4 frequencies per axis, cuDNN's multiple of 8.
ModelConfig twelve_heads(const std::string& base) {
  ModelConfig c = preset(base);
  c.model_channels = 288;
  c.num_heads = 12;
  c.num_blocks = 2;
  return c;
}

struct SequenceParallelTest : ::testing::Test {
  static void SetUpTestSuite() {
    dir = (fs::temp_directory_path() / ("sparse3d_seqpar_" + std::to_string(getpid()))).string();
    fs::create_directories(dir);
    make_checkpoint(twelve_heads("tiny"), 11, dir + "/slat", DType::BF16);
    ModelConfig dense = twelve_heads("tiny-ss");
    dense.resolution = 4;  // 64 tokens per asset
    make_checkpoint(dense, 12, dir + "/dense", DType::BF16);
  }
  static void TearDownTestSuite() { fs::remove_all(dir); }
  static std::string dir;

  using Case = testing::ForwardCase;
  static Case make_case(const Transformer& m, const std::vector<int64_t>& counts, int L,
                        int null_assets, const sparse3d::FlagSet& flags, uint64_t seed) {
    return testing::forward_case(m, counts, L, null_assets, flags, seed, kTestDevice);
  }
  // Batched CFG's layout: the assets of `half`, then the same ones with the null condition; the
  // conditional half's tokens and their cached K/V.
  struct CfgCase {
    Case k;
    Tensor real;
    CondKV kv;
  };
  static CfgCase cfg_case(const Transformer& m, std::vector<int64_t> half, const char* path,
                          uint64_t seed) {
    const int B = static_cast<int>(half.size());
    std::vector<int64_t> counts = half;
    counts.insert(counts.end(), half.begin(), half.end());
    CfgCase c;
    c.k = make_case(m, counts, 6, B, sparse3d::ExecutionPlan::of_path(path).flags(), seed);
    c.real = c.k.cond.rows(0, B);
    c.kv = m.precompute_cond_kv(ops::OpPlan(), c.real);
    return c;
  }

  // The whole forward, then the sharded one into a poisoned output for every P: same bits on the
  // CPU, within the bound on the GPU. With `checkpoint`, every rank runs in a context of its own
  // with its own replica of the model loaded from it, as on P GPUs. `groups`: ShardPlan's G
  // (kPerRank: P).
  static void expect_matches(const Transformer& m, const Case& k, const Condition& cond,
                             const NullPath* null, const Modulation* mod, const std::string& what,
                             const std::vector<int>& parts = kParts,
                             const std::string& checkpoint = "", int groups = 1) {
    const Tensor want = m.forward(k.req, k.x, k.t1000, cond, null, mod);
    for (int P : parts) {
      std::vector<std::unique_ptr<Context>> contexts;
      std::vector<std::unique_ptr<Transformer>> owned;
      std::vector<Context*> ctx;
      std::vector<const Transformer*> replicas(static_cast<size_t>(P), &m);
      if (!checkpoint.empty()) {
        int device = -1;
        if (kTestDevice == Device::CUDA) S3D_CUDA_CHECK(cudaGetDevice(&device));
        for (int r = 0; r < P; ++r) {
          contexts.push_back(std::make_unique<Context>(device));
          ctx.push_back(contexts.back().get());
          ContextScope scope(*contexts.back());
          owned.push_back(
              std::make_unique<Transformer>(load_checkpoint(checkpoint, kTestDevice)));
          replicas[static_cast<size_t>(r)] = owned.back().get();
        }
      }
      parallel::LocalGroup group(P, kTestDevice, ctx);
      SequenceParallel sp(replicas, group);
      const ShardedRequest sr = sp.shard(k.req, groups == kPerRank ? P : groups);
      EXPECT_EQ(sr.plan.groups, groups == kPerRank ? P : groups);
      Tensor out = Tensor::empty(want.shape(), DType::F32, kTestDevice);
      out.poison();
      const Tensor got = sp.forward(sr, k.x, k.t1000, cond, null, mod, out);
      if (kTestDevice == Device::CPU) {
        EXPECT_TRUE(testing::bitwise_equal(got, want)) << what << ", P = " << P;
      } else {
        EXPECT_LE(testing::rel_l2(got.to_floats(), want.to_floats()), kGpuBound)
            << what << ", P = " << P;
      }
    }
  }

  static NullPath null_path(const Transformer& m, NullContextMode mode, uint64_t seed) {
    NullPath n;
    n.mode = mode;
    for (int i = 0; i < m.config().num_blocks; ++i)
      n.rows.push_back(ops::random_tensor({1, m.config().model_channels}, DType::BF16,
                                          kTestDevice, seed + static_cast<uint64_t>(i)));
    return n;
  }
};
std::string SequenceParallelTest::dir;

TEST(ShardPlan, SplitsTheTokensContiguouslyAndEvenly) {
  for (int64_t T : {6, 7, 61, 103, 30227}) {
    for (int P : {1, 2, 3, 4, 6}) {
      if (T < P) continue;
      const parallel::ShardPlan p = parallel::ShardPlan::split(T, 12, P);
      ASSERT_EQ(p.parts, P);
      EXPECT_EQ(p.heads_per_part(), 12 / P);
      EXPECT_EQ(p.begin(0), 0);
      EXPECT_EQ(p.tokens(), T);
      int64_t lo = T, hi = 0;
      for (int r = 0; r < P; ++r) {
        EXPECT_EQ(p.end(r), r + 1 < P ? p.begin(r + 1) : T);
        lo = std::min(lo, p.rows(r));
        hi = std::max(hi, p.rows(r));
      }
      EXPECT_GE(lo, 1) << T << " over " << P;
      EXPECT_LE(hi - lo, 1) << T << " over " << P;
    }
  }
}

TEST(ShardPlan, SplitsByWholeAssets) {
  const std::vector<int64_t> offsets = {0, 29, 69, 98, 138};
  const parallel::ShardPlan two = parallel::ShardPlan::by_assets(offsets, 12, 2);
  EXPECT_TRUE(two.whole_assets());
  EXPECT_EQ(two.groups, 2);
  EXPECT_EQ(two.row_begin, (std::vector<int64_t>{0, 69, 138}));
  EXPECT_EQ(parallel::ShardPlan::by_assets(offsets, 12, 3).row_begin,
            (std::vector<int64_t>{0, 29, 69, 138}));
  EXPECT_EQ(parallel::ShardPlan::by_assets(offsets, 12, 4).row_begin, offsets);
  EXPECT_FALSE(parallel::ShardPlan::split(138, 12, 2).whole_assets());
  EXPECT_ERROR(parallel::ShardPlan::by_assets(offsets, 12, 5), "4 assets cannot be split over 5");
  EXPECT_ERROR(parallel::ShardPlan::by_assets({0}, 12, 1), "0 assets cannot be split");
}

TEST(ShardPlan, SplitsAssetGroupsOverTheirRanks) {
  // Batched CFG of two assets: 29 + 40 conditional tokens, the same unconditional.
  const std::vector<int64_t> offsets = {0, 29, 69, 98, 138};
  const parallel::ShardPlan four = parallel::ShardPlan::grouped(offsets, 12, 4, 2);
  EXPECT_EQ(four.group_size(), 2);
  EXPECT_EQ(four.heads_per_part(), 6);
  EXPECT_FALSE(four.whole_assets());
  EXPECT_EQ(four.row_begin, (std::vector<int64_t>{0, 34, 69, 103, 138}));
  EXPECT_EQ(four.group_begin(1), 69);
  EXPECT_EQ(four.group_end(0), 69);
  EXPECT_EQ(four.group_of(3), 1);
  const parallel::ShardPlan six = parallel::ShardPlan::grouped(offsets, 12, 6, 2);
  EXPECT_EQ(six.heads_per_part(), 4);
  EXPECT_EQ(six.row_begin, (std::vector<int64_t>{0, 23, 46, 69, 92, 115, 138}));
  // One group is the token split; P groups are whole assets per rank.
  EXPECT_EQ(parallel::ShardPlan::grouped(offsets, 12, 3, 1).row_begin,
            parallel::ShardPlan::split(138, 12, 3).row_begin);
  EXPECT_EQ(parallel::ShardPlan::grouped(offsets, 12, 4, 4).row_begin, offsets);
  EXPECT_ERROR(parallel::ShardPlan::grouped(offsets, 12, 4, 3),
               "3 rank groups do not divide the 4");
  EXPECT_ERROR(parallel::ShardPlan::grouped(offsets, 12, 10, 2), "5 ranks do not divide the 12");
  EXPECT_ERROR(parallel::ShardPlan::grouped({0, 2, 9}, 12, 6, 2),
               "2 tokens cannot be split over 3");
  EXPECT_ERROR(parallel::ShardPlan::grouped({0, 9}, 12, 4, 2), "1 assets cannot be split over 2");
}

TEST(ShardPlan, RefusesWhatItCannotSplit) {
  EXPECT_ERROR(parallel::ShardPlan::split(100, 12, 5), "do not divide the 12");
  EXPECT_ERROR(parallel::ShardPlan::split(100, 12, 8), "do not divide the 12");
  EXPECT_ERROR(parallel::ShardPlan::split(3, 12, 4), "3 tokens cannot be split");
  EXPECT_ERROR(parallel::ShardPlan::split(100, 12, 0), "at least one rank");
}

TEST(ShardPlan, ChoosesTheLargestDividingCountThatKeepsEveryRankBusy) {
  using parallel::choose_parts;
  EXPECT_EQ(choose_parts(60000, 12, 1).parts, 1);
  EXPECT_EQ(choose_parts(60000, 12, 2).parts, 2);
  EXPECT_EQ(choose_parts(60000, 12, 4).parts, 4);
  // 8 GPUs do not divide 12 heads: 6 of them.
  const parallel::PartsChoice eight = choose_parts(60000, 12, 8);
  EXPECT_EQ(eight.parts, 6);
  EXPECT_NE(eight.reason.find("do not divide the 12 heads"), std::string::npos) << eight.reason;
  // Small assets stay on one GPU; between, the largest count that keeps the minimum.
  const parallel::PartsChoice small = choose_parts(3664, 12, 2);
  EXPECT_EQ(small.parts, 1);
  EXPECT_NE(small.reason.find("3664 tokens"), std::string::npos) << small.reason;
  EXPECT_EQ(choose_parts(30227, 12, 4, 8192).parts, 3);
  EXPECT_EQ(choose_parts(30227, 12, 8, 8192).parts, 3);
  EXPECT_EQ(choose_parts(100, 12, 6, 1).parts, 6);
  EXPECT_ERROR(choose_parts(100, 12, 0), "at least one device");
}

TEST_F(SequenceParallelTest, LocalGroupExchangeMovesEveryBufferAndChecksThem) {
  S3D_TEST_DEVICE();
  parallel::LocalGroup g(3, kTestDevice);
  std::vector<parallel::Transfer> ts;
  std::vector<Tensor> srcs, dsts;
  for (int r = 0; r < 3; ++r) {
    for (int s = 0; s < 3; ++s) {
      srcs.push_back(ops::random_tensor({2 + r, 5}, DType::BF16, kTestDevice, 10 * r + s));
      dsts.push_back(Tensor::empty({2 + r, 5}, DType::BF16, kTestDevice));
      dsts.back().poison();
      ts.push_back({r, s, srcs.back(), dsts.back()});
    }
  }
  g.exchange(ts);
  for (size_t i = 0; i < srcs.size(); ++i)
    EXPECT_TRUE(testing::bitwise_equal(srcs[i], dsts[i])) << "transfer " << i;
  Tensor a = Tensor::empty({4}, DType::BF16, kTestDevice);
  Tensor b = Tensor::empty({5}, DType::BF16, kTestDevice);
  Tensor f = Tensor::empty({4}, DType::F32, kTestDevice);
  EXPECT_ERROR((g.exchange({{0, 3, a, a}})), "to rank 3 in a group of 3");
  EXPECT_ERROR((g.exchange({{0, 1, a, b}})), "transfer 0 sends");
  EXPECT_ERROR((g.exchange({{0, 1, a, f}})), "transfer 0 sends");
  EXPECT_ERROR((g.exchange({{0, 1, Tensor(), a}})), "undefined buffer");
}

TEST_F(SequenceParallelTest, ReferencePathMatchesTheWholeForward) {
  S3D_TEST_DEVICE();
  Transformer m(load_checkpoint(dir + "/slat.json", kTestDevice));
  const Case k = make_case(m, {37, 61, 5}, 7, 0, {}, 3);
  expect_matches(m, k, Condition{k.cond, 0, nullptr}, nullptr, nullptr, "pure_eager, 3 assets");
}

TEST_F(SequenceParallelTest, FastPlanWithCachedConditionChunksAndStepTablesMatches) {
  S3D_TEST_DEVICE();
  Transformer m(load_checkpoint(dir + "/slat.json", kTestDevice));
  const sparse3d::FlagSet fast = sparse3d::ExecutionPlan::parse("fast+chunked_mlp").flags();
  Case k = make_case(m, {44, 9, 50}, 5, 0, fast, 5);
  k.req.mlp_chunk_tokens = 16;  // several chunks on every rank, a partial one last
  const CondKV kv = m.precompute_cond_kv(ops::OpPlan(), k.cond);
  const Modulation mod = m.modulation(ops::OpPlan(), k.t1000);
  expect_matches(m, k, Condition{k.cond, 0, &kv}, nullptr, &mod, "fast, cond_kv, chunks");
}

TEST_F(SequenceParallelTest, NullContextPathsMatchWithNullAssetsOnEveryRank) {
  S3D_TEST_DEVICE();
  Transformer m(load_checkpoint(dir + "/slat.json", kTestDevice));
  const CfgCase c = cfg_case(m, {29, 40}, "beyond", 7);
  const Case& k = c.k;
  const Tensor& real = c.real;
  const CondKV& kv = c.kv;
  for (NullContextMode mode : {NullContextMode::Exact, NullContextMode::Cache}) {
    const NullPath null = null_path(m, mode, 40);
    const std::string name = mode == NullContextMode::Exact ? "Exact" : "Cache";
    expect_matches(m, k, Condition{real, 2, nullptr}, &null, nullptr, name);
    expect_matches(m, k, Condition{real, 2, &kv}, &null, nullptr, name + " with cond_kv");
    // Serial CFG's unconditional forward: every asset null.
    expect_matches(m, k, Condition{Tensor(), 4, nullptr}, &null, nullptr, name + ", all null");
  }
}

TEST_F(SequenceParallelTest, WholeAssetsPerRankMatchAsCfgParallelism) {
  // CFG parallelism: batched CFG's conditional assets on one rank, the unconditional ones on
  // the other (or one asset per rank), self-attention on each rank alone.
  S3D_TEST_DEVICE();
  Transformer m(load_checkpoint(dir + "/slat.json", kTestDevice));
  const CfgCase c = cfg_case(m, {29, 40}, "beyond", 7);
  const Condition cond{c.real, 2, &c.kv};
  for (NullContextMode mode : {NullContextMode::Exact, NullContextMode::Cache}) {
    const NullPath null = null_path(m, mode, 40);
    expect_matches(m, c.k, cond, &null, nullptr, "whole assets", {2, 4}, "", kPerRank);
  }
  const NullPath null = null_path(m, NullContextMode::Cache, 41);
  expect_matches(m, c.k, cond, &null, nullptr, "whole assets, own contexts", {2},
                 dir + "/slat.json", kPerRank);
  parallel::LocalGroup five(5, kTestDevice);
  SequenceParallel sp5(std::vector<const Transformer*>(5, &m), five);
  EXPECT_ERROR(sp5.shard(c.k.req, 5), "4 assets cannot be split over 5 ranks");
}

TEST_F(SequenceParallelTest, AssetGroupsSplitOverTheirRanksMatchAsCfgTimesSequence) {
  // CFG parallelism combined with the token split: the conditional assets over half the ranks,
  // the unconditional ones over the other half, assets cut between the ranks of a group.
  S3D_TEST_DEVICE();
  Transformer m(load_checkpoint(dir + "/slat.json", kTestDevice));
  const CfgCase c = cfg_case(m, {29, 40}, "fast", 19);
  for (NullContextMode mode : {NullContextMode::Exact, NullContextMode::Cache}) {
    const NullPath null = null_path(m, mode, 60);
    expect_matches(m, c.k, Condition{c.real, 2, &c.kv}, &null, nullptr, "groups", {2, 4, 6}, "", 2);
  }
  const NullPath null = null_path(m, NullContextMode::Cache, 61);
  const Modulation mod = m.modulation(ops::OpPlan(), c.k.t1000);
  expect_matches(m, c.k, Condition{c.real, 2, nullptr}, &null, &mod, "groups, own contexts", {4},
                 dir + "/slat.json", 2);
  // One asset per branch, its tokens over 3 ranks per group; and 4 groups of 2 ranks.
  const CfgCase one = cfg_case(m, {31}, "beyond", 23);
  expect_matches(m, one.k, Condition{one.real, 1, nullptr}, &null, nullptr, "groups, one asset",
                 {6}, "", 2);
  expect_matches(m, c.k, Condition{c.real, 2, nullptr}, &null, nullptr, "four groups", {8}, "", 4);
}

TEST_F(SequenceParallelTest, RanksInContextsOfTheirOwnMatch) {
  // As on P GPUs: each rank has its own context (allocator, library state) and replica of the
  // model, and its work reads only what was moved into its context.
  S3D_TEST_DEVICE();
  Transformer m(load_checkpoint(dir + "/slat.json", kTestDevice));
  const CfgCase c = cfg_case(m, {33, 70}, "fast", 13);
  const Case& k = c.k;
  const Tensor& real = c.real;
  const CondKV& kv = c.kv;
  const NullPath null = null_path(m, NullContextMode::Cache, 50);
  const Modulation mod = m.modulation(ops::OpPlan(), k.t1000);
  expect_matches(m, k, Condition{real, 2, &kv}, &null, &mod, "fast, contexts", {2, 3},
                 dir + "/slat.json");
  expect_matches(m, k, Condition{real, 2, nullptr}, &null, nullptr, "fast, contexts, no tables",
                 {4}, dir + "/slat.json");
}

TEST_F(SequenceParallelTest, DenseFamilyMatches) {
  S3D_TEST_DEVICE();
  Transformer m(load_checkpoint(dir + "/dense.json", kTestDevice));
  const int64_t R3 = 64;
  auto in =
      testing::synthetic_inputs({R3, R3}, 4, m.config().cond_channels, m.config().out_channels, 9);
  // The grid layout: every asset is the whole grid in raster order.
  int32_t* c = in.coords.data_as<int32_t>();
  for (int64_t t = 0; t < 2 * R3; ++t) {
    const int64_t i = t % R3;
    c[4 * t + 1] = static_cast<int32_t>(i / 16);
    c[4 * t + 2] = static_cast<int32_t>(i / 4 % 4);
    c[4 * t + 3] = static_cast<int32_t>(i % 4);
  }
  Case k;
  k.req = m.prepare(in.coords, 2, 4);
  k.x = in.noise.to(kTestDevice);
  k.t1000 = Tensor::from_floats({700.0f, 250.0f}, {2}, DType::F32).to(kTestDevice);
  k.cond = in.cond.to(kTestDevice);
  expect_matches(m, k, Condition{k.cond, 0, nullptr}, nullptr, nullptr, "dense, 2 grids");
}

TEST_F(SequenceParallelTest, SampledLatentsMatchInSerialAndBatchedCfg) {
  // The whole denoise loop (sampler::sample) with every forward sharded: the released sampler (its
  // guidance interval mixes steps with and without CFG) on every path, serial and batched CFG, with
  // the null-context paths.
  S3D_TEST_DEVICE();
  Transformer m(load_checkpoint(dir + "/slat.json", kTestDevice));
  auto in = testing::synthetic_inputs({26, 47}, 6, m.config().cond_channels, 32, 17);
  NullContext nc = NullContext::build(m, testing::qualified_options(6, {73}));
  for (const char* spec :
       {"pure_eager", "pure_eager+batched_cfg", "fast-batched_cfg", "fast", "beyond"}) {
    sampler::SamplerOptions o = sampler::SamplerOptions::released();
    o.steps = 4;
    o.apply(sparse3d::ExecutionPlan::parse(spec));
    o.null_context = &nc;
    const Tensor want = sampler::sample(m, in, o).latent;
    for (int P : {2, 3, 4}) {  // batched CFG: one rank per branch, all three, two per branch
      contract::reset_fallbacks();
      parallel::LocalGroup group(P, kTestDevice);
      SequenceParallel sp(std::vector<const Transformer*>(static_cast<size_t>(P), &m), group);
      o.parallel = &sp;
      const Tensor got = sampler::sample(m, in, o).latent;
      o.parallel = nullptr;
      if (kTestDevice == Device::CPU) {
        EXPECT_TRUE(testing::bitwise_equal(got, want)) << spec << ", P = " << P;
      } else {
        EXPECT_LE(testing::rel_l2(got.to_floats(), want.to_floats()), 2 * kGpuBound)
            << spec << ", P = " << P;
      }
      bool graphs_refused = false;
      for (const auto& f : contract::fallback_counts())
        graphs_refused |= f.reason.find("sequence parallel") != std::string::npos;
      EXPECT_EQ(graphs_refused, o.flags.on(sparse3d::Flag::cuda_graphs)) << spec;
    }
  }
}

TEST_F(SequenceParallelTest, RefusesWhatItCannotRun) {
  S3D_TEST_DEVICE();
  Transformer m(load_checkpoint(dir + "/slat.json", kTestDevice));
  Case k = make_case(m, {3}, 2, 0, {}, 1);
  parallel::LocalGroup four(4, kTestDevice), five(5, kTestDevice), two(2, kTestDevice);
  SequenceParallel sp4(std::vector<const Transformer*>(4, &m), four);
  EXPECT_ERROR(sp4.shard(k.req), "3 tokens cannot be split over 4");
  SequenceParallel sp5(std::vector<const Transformer*>(5, &m), five);
  EXPECT_ERROR(sp5.shard(k.req), "5 ranks do not divide the 12");
  EXPECT_ERROR((SequenceParallel(std::vector<const Transformer*>(3, &m), two)),
               "3 model replicas for a group of 2");
  SequenceParallel sp2(std::vector<const Transformer*>(2, &m), two);
  ShardedRequest sr = sp2.shard(k.req);
  const Condition cond{k.cond, 0, nullptr};
  EXPECT_ERROR(sp2.forward(sr, k.x.rows(0, 2), k.t1000, cond), "forward x");
  sr.whole.mlp_probe = [](int, const Tensor&) {};
  EXPECT_ERROR(sp2.forward(sr, k.x, k.t1000, cond), "MLP probe");
}

}  // namespace
}  // namespace s3d::model
