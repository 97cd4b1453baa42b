// The public Engine API (include/sparse3d/engine.h) on the CPU backend: requests from
// caller-owned host buffers, the seed and caller noise agreeing, forward() against the first
// step of sample(), callbacks, stop, errors with their messages, the null-context paths'
// qualifications, warm-up, and checkpoints handed over as state dicts. Progress, the
// qualification cache across Engines, new token counts and two Engines on two threads run on
// both backends in tests/device/test_engine.cpp.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>

#include "core/cuda_util.h"
#include "io/safetensors.h"
#include "device/device_test_util.h"
#include "engine_test_util.h"
#include "sparse3d/sparse3d.h"
#include "../model_inputs.h"

namespace {

namespace fs = std::filesystem;
using sparse3d::DType;
using sparse3d::Device;

const std::string& kTiny = s3d::test::kTinyCheckpoint;
using s3d::test::view;

bool same_bytes(const sparse3d::Array& a, const sparse3d::Array& b) {
  return a.view.shape == b.view.shape && a.view.dtype == b.view.dtype &&
         std::memcmp(a.view.data, b.view.data, a.view.nbytes()) == 0;
}

struct EngineApi : ::testing::Test {
  void SetUp() override {
    cache = (fs::temp_directory_path() / ("sparse3d_engine_" + std::to_string(getpid()) + "_" +
                                          ::testing::UnitTest::GetInstance()->current_test_info()->name()))
                .string();
    fs::remove_all(cache);
  }
  void TearDown() override { fs::remove_all(cache); }

  sparse3d::EngineOptions options(const std::string& path = "") const {
    return s3d::test::cpu_options(cache, path);
  }
  // A request over `in`'s host tensors (they must outlive it): 3 steps, CFG on every step.
  static sparse3d::SampleRequest request(s3d::sampler::Inputs& in, uint64_t seed) {
    sparse3d::SampleRequest r;
    r.coords = view(in.coords);
    r.batch = in.batch;
    r.cond = view(in.cond);
    r.seed = seed;
    r.sampler = sparse3d::SamplerSettings::protocol();
    r.sampler.steps = 3;
    r.sampler.guidance_rescale = 0.5;
    return r;
  }
  static s3d::sampler::Inputs inputs(std::vector<int64_t> counts, uint64_t seed) {
    return s3d::testing::synthetic_inputs(counts, 9, 64, 32, seed);
  }

  std::string cache;
};

TEST_F(EngineApi, LoadsTheTinyCheckpointOnTheCpu) {
  sparse3d::Engine e(kTiny, options());
  EXPECT_EQ(e.device(), Device::CPU);
  EXPECT_EQ(e.model().family, "SLatFlowModel");
  EXPECT_EQ(e.model().out_channels, 32);
  EXPECT_EQ(e.model().content_hash.size(), 16u);
  // The CPU default: fast without CUDA graphs.
  EXPECT_EQ(e.plan().label(), "fast-cuda_graphs");
  EXPECT_FALSE(e.fingerprint().empty());
}

TEST_F(EngineApi, SeedAndCallerNoiseGiveTheSameBits) {
  sparse3d::Engine e(kTiny, options());
  auto in = inputs({61, 40}, 5);
  sparse3d::SampleRequest r = request(in, 77);
  sparse3d::SampleResult seeded = e.sample(r);
  sparse3d::Array noise = sparse3d::draw_noise(77, 101, 32);
  r.noise = noise.view;
  std::vector<float> out(101 * 32, -1.0f);
  r.out = {out.data(), DType::F32, Device::CPU, 0, {101, 32}};
  sparse3d::SampleResult given = e.sample(r);
  ASSERT_TRUE(same_bytes(seeded.latent, given.latent));
  EXPECT_EQ(given.latent.view.data, out.data());  // written into the caller's buffer
  EXPECT_EQ(seeded.steps.size(), 3u);
  EXPECT_GT(seeded.stats.loop_seconds, 0.0);  // (the CPU backend counts no launches)
  EXPECT_EQ(seeded.stats.tokens, 101);
}

TEST_F(EngineApi, ForwardIsTheFirstStepOfSample) {
  sparse3d::Engine e(kTiny, options("kernel_fusion"));
  auto in = inputs({61}, 6);
  sparse3d::SampleRequest r = request(in, 9);
  r.keep_first_forward = true;
  sparse3d::SampleResult s = e.sample(r);
  sparse3d::Array x = sparse3d::draw_noise(9, 61, 32);
  float t1000 = 1000.0f;
  sparse3d::ForwardRequest f;
  f.x = x.view;
  f.t = {&t1000, DType::F32, Device::CPU, 0, {1}};
  f.coords = view(in.coords);
  f.cond = view(in.cond);
  sparse3d::Array v = e.forward(f);
  EXPECT_TRUE(same_bytes(v, s.first_v_cond));
  // With `stats`: the same values, and the stats filled (the CPU backend launches nothing).
  sparse3d::RequestStats st;
  st.launches = 12345;  // overwritten
  f.stats = &st;
  EXPECT_TRUE(same_bytes(e.forward(f), s.first_v_cond));
  EXPECT_EQ(st.tokens, 61);
  EXPECT_EQ(st.plan, "kernel_fusion");
  EXPECT_NE(st.launches, 12345u);
  EXPECT_GT(st.loop_seconds, 0.0);
  uint64_t by_op = 0;
  for (const auto& [op, n] : st.launches_by_op) by_op += n;
  EXPECT_EQ(by_op, st.launches);
}

TEST_F(EngineApi, NoiseOffsetContinuesTheStream) {
  // Rows 3.. of a draw from offset 0 are a draw from offset 3 x cols.
  const sparse3d::Array all = sparse3d::draw_noise(5, 8, 4);
  const sparse3d::Array tail = sparse3d::draw_noise(5, 5, 4, 12);
  EXPECT_EQ(std::memcmp(static_cast<const float*>(all.view.data) + 12, tail.view.data,
                        tail.view.nbytes()),
            0);
  EXPECT_EQ(sparse3d::timesteps(sparse3d::SamplerSettings::protocol()).size(), 16u);
}

TEST_F(EngineApi, CallbackSeesEveryStepAndTheLatent) {
  sparse3d::Engine e(kTiny, options("pure_eager"));
  auto in = inputs({61}, 7);
  sparse3d::SampleRequest r = request(in, 3);
  std::vector<int> seen;
  r.on_step = [&](const sparse3d::StepInfo& s) {
    seen.push_back(s.index);
    EXPECT_EQ(s.total, 3);
    EXPECT_EQ(s.latent.shape, (std::vector<int64_t>{61, 32}));
    EXPECT_NE(s.latent.data, nullptr);
  };
  e.sample(r);
  EXPECT_EQ(seen, (std::vector<int>{0, 1, 2}));
}

void expect_error(const std::function<void()>& fn, const std::string& needle);

// SampleRequest::stop: asked after each step but the last; true after step 2 of 9 ends the
// request with one error naming the step, and the engine's next request gives the bits of an
// engine that was never stopped.
TEST_F(EngineApi, StopEndsTheRequestBetweenSteps) {
  sparse3d::Engine e(kTiny, options("beyond"));
  auto in = inputs({61}, 9);
  sparse3d::SampleRequest r = request(in, 4);
  r.sampler.steps = 9;
  int asked = 0;
  std::vector<int> seen;
  r.on_step = [&](const sparse3d::StepInfo& s) { seen.push_back(s.index); };
  r.stop = [&] { return ++asked == 2; };
  expect_error([&] { e.sample(r); }, "sample: interrupted after step 2 of 9");
  EXPECT_EQ(asked, 2);
  EXPECT_EQ(seen, (std::vector<int>{0, 1}));
  // Never true: asked after every step but the last, and the request completes.
  asked = 0;
  r.on_step = nullptr;
  r.stop = [&] { ++asked; return false; };
  const sparse3d::SampleResult after = e.sample(r);
  EXPECT_EQ(asked, 8);
  sparse3d::Engine fresh(kTiny, options("beyond"));
  r.stop = nullptr;
  EXPECT_TRUE(same_bytes(fresh.sample(r).latent, after.latent));
}

void expect_error(const std::function<void()>& fn, const std::string& needle) {
  try {
    fn();
    ADD_FAILURE() << "no error; expected one mentioning '" << needle << "'";
  } catch (const sparse3d::Error& err) {
    EXPECT_NE(std::string(err.what()).find(needle), std::string::npos) << err.what();
  }
}

TEST_F(EngineApi, BadInputsAreOneClearError) {
  expect_error([&] { sparse3d::Engine(cache + "/none.json", options()); }, "none.json");
  expect_error([&] { sparse3d::Engine(kTiny, options("fastest")); }, "unknown execution path 'fastest'");
  sparse3d::EngineOptions bad_flag = options("beyond+turbo");
  expect_error([&] { sparse3d::Engine(kTiny, bad_flag); }, "unknown optimization flag 'turbo'");
  sparse3d::Engine e(kTiny, options());
  auto in = inputs({61}, 8);
  sparse3d::SampleRequest r = request(in, 1);
  r.cond.shape = {1, 9, 63};
  expect_error([&] { e.sample(r); }, "cond must be [1, L, 64]");
  r = request(in, 1);
  r.coords.dtype = DType::F32;
  expect_error([&] { e.sample(r); }, "coords");
  r = request(in, 1);
  r.batch = 2;
  expect_error([&] { e.sample(r); }, "cond must be [2, L, 64]");
  r = request(in, 1);
  r.sampler.steps = 0;
  expect_error([&] { e.sample(r); }, "steps must be in [1, 10000]");
  r = request(in, 1);
  std::vector<float> small(10);
  r.out = {small.data(), DType::F32, Device::CPU, 0, {10}};
  expect_error([&] { e.sample(r); }, "out must be f32[61, 32]");
  r = request(in, 1);
  r.coords.data = nullptr;
  expect_error([&] { e.sample(r); }, "coords: no data");
  // The engine stays usable after a refused request.
  EXPECT_EQ(e.sample(request(in, 1)).latent.view.shape, (std::vector<int64_t>{61, 32}));
  if (!s3d::cuda_available()) {
    sparse3d::EngineOptions cuda = options();
    cuda.device = sparse3d::DeviceChoice::CUDA;
    expect_error([&] { sparse3d::Engine(kTiny, cuda); }, "no usable CUDA device");
  }
}

using s3d::test::null_fallbacks;

// The exact null path under batched CFG qualifies the batched slices alone (no cached row,
// so no candidate M): it used to pick an M from a candidate table it never made and crash.
TEST_F(EngineApi, TheExactNullPathWithBatchedCfgQualifiesItsSlicesOnly) {
  auto in = inputs({61, 40}, 25);
  sparse3d::Engine exact(kTiny, options("prior_exact_null+batched_cfg"));
  const sparse3d::SampleResult got = exact.sample(request(in, 7));
  EXPECT_EQ(exact.counters().qualifications_run, 1u);
  sparse3d::Engine reference(kTiny, options("pure_eager+batched_cfg"));
  const sparse3d::SampleResult want = reference.sample(request(in, 7));
  // null_context_exact is bitwise: where its slices hold it gives the reference's bits, and
  // where they do not it runs the reference, counted.
  EXPECT_TRUE(same_bytes(got.latent, want.latent));
}

TEST_F(EngineApi, ARequestWithoutTheUnconditionalBranchQualifiesNothing) {
  auto in = inputs({61}, 24);
  for (const char* path : {"canonical_cache_null", "beyond", "fast", "prior_exact_null"}) {
    sparse3d::Engine e(kTiny, options(path));
    sparse3d::SampleRequest r = request(in, 6);
    r.sampler.guidance = 1.0;  // TRELLIS.2's texture stage: no CFG step
    const sparse3d::SampleResult out = e.sample(r);
    EXPECT_EQ(e.counters().qualifications_run, 0u) << path;
    EXPECT_TRUE(e.qualification().empty()) << path;  // not even probed
    EXPECT_EQ(null_fallbacks(e), 0u) << path;
    EXPECT_EQ(out.stats.null_context_seconds, 0.0) << path;
    // The same request without the null flags: they changed nothing.
    sparse3d::FlagSet without = sparse3d::ExecutionPlan::of_path(path).flags();
    without.set(sparse3d::Flag::null_context_cache, false);
    without.set(sparse3d::Flag::null_context_exact, false);
    r.flags = without;
    EXPECT_TRUE(same_bytes(e.sample(r).latent, out.latent)) << path;
  }
  // Serial CFG on the exact path needs the probe only, no qualification.
  sparse3d::Engine exact(kTiny, options("prior_exact_null"));
  exact.sample(request(in, 6));
  EXPECT_EQ(exact.counters().qualifications_run, 0u);
  ASSERT_EQ(exact.qualification().size(), 1u);
  EXPECT_TRUE(exact.qualification()[0].applicable);
}

TEST_F(EngineApi, WarmUpQualifiesAheadOfTheFirstRequest) {
  sparse3d::Engine e(kTiny, options("canonical_cache_combined"));
  e.warm_up({61}, 9);
  EXPECT_EQ(e.counters().qualifications_run, 1u);
  auto in = inputs({61}, 13);
  const sparse3d::SampleResult r = e.sample(request(in, 5));
  EXPECT_EQ(e.counters().qualifications_run, 1u);  // nothing left for the request to build
  EXPECT_EQ(r.latent.view.shape, (std::vector<int64_t>{61, 32}));
  EXPECT_THROW(e.warm_up({0}, 9), sparse3d::Error);
}

TEST_F(EngineApi, AStateDictInMemoryLoadsAsItsFile) {
  // The tiny checkpoint's tensors as a caller would hand over a state dict: some f32, some
  // bf16 (both are accepted), in no particular order.
  s3d::io::SafetensorsFile file = s3d::io::SafetensorsFile::open(
      std::string(SPARSE3D_TEST_DATA) + "/golden/inputs/tiny.safetensors");
  std::vector<s3d::Tensor> held;
  sparse3d::InMemoryCheckpoint ck;
  {
    std::ifstream js(kTiny);
    ck.config_json.assign(std::istreambuf_iterator<char>(js), {});
  }
  ck.name = "tiny state dict";
  int i = 0;
  for (const auto& e : file.entries()) {
    held.push_back(file.load(e.name, i++ % 2 ? DType::F32 : DType::BF16));
    ck.tensors.emplace_back(e.name, view(held.back()));
  }
  std::reverse(ck.tensors.begin(), ck.tensors.end());
  sparse3d::Engine from_file(kTiny, options());
  sparse3d::Engine from_memory(ck, options());
  EXPECT_EQ(from_memory.model().checkpoint, "tiny state dict");
  auto in = inputs({37}, 3);
  sparse3d::SampleRequest r = request(in, 4);
  // The file is bf16, so an f32 copy of it converts back to the same bits: the same hash
  // and the same latent.
  EXPECT_EQ(from_memory.model().content_hash, from_file.model().content_hash);
  EXPECT_TRUE(same_bytes(from_memory.sample(r).latent, from_file.sample(r).latent));

  // A missing tensor, an unexpected one and a wrong shape: one error naming each.
  sparse3d::InMemoryCheckpoint bad = ck;
  bad.tensors.pop_back();
  float extra = 1;
  bad.tensors.emplace_back("blocks.99.extra", sparse3d::TensorView{&extra, DType::F32, Device::CPU, 0, {1}});
  bad.tensors[0].second.shape.back() += 1;
  try {
    sparse3d::Engine e(bad, options());
    FAIL() << "a mismatched state dict loaded";
  } catch (const sparse3d::Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("tiny state dict does not match its config (3 problems)"), std::string::npos) << m;
    EXPECT_NE(m.find("missing: "), std::string::npos) << m;
    EXPECT_NE(m.find("unexpected: blocks.99.extra"), std::string::npos) << m;
    EXPECT_NE(m.find("wrong shape: " + bad.tensors[0].first), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << "one line: " << m;
  }
  // Many problems: the first 30 listed, then how many more (not a message of megabytes).
  sparse3d::InMemoryCheckpoint empty = ck;
  const size_t total = empty.tensors.size();
  empty.tensors.clear();
  try {
    sparse3d::Engine e(empty, options());
    FAIL() << "an empty state dict loaded";
  } catch (const sparse3d::Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("(" + std::to_string(total) + " problems)"), std::string::npos) << m;
    EXPECT_NE(m.find("and " + std::to_string(total - 30) + " more"), std::string::npos) << m;
    EXPECT_LT(m.size(), 4000u) << m;
  }
  // Weights of an integer type are refused by name.
  sparse3d::InMemoryCheckpoint ints = ck;
  ints.tensors[1].second.dtype = DType::I32;
  EXPECT_THROW(
      {
        try {
          sparse3d::Engine e(ints, options());
        } catch (const sparse3d::Error& e) {
          EXPECT_NE(std::string(e.what()).find(ints.tensors[1].first), std::string::npos);
          throw;
        }
      },
      sparse3d::Error);
  // A config that is not JSON.
  sparse3d::InMemoryCheckpoint text = ck;
  text.config_json = "{not json";
  EXPECT_THROW(sparse3d::Engine(text, options()), sparse3d::Error);
}

TEST_F(EngineApi, NonFiniteWeightsAreRefusedAtLoadByName) {
  // One NaN (or infinity) in t_embedder.mlp.0.weight: a file and a state dict alike are
  // refused before any request, with the tensor's name.
  s3d::io::SafetensorsFile file = s3d::io::SafetensorsFile::open(
      std::string(SPARSE3D_TEST_DATA) + "/golden/inputs/tiny.safetensors");
  std::vector<std::pair<std::string, s3d::Tensor>> tensors;
  for (const auto& e : file.entries()) tensors.emplace_back(e.name, file.load(e.name, DType::F32));
  const std::string target = "t_embedder.mlp.0.weight";
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    for (auto& [name, t] : tensors)
      if (name == target) t.data_as<float>()[17] = bad;
    const std::string prefix = cache + "/nan_model";
    fs::create_directories(cache);
    s3d::io::write_safetensors(prefix + ".safetensors", tensors);
    fs::copy_file(kTiny, prefix + ".json", fs::copy_options::overwrite_existing);
    try {
      sparse3d::Engine e(prefix + ".json", options());
      FAIL() << "a checkpoint with " << bad << " loaded";
    } catch (const sparse3d::Error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("tensor " + target + " has a non-finite value"), std::string::npos) << m;
      EXPECT_NE(m.find("at element 17"), std::string::npos) << m;
    }
    std::ifstream js(kTiny);
    sparse3d::InMemoryCheckpoint ck;
    ck.config_json.assign(std::istreambuf_iterator<char>(js), {});
    for (auto& [name, t] : tensors) ck.tensors.emplace_back(name, view(t));
    EXPECT_THROW(
        {
          try {
            sparse3d::Engine e(ck, options());
          } catch (const sparse3d::Error& e) {
            EXPECT_NE(std::string(e.what()).find(target), std::string::npos) << e.what();
            throw;
          }
        },
        sparse3d::Error);
  }
}

}  // namespace
