// Borrowed weights on the CPU backend (InMemoryCheckpoint::borrow, docs/API.md "Residency"):
// an engine over the caller's tensors gives the bits an engine over the file gives, holds the
// caller's memory only while it uses it, makes a copy of its own when an offload asks for the
// memory back, copies (and says why) what it cannot borrow, and checks what it borrows as it
// checks a file. release_cache() is a no-op without a GPU.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "../model_inputs.h"
#include "../test_numerics.h"
#include "core/cuda_util.h"
#include "io/json.h"
#include "model/checkpoint.h"
#include "model/config.h"
#include "sparse3d/sparse3d.h"

namespace {

namespace fs = std::filesystem;

const std::string kTiny = std::string(SPARSE3D_TEST_DATA) + "/golden/inputs/tiny.json";

bool same_bytes(const sparse3d::Array& a, const sparse3d::Array& b) {
  return a.view.shape == b.view.shape && a.view.dtype == b.view.dtype &&
         std::memcmp(a.view.data, b.view.data, a.view.nbytes()) == 0;
}

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

struct BorrowedWeights : ::testing::Test {
  void SetUp() override {
    cache = (fs::temp_directory_path() /
             ("sparse3d_borrowed_" + std::to_string(getpid()) + "_" +
              ::testing::UnitTest::GetInstance()->current_test_info()->name()))
                .string();
    fs::remove_all(cache);
  }
  void TearDown() override { fs::remove_all(cache); }
  sparse3d::EngineOptions options(std::vector<std::string>* log = nullptr) const {
    sparse3d::EngineOptions o;
    o.device = sparse3d::DeviceChoice::CPU;
    o.cache_dir = cache;
    if (log) o.log = [log](const std::string& line) { log->push_back(line); };
    return o;
  }
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

TEST_F(BorrowedWeights, AnEngineOverTheCallersTensorsGivesTheFilesBitsWithoutACopy) {
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

TEST_F(BorrowedWeights, TheCallersTensorsGoWithTheEngine) {
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

TEST_F(BorrowedWeights, WhatCannotBeBorrowedIsCopiedAndTheLogSaysWhy) {
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
  sparse3d::Engine e(m, options(&log));
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

TEST_F(BorrowedWeights, BorrowedTensorsAreCheckedAsAFileIs) {
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

TEST_F(BorrowedWeights, AWorkspaceIsAGpusAndRefusedWithoutOne) {
  if (s3d::cuda_available()) GTEST_SKIP() << "a GPU is present (the GPU tests cover workspaces)";
  const std::string e = s3d::testing::error_of([] { sparse3d::Workspace w(0); });
  EXPECT_NE(e.find("no usable CUDA device"), std::string::npos) << e;
}

TEST_F(BorrowedWeights, ReleaseCacheIsANoOpOnTheCpuBackend) {
  sparse3d::Engine e(kTiny, options());
  EXPECT_EQ(e.release_cache(), 0u);
  auto in = inputs();
  const sparse3d::SampleRequest r = request(in);
  const sparse3d::SampleResult a = e.sample(r);
  EXPECT_EQ(e.release_cache(), 0u);
  EXPECT_TRUE(same_bytes(a.latent, e.sample(r).latent));
}

}  // namespace
