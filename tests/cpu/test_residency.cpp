// Engine residency on the CPU backend (Engine::offload / reload, docs/API.md "Residency"):
// the same moves as on a GPU, between host buffers. A request after offload and reload gives
// the bits it gave before, the host copy is made once, the counters say what moved, the
// null-context qualifications survive, a failed move changes nothing, and the model refuses
// a forward while its weights are away.
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

// The tiny checkpoint's tensors in their run-time dtypes, on the host, owned by the test (what
// a PyTorch module's parameters are to the drop-in).
struct Caller {
  s3d::model::Checkpoint ck = s3d::model::read_checkpoint(kTiny);
  std::string config_json = s3d::model::config_to_json(ck.config).dump();

  sparse3d::InMemoryCheckpoint borrowing(std::shared_ptr<void> keep_alive) {
    sparse3d::InMemoryCheckpoint m;
    m.config_json = config_json;
    m.name = "caller's tensors";
    for (auto& [name, t] : ck.tensors)
      m.tensors.emplace_back(name, sparse3d::TensorView{t.data(), t.dtype(), sparse3d::Device::CPU,
                                                        0, t.shape()});
    m.borrow = true;
    m.keep_alive = std::move(keep_alive);
    return m;
  }
};

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

TEST_F(Residency, OffloadAndReloadGiveTheSameBitsAndSayWhatMoved) {
  sparse3d::Engine e(kTiny, options());
  auto in = inputs();
  const sparse3d::SampleRequest r = request(in);
  const sparse3d::SampleResult before = e.sample(r);

  sparse3d::Residency res = e.residency();
  const size_t weights = expected_weight_bytes(kTiny);
  EXPECT_TRUE(res.resident);
  EXPECT_EQ(res.weight_bytes, weights);
  EXPECT_EQ(res.offloads, 0u);
  EXPECT_EQ(res.host_copy_bytes, 0u);  // no copy before the first offload

  e.offload();
  res = e.residency();
  EXPECT_FALSE(res.resident);
  EXPECT_EQ(res.offloads, 1u);
  EXPECT_EQ(res.bytes_offloaded, weights);  // every weight copied once
  // The copy holds each tensor at a 256-byte aligned offset: the gaps are under 256 bytes a
  // tensor.
  const size_t tensors = s3d::model::param_specs(s3d::model::read_config_file(kTiny)).size();
  EXPECT_GE(res.host_copy_bytes, weights);
  EXPECT_LT(res.host_copy_bytes, weights + 256 * tensors);
  EXPECT_EQ(res.host_copy_bytes % 256, 0u);
  EXPECT_EQ(res.device_bytes_released, 0u);  // no device memory on the CPU backend

  e.reload();
  res = e.residency();
  EXPECT_TRUE(res.resident);
  EXPECT_EQ(res.reloads, 1u);
  EXPECT_EQ(res.bytes_reloaded, res.host_copy_bytes);  // one copy of the whole buffer
  EXPECT_GE(res.offload_seconds, 0.0);
  EXPECT_GE(res.reload_seconds, 0.0);
  const sparse3d::SampleResult after = e.sample(r);
  EXPECT_TRUE(same_bytes(before.latent, after.latent));
}

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

TEST_F(Residency, ARequestAfterOffloadReloadsByItself) {
  sparse3d::Engine e(kTiny, options());
  auto in = inputs();
  const sparse3d::SampleRequest r = request(in);
  const sparse3d::SampleResult before = e.sample(r);
  e.offload();
  EXPECT_TRUE(same_bytes(before.latent, e.sample(r).latent));
  EXPECT_TRUE(e.residency().resident);
  EXPECT_EQ(e.residency().reloads, 1u);

  // forward() and warm_up() too.
  sparse3d::ForwardRequest f;
  f.x = {in.noise.data(), sparse3d::DType::F32, sparse3d::Device::CPU, 0, in.noise.shape()};
  const float t[2] = {700.0f, 700.0f};
  f.t = {const_cast<float*>(t), sparse3d::DType::F32, sparse3d::Device::CPU, 0, {2}};
  f.coords = r.coords;
  f.batch = 2;
  f.cond = r.cond;
  const sparse3d::Array v = e.forward(f);
  e.offload();
  EXPECT_TRUE(same_bytes(v, e.forward(f)));
  EXPECT_EQ(e.residency().reloads, 2u);
  e.offload();
  e.warm_up({40}, 9);
  EXPECT_EQ(e.residency().reloads, 3u);
  // fits() moves nothing.
  e.offload();
  EXPECT_EQ(e.fits(40, 1, 9, e.plan().flags()), "");
  EXPECT_FALSE(e.residency().resident);
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

TEST_F(Residency, AFailedMoveChangesNothing) {
  sparse3d::Engine e(kTiny, options());
  auto in = inputs();
  const sparse3d::SampleRequest r = request(in);
  const sparse3d::SampleResult before = e.sample(r);
  // The host copy's allocation fails: still resident, nothing counted, requests run.
  s3d::fault::arm(Point::HostAlloc, 1);
  EXPECT_NE(error_of([&] { e.offload(); }).find("out of host memory"), std::string::npos);
  s3d::fault::arm(Point::HostAlloc, 0);
  EXPECT_TRUE(e.residency().resident);
  EXPECT_EQ(e.residency().offloads, 0u);
  EXPECT_TRUE(same_bytes(before.latent, e.sample(r).latent));
  // The reload's buffer fails: still offloaded, and the next reload works.
  e.offload();
  s3d::fault::arm(Point::HostAlloc, 1);
  EXPECT_NE(error_of([&] { e.reload(); }).find("out of host memory"), std::string::npos);
  s3d::fault::arm(Point::HostAlloc, 0);
  EXPECT_FALSE(e.residency().resident);
  EXPECT_EQ(e.residency().reloads, 0u);
  e.reload();
  EXPECT_TRUE(same_bytes(before.latent, e.sample(r).latent));
}

TEST(ModelResidency, TheWeightsMoveWithTheirBitsAndAForwardNeedsThemHome) {
  using namespace s3d::model;
  std::unique_ptr<Transformer> m = std::make_unique<Transformer>(load_checkpoint(kTiny, s3d::Device::CPU));
  const Checkpoint original = load_checkpoint(kTiny, s3d::Device::CPU);
  const auto& qkv = [](const Transformer& model) -> const s3d::Tensor& {
    return model.weights().blocks[1].self_attn.to_qkv.weight;
  };
  const void* home = qkv(*m).data();
  EXPECT_EQ(m->offload_weights(), m->weight_bytes());
  EXPECT_FALSE(m->weights_resident());
  // Bound to the host copy, at a 256-byte aligned address, with the checkpoint's bits.
  EXPECT_NE(qkv(*m).data(), home);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(qkv(*m).data()) % 256, 0u);
  const s3d::Tensor& want = original.tensors.at("blocks.1.self_attn.to_qkv.weight");
  ASSERT_EQ(qkv(*m).nbytes(), want.nbytes());
  EXPECT_EQ(std::memcmp(qkv(*m).data(), want.data(), want.nbytes()), 0);

  auto in = s3d::testing::synthetic_inputs({12}, 5, 64, 32, 2);
  const std::string refused = error_of([&] { m->prepare(in.coords, 1, 5); });
  EXPECT_NE(refused.find("offloaded to host memory"), std::string::npos) << refused;
  EXPECT_NE(refused.find("Engine::reload"), std::string::npos) << refused;

  EXPECT_EQ(m->offload_weights(), 0u);  // already there
  EXPECT_EQ(m->reload_weights(), m->host_copy_bytes());
  EXPECT_TRUE(m->weights_resident());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(qkv(*m).data()) % 256, 0u);
  EXPECT_EQ(std::memcmp(qkv(*m).data(), want.data(), want.nbytes()), 0);
  EXPECT_NO_THROW(m->prepare(in.coords, 1, 5));
  EXPECT_EQ(m->reload_weights(), 0u);  // already there
}

// Borrowed weights (InMemoryCheckpoint::borrow): an engine over the caller's tensors gives
// the bits an engine over the file gives, holds the caller's memory only while it uses it,
// makes a copy of its own when an offload asks for the memory back, copies (and says why)
// what it cannot borrow, and checks what it borrows as it checks a file. release_cache() is
// a no-op without a GPU, and a Workspace is refused without one.

TEST_F(Residency, AnEngineOverTheCallersTensorsGivesTheFilesBitsWithoutACopy) {
  Caller caller;
  auto token = std::make_shared<int>(0);
  std::weak_ptr<int> held = token;
  auto in = inputs();
  const sparse3d::SampleRequest r = request(in);
  const sparse3d::SampleResult from_file = sparse3d::Engine(kTiny, options()).sample(r);
  {
    sparse3d::Engine e(caller.borrowing(token), options());
    token.reset();
    EXPECT_FALSE(held.expired()) << "the engine holds the caller's tensors while it uses them";
    const sparse3d::Residency res = e.residency();
    EXPECT_EQ(res.weights_source, "borrowed in place");
    EXPECT_EQ(res.host_copy_bytes, 0u);
    EXPECT_TRUE(same_bytes(from_file.latent, e.sample(r).latent));
    // The content hash is the file's: caches keyed by it (the null context's) are shared.
    EXPECT_EQ(e.model().content_hash, sparse3d::Engine(kTiny, options()).model().content_hash);

    // An offload asks for the memory back: the engine makes a copy of its own and lets the
    // caller's tensors go; the bits stay.
    e.offload();
    EXPECT_TRUE(held.expired()) << "offload() lets the borrowed tensors go";
    EXPECT_EQ(e.residency().weights_source, "own copy");
    EXPECT_EQ(e.residency().bytes_offloaded, e.residency().weight_bytes);
    e.reload();
    EXPECT_TRUE(same_bytes(from_file.latent, e.sample(r).latent));
  }
}

TEST_F(Residency, TheCallersTensorsGoWithTheEngine) {
  Caller caller;
  auto token = std::make_shared<int>(0);
  std::weak_ptr<int> held = token;
  {
    sparse3d::Engine e(caller.borrowing(token), options());
    token.reset();
    EXPECT_FALSE(held.expired());
  }
  EXPECT_TRUE(held.expired());
}

TEST_F(Residency, WhatCannotBeBorrowedIsCopiedAndTheLogSaysWhy) {
  // Every tensor in f32: the blocks' Linear layers run in bf16, so they need a conversion.
  Caller caller;
  std::vector<std::vector<float>> f32;
  sparse3d::InMemoryCheckpoint m;
  m.config_json = caller.config_json;
  for (auto& [name, t] : caller.ck.tensors) {
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
  Caller caller;
  // A NaN in one weight: refused by name, as from a file.
  auto& [name, t] = *caller.ck.tensors.begin();
  const std::string bad = name;
  if (t.dtype() == s3d::DType::F32) static_cast<float*>(t.data())[t.numel() - 1] = NAN;
  else static_cast<uint16_t*>(t.data())[t.numel() - 1] = 0x7fc0;
  const std::string e1 = s3d::testing::error_of(
      [&] { sparse3d::Engine e(caller.borrowing(nullptr), options()); });
  EXPECT_NE(e1.find("non-finite"), std::string::npos) << e1;
  EXPECT_NE(e1.find(bad), std::string::npos) << e1;

  // A tensor missing: the strict check names it.
  Caller missing;
  sparse3d::InMemoryCheckpoint m = missing.borrowing(nullptr);
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
