// Engine residency on the CPU backend (Engine::offload / reload, docs/API.md "Residency"):
// the same moves as on a GPU, between host buffers. The host copy is made once and repeated
// calls are no-ops, the null-context qualifications survive, the dense model's volumes keep
// their bits, borrowed weights go with the engine, are copied (and the log says why) when
// they cannot be borrowed and are checked as a file is, and release_cache() and Workspace
// need a GPU. What both backends check (the bits and counters of a move, reloads by
// request, a failed move, the weights away and back, the caller's tensors in place) is in
// tests/device/test_residency.cpp.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <cmath>
#include <vector>
#include <memory>
#include <filesystem>
#include <functional>
#include <string>

#include "../test_numerics.h"
#include "core/fault.h"
#include "io/json.h"
#include "core/cuda_util.h"
#include "model/checkpoint.h"
#include "model/config.h"
#include "model/trunk/transformer.h"
#include "model/trunk/weights.h"
#include "sparse3d/sparse3d.h"
#include "../caller_tensors.h"
#include "../model_inputs.h"

namespace {

namespace fs = std::filesystem;
using s3d::fault::Point;

const std::string kTiny = std::string(SPARSE3D_TEST_DATA) + "/golden/inputs/tiny.json";
const std::string kTinyDense =
    std::string(SPARSE3D_TEST_DATA) + "/golden-dense/inputs/tiny-ss.json";

bool same_bytes(const sparse3d::Array& a, const sparse3d::Array& b) {
  return a.view.shape == b.view.shape && a.view.dtype == b.view.dtype &&
         std::memcmp(a.view.data, b.view.data, a.view.nbytes()) == 0;
}

// The weights' bytes in their run-time dtypes, from the config alone.
size_t expected_weight_bytes(const std::string& checkpoint) {
  size_t n = 0;
  for (const auto& s : s3d::model::param_specs(s3d::model::read_config_file(checkpoint)))
    n += static_cast<size_t>(s3d::shape_numel(s.shape)) * s3d::dtype_size(s.runtime_dtype);
  return n;
}

using s3d::testing::error_of;

using s3d::testing::CallerTensors;

struct Residency : ::testing::Test {
  void SetUp() override {
    cache = (fs::temp_directory_path() /
             ("sparse3d_residency_" + std::to_string(getpid()) + "_" +
              ::testing::UnitTest::GetInstance()->current_test_info()->name()))
                .string();
    fs::remove_all(cache);
  }
  void TearDown() override {
    s3d::fault::arm(Point::HostAlloc, 0);
    fs::remove_all(cache);
  }
  sparse3d::EngineOptions options() const {
    sparse3d::EngineOptions o;
    o.device = sparse3d::DeviceChoice::CPU;
    o.cache_dir = cache;
    return o;
  }
  sparse3d::EngineOptions logged_options(std::vector<std::string>* log) const {
    sparse3d::EngineOptions o = options();
    o.log = [log](const std::string& line) { log->push_back(line); };
    return o;
  }
  // Two assets, CFG on every step: batched CFG and the null-context cache both run.
  static s3d::sampler::Inputs inputs() {
    return s3d::testing::synthetic_inputs({37, 21}, 9, 64, 32, 4);
  }
  static sparse3d::SampleRequest request(s3d::sampler::Inputs& in) {
    sparse3d::SampleRequest r = s3d::testing::sample_request(in, 17, 3);
    r.sampler.interval_lo = 0.0;
    return r;
  }

  std::string cache;
};

TEST_F(Residency, TheHostCopyIsMadeOnceAndRepeatedCallsAreNoOps) {
  sparse3d::Engine e(kTiny, options());
  auto in = inputs();
  const sparse3d::SampleRequest r = request(in);
  const sparse3d::SampleResult first = e.sample(r);
  e.reload();  // resident: nothing to do
  EXPECT_EQ(e.residency().reloads, 0u);
  e.offload();
  e.offload();  // already offloaded
  EXPECT_EQ(e.residency().offloads, 1u);
  const size_t copy = e.residency().host_copy_bytes;
  for (int round = 0; round < 3; ++round) {
    e.reload();
    EXPECT_TRUE(same_bytes(first.latent, e.sample(r).latent)) << "round " << round;
    e.offload();
  }
  const sparse3d::Residency res = e.residency();
  EXPECT_EQ(res.offloads, 4u);
  EXPECT_EQ(res.reloads, 3u);
  EXPECT_EQ(res.bytes_offloaded, res.weight_bytes);  // the later offloads copy nothing
  EXPECT_EQ(res.bytes_reloaded, 3 * copy);
  EXPECT_EQ(res.host_copy_bytes, copy);
}

TEST_F(Residency, TheNullContextQualificationsSurviveAnOffload) {
  sparse3d::Engine e(kTiny, options());
  auto in = inputs();
  const sparse3d::SampleRequest r = request(in);
  e.sample(r);
  const sparse3d::Counters c = e.counters();
  ASSERT_GE(c.qualifications_run, 1u);  // qualified now (the cache folder is new)
  e.offload();
  e.reload();
  e.sample(r);
  // Neither qualified again nor read back from the cache: the engine kept its state.
  EXPECT_EQ(e.counters().qualifications_run, c.qualifications_run);
  EXPECT_EQ(e.counters().qualification_cache_hits, c.qualification_cache_hits);
  ASSERT_EQ(e.qualification().size(), 1u);
  EXPECT_TRUE(e.qualification()[0].applicable);
}

TEST_F(Residency, TheDenseModelInVolumesGivesTheSameBits) {
  sparse3d::Engine e(kTinyDense, options());
  ASSERT_EQ(e.model().family, "SparseStructureFlowModel");
  std::vector<float> cond(2 * 9 * 64);
  s3d::normal_fill(3, 0, cond.size(), cond.data());
  sparse3d::SampleRequest r;
  r.batch = 2;
  r.cond = {cond.data(), sparse3d::DType::F32, sparse3d::Device::CPU, 0, {2, 9, 64}};
  r.seed = 8;
  r.sampler = sparse3d::SamplerSettings::released_sparse_structure();
  r.sampler.steps = 2;
  r.sampler.interval_lo = 0.0;
  const sparse3d::SampleResult before = e.sample(r);
  ASSERT_EQ(before.latent.view.shape, (std::vector<int64_t>{2, 8, 8, 8, 8}));
  e.offload();
  EXPECT_EQ(e.residency().bytes_offloaded, expected_weight_bytes(kTinyDense));
  e.reload();
  EXPECT_TRUE(same_bytes(before.latent, e.sample(r).latent));
}

// Borrowed weights (InMemoryCheckpoint::borrow) on the host: the caller's tensors go with the
// engine, what cannot be borrowed is copied (and the log says why), and what is borrowed is
// checked as a file is (an engine using them in place: tests/device/test_residency.cpp).
// release_cache() is a no-op without a GPU, and a Workspace is refused without one.

TEST_F(Residency, TheCallersTensorsGoWithTheEngine) {
  auto token = std::make_shared<int>(0);
  std::weak_ptr<int> held = token;
  CallerTensors caller(kTiny, false, token);
  token.reset();
  {
    sparse3d::Engine e(caller.ck, options());
    caller.ck.keep_alive.reset();
    EXPECT_FALSE(held.expired());
  }
  EXPECT_TRUE(held.expired());
}

TEST_F(Residency, WhatCannotBeBorrowedIsCopiedAndTheLogSaysWhy) {
  // Every tensor in f32: the blocks' Linear layers run in bf16, so they need a conversion.
  CallerTensors caller(kTiny, false, nullptr);
  std::vector<std::vector<float>> f32;
  sparse3d::InMemoryCheckpoint m;
  m.config_json = caller.ck.config_json;
  for (auto& [name, t] : caller.host.tensors) {
    f32.push_back(t.to_floats());
    m.tensors.emplace_back(name, sparse3d::TensorView{f32.back().data(), sparse3d::DType::F32,
                                                      sparse3d::Device::CPU, 0, t.shape()});
  }
  m.borrow = true;
  std::vector<std::string> log;
  sparse3d::Engine e(m, logged_options(&log));
  EXPECT_EQ(e.residency().weights_source, "own copy");
  bool said = false;
  for (const auto& line : log)
    said = said || (line.find("copied, not borrowed") != std::string::npos &&
                    line.find("run-time dtype is bf16") != std::string::npos);
  EXPECT_TRUE(said) << "the log names why the weights were copied";
  auto in = inputs();
  const sparse3d::SampleRequest r = request(in);
  EXPECT_TRUE(same_bytes(sparse3d::Engine(kTiny, options()).sample(r).latent, e.sample(r).latent));
}

TEST_F(Residency, BorrowedTensorsAreCheckedAsAFileIs) {
  CallerTensors caller(kTiny, false, nullptr);
  // A NaN in one weight: refused by name, as from a file.
  auto& [name, t] = *caller.host.tensors.begin();
  const std::string bad = name;
  if (t.dtype() == s3d::DType::F32) static_cast<float*>(t.data())[t.numel() - 1] = NAN;
  else static_cast<uint16_t*>(t.data())[t.numel() - 1] = 0x7fc0;
  const std::string e1 = s3d::testing::error_of(
      [&] { sparse3d::Engine e(caller.ck, options()); });
  EXPECT_NE(e1.find("non-finite"), std::string::npos) << e1;
  EXPECT_NE(e1.find(bad), std::string::npos) << e1;

  // A tensor missing: the strict check names it.
  CallerTensors missing(kTiny, false, nullptr);
  sparse3d::InMemoryCheckpoint m = missing.ck;
  const std::string dropped = m.tensors.back().first;
  m.tensors.pop_back();
  const std::string e2 = s3d::testing::error_of([&] { sparse3d::Engine e(m, options()); });
  EXPECT_NE(e2.find(dropped), std::string::npos) << e2;
}

TEST_F(Residency, AWorkspaceIsAGpusAndRefusedWithoutOne) {
  if (s3d::cuda_available()) GTEST_SKIP() << "a GPU is present (the GPU tests cover workspaces)";
  const std::string e = s3d::testing::error_of([] { sparse3d::Workspace w(0); });
  EXPECT_NE(e.find("no usable CUDA device"), std::string::npos) << e;
}

TEST_F(Residency, ReleaseCacheIsANoOpOnTheCpuBackend) {
  sparse3d::Engine e(kTiny, options());
  EXPECT_EQ(e.release_cache(), 0u);
  auto in = inputs();
  const sparse3d::SampleRequest r = request(in);
  const sparse3d::SampleResult a = e.sample(r);
  EXPECT_EQ(e.release_cache(), 0u);
  EXPECT_TRUE(same_bytes(a.latent, e.sample(r).latent));
}

}  // namespace
