// The public Engine API on the test device (tests/device_under_test.h), tiny preset, inputs
// and outputs on the device: progress reported after every step without changing a bit; a
// second Engine takes the probe's verdict from the qualification cache and gives the same
// bits; a token count met after others gives the bits of a fresh engine and is qualified once;
// two Engines on two threads give the bits each gives alone. The CPU backend's own checks
// (caller noise, forward(), callbacks, stop, errors, state dicts) are in
// tests/cpu/test_engine.cpp; the caller's CUDA streams in tests/gpu/test_engine_gpu.cpp.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "array_bytes.h"
#include "device/device_test_util.h"
#include "model_inputs.h"
#include "sparse3d/sparse3d.h"

namespace {

namespace fs = std::filesystem;
using s3d::test::kTestDevice;
using s3d::test::kTestOnCuda;

// Token counts: the CPU's small, the GPU's past a tile.
int64_t tokens(int64_t cpu, int64_t gpu) { return kTestOnCuda ? gpu : cpu; }

struct EngineApiOnDevice : ::testing::Test {
  static void TearDownTestSuite() {
    if (!dir.empty()) fs::remove_all(dir);
    dir.clear();
  }
  void SetUp() override {
    S3D_TEST_DEVICE();
    if (dir.empty()) dir = s3d::test::scratch_dir("engine_device");
    checkpoint = s3d::test::checkpoint_in(dir, "tiny", s3d::model::preset("tiny"), 5);
    cache = dir + "/cache_" + ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(cache);
  }
  void TearDown() override {
    if (!cache.empty()) fs::remove_all(cache);
  }
  sparse3d::EngineOptions options(const std::string& path) const {
    return s3d::test::test_engine_options(path, cache);
  }
  static s3d::sampler::Inputs inputs(const std::vector<int64_t>& counts, uint64_t seed) {
    return s3d::testing::synthetic_inputs(counts, 13, 64, 32, seed);
  }
  // A request over copies of `in` on the test device (kept alive in `keep`): the released
  // sampler, 4 steps, `in`'s noise.
  static sparse3d::SampleRequest request(s3d::sampler::Inputs& in, std::vector<s3d::Tensor>& keep) {
    keep = {in.coords.to(kTestDevice), in.cond.to(kTestDevice), in.noise.to(kTestDevice)};
    sparse3d::SampleRequest r;
    r.coords = s3d::test::view_of(keep[0]);
    r.batch = in.batch;
    r.cond = s3d::test::view_of(keep[1]);
    r.noise = s3d::test::view_of(keep[2]);
    r.sampler = sparse3d::SamplerSettings::released();
    r.sampler.steps = 4;
    return r;
  }
  static std::string dir;
  std::string checkpoint, cache;
};
std::string EngineApiOnDevice::dir;

// SampleRequest::on_progress: each step reported once, in order, the last after the loop
// (on the GPU with no synchronisation of its own: the host stays one step ahead); the bits
// of a request without it.
TEST_F(EngineApiOnDevice, ProgressReportsEveryStepInOrderAndChangesNoBit) {
  sparse3d::Engine e(checkpoint, options(""));
  auto in = inputs({tokens(61, 333), 61}, 4);
  std::vector<s3d::Tensor> keep;
  sparse3d::SampleRequest r = request(in, keep);
  r.sampler.steps = 6;
  const std::vector<uint8_t> plain = bytes_of(e.sample(r).latent);
  std::vector<std::pair<int, int>> seen;
  r.on_progress = [&](int done, int total) { seen.emplace_back(done, total); };
  const std::vector<uint8_t> with = bytes_of(e.sample(r).latent);
  EXPECT_EQ(seen,
            (std::vector<std::pair<int, int>>{{1, 6}, {2, 6}, {3, 6}, {4, 6}, {5, 6}, {6, 6}}));
  EXPECT_EQ(with, plain);
}

// The probe's verdict is persisted; a token count's qualification is not (it costs a few
// GEMMs): the second engine takes the verdict from the cache, qualifies the count again (on
// the device) and gets the same outcome and the same bits.
TEST_F(EngineApiOnDevice, SecondEngineTakesTheProbeVerdictFromTheCacheAndQualifiesAgain) {
  auto in = inputs({tokens(61, 1001)}, 4);
  std::vector<s3d::Tensor> keep;
  std::vector<uint8_t> first;
  {
    sparse3d::Engine e(checkpoint, options(""));
    const sparse3d::SampleResult r = e.sample(request(in, keep));
    first = bytes_of(r.latent);
    EXPECT_EQ(e.counters().qualifications_run, 1u);
    EXPECT_EQ(e.counters().qualification_cache_hits, 0u);
    ASSERT_EQ(e.qualification().size(), 1u);
    ASSERT_EQ(e.qualification()[0].shapes.size(), 1u);
    EXPECT_EQ(e.qualification()[0].shapes[0].source, "qualified");
    EXPECT_GT(r.stats.null_context_seconds, 0.0);
  }
  sparse3d::Engine e(checkpoint, options(""));
  EXPECT_EQ(bytes_of(e.sample(request(in, keep)).latent), first);
  EXPECT_EQ(e.counters().qualifications_run, 1u);
  EXPECT_EQ(e.counters().qualification_cache_hits, 1u);
  if (!kTestOnCuda) {  // the CPU GEMM: every M gives the reference's bits
    EXPECT_EQ(e.qualification()[0].shapes[0].m, 1);
  }
  EXPECT_TRUE(e.counters().fallbacks.empty());
}

using s3d::test::null_fallbacks;

// A service meets a new token count with nearly every asset: the request at a count met after
// others gives the bits it gives on a fresh engine, each count is qualified once (on the
// device) by the request that meets it, a repeat qualifies and builds nothing, and a request
// whose steps never run the unconditional branch qualifies nothing at all.
TEST_F(EngineApiOnDevice, ANewTokenCountAfterOthersGivesTheBitsOfAFreshEngine) {
  for (const char* path : {"fast", "beyond", "canonical_cache_null"}) {
    SCOPED_TRACE(path);
    auto a = inputs({tokens(61, 1001)}, 31), b = inputs({tokens(40, 777)}, 32),
         c = inputs({tokens(77, 1537)}, 33);
    std::vector<s3d::Tensor> ka, kb, kc;
    sparse3d::Engine fresh(checkpoint, options(path));
    const std::vector<uint8_t> alone = bytes_of(fresh.sample(request(c, kc)).latent);
    sparse3d::Engine used(checkpoint, options(path));
    used.sample(request(a, ka));
    used.sample(request(b, kb));
    EXPECT_EQ(bytes_of(used.sample(request(c, kc)).latent), alone);
    EXPECT_EQ(used.counters().qualifications_run, 3u);
    EXPECT_EQ(null_fallbacks(used), 0u);
    const sparse3d::SampleResult again = used.sample(request(c, kc));
    EXPECT_EQ(bytes_of(again.latent), alone);
    EXPECT_EQ(used.counters().qualifications_run, 3u);
    EXPECT_EQ(again.stats.null_context_seconds, 0.0);
    // No graph or plan built again (device blocks may be: each request's CUDA graphs get a
    // private pool).
    EXPECT_EQ(again.stats.first_use.count("attention_graph"), 0u);
    EXPECT_EQ(again.stats.first_use.count("gemm_plan"), 0u);
    if (kTestOnCuda) {  // (the CPU backend counts cuda_graphs' refusal too)
      EXPECT_TRUE(used.counters().fallbacks.empty());
    }
    sparse3d::Engine texture_like(checkpoint, options(path));
    sparse3d::SampleRequest r = request(c, kc);
    r.sampler.guidance = 1.0;  // TRELLIS.2's texture stage: no CFG step
    texture_like.sample(r);
    EXPECT_EQ(texture_like.counters().qualifications_run, 0u);
    EXPECT_TRUE(texture_like.qualification().empty());
  }
}

TEST_F(EngineApiOnDevice, TwoEnginesOnTwoThreadsGiveTheBitsEachGivesAlone) {
  auto a_in = inputs({tokens(61, 777)}, 5);
  auto b_in = inputs({tokens(40, 250), tokens(33, 61)}, 6);
  sparse3d::Engine a(checkpoint, options("pure_eager"));
  sparse3d::Engine b(checkpoint, options(""));
  std::vector<s3d::Tensor> ka, kb;
  const auto a_alone = bytes_of(a.sample(request(a_in, ka)).latent);
  const auto b_alone = bytes_of(b.sample(request(b_in, kb)).latent);
  std::vector<std::vector<uint8_t>> a_runs(3), b_runs(3);
  std::thread ta([&] {
    std::vector<s3d::Tensor> k;
    for (auto& r : a_runs) r = bytes_of(a.sample(request(a_in, k)).latent);
  });
  std::thread tb([&] {
    std::vector<s3d::Tensor> k;
    for (auto& r : b_runs) r = bytes_of(b.sample(request(b_in, k)).latent);
  });
  ta.join();
  tb.join();
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(a_runs[i], a_alone) << "engine a, run " << i;
    EXPECT_EQ(b_runs[i], b_alone) << "engine b, run " << i;
  }
  // Counters are each engine's own.
  EXPECT_EQ(a.counters().requests, 4u);
  EXPECT_EQ(b.counters().requests, 4u);
}

}  // namespace
