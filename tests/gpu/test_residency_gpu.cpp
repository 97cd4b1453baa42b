// Engine residency on the GPU (Engine::offload / reload, docs/API.md "Residency"), as the
// Python drop-in uses it for TRELLIS.2's low_vram mode (.cpu() after a stage, .to() before
// the next): weights borrowed from the caller's host tensors are uploaded from them and an
// offload copies nothing; release_cache() returns the workspace without changing a bit;
// engines sharing a Workspace give the bits of engines alone, hold only their weights
// between requests and refuse a request from each other's callbacks. The model is a 4-block
// cut of trellis2-shape-1024 (about 150M parameters, 0.3 GB), big enough for the memory to be
// measured against the allocator's granularity. What both backends check (offload and
// reload on every path with the memory returned, reloads by request, a failed reload, the
// weights in pinned host memory and back aligned, the caller's device tensors in place) is
// in tests/device/test_residency.cpp.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <vector>
#include <string>

#include "core/allocator.h"
#include "core/cuda_util.h"
#include "engine/engine_impl.h"  // Workspace::Impl: its allocator's live blocks
#include "test_numerics.h"
#include "model/checkpoint.h"
#include "model/config.h"
#include "model/trunk/transformer.h"
#include "sparse3d/sparse3d.h"
#include "../caller_tensors.h"
#include "../model_inputs.h"
#include "array_bytes.h"

namespace {

namespace fs = std::filesystem;
using sparse3d::DType;
using sparse3d::Device;

size_t device_free_bytes() {
  size_t free_b = 0, total_b = 0;
  EXPECT_EQ(cudaMemGetInfo(&free_b, &total_b), cudaSuccess);
  return free_b;
}

using s3d::testing::error_of;

struct ResidencyGpu : ::testing::Test {
  void SetUp() override {
    if (!s3d::cuda_available()) GTEST_SKIP() << "no CUDA device";
    dir = (fs::temp_directory_path() / ("sparse3d_residency_gpu_" + std::to_string(getpid())))
              .string();
    checkpoint = dir + "/mid.json";
    if (!fs::exists(checkpoint)) {
      s3d::model::ModelConfig c = s3d::model::preset("trellis2-shape-1024");
      c.num_blocks = 4;
      s3d::model::make_checkpoint(c, 7, dir + "/mid", DType::BF16);
    }
    fs::remove_all(dir + "/cache");
  }
  sparse3d::EngineOptions options(const std::string& path) const {
    sparse3d::EngineOptions o;
    o.device = sparse3d::DeviceChoice::CUDA;
    o.path = path;
    o.cache_dir = dir + "/cache";
    return o;
  }
  // Two assets and a 1,029-token condition (the 512 stages'), released sampler with CFG on
  // every step: batched CFG, the null-context cache and the condition K/V cache all run.
  static sparse3d::SampleRequest request(s3d::sampler::Inputs& in) {
    sparse3d::SampleRequest r = s3d::testing::sample_request(in, 21, 3);
    r.sampler.interval_lo = 0.0;
    return r;
  }
  static s3d::sampler::Inputs inputs() {
    return s3d::testing::synthetic_inputs({1500, 700}, 1029, 1024, 32, 8);
  }
  std::string dir, checkpoint;
};

TEST_F(ResidencyGpu, AHostHomeIsUploadedFromAndOffloadCopiesNothing) {
  auto in = inputs();
  const sparse3d::SampleRequest r = request(in);
  const std::vector<uint8_t> from_file = bytes_of(sparse3d::Engine(checkpoint, options("")).sample(r).latent);
  s3d::testing::CallerTensors caller(checkpoint, false, nullptr);
  sparse3d::Engine e(caller.ck, options(""));
  EXPECT_EQ(e.residency().weights_source, "borrowed host home");
  EXPECT_EQ(bytes_of(e.sample(r).latent), from_file);
  const size_t weights = e.residency().weight_bytes;
  const size_t free_before = device_free_bytes();
  e.offload();
  const sparse3d::Residency off = e.residency();
  EXPECT_EQ(off.bytes_offloaded, 0u);          // the home is the caller's: nothing copied
  EXPECT_EQ(off.host_copy_bytes, 0u);          // and keeps no copy of its own
  EXPECT_GE(device_free_bytes(), free_before + weights);
  e.reload();
  const sparse3d::Residency on = e.residency();
  std::printf("[ residency ] host home: reload %.3f s (%.1f GB/s)\n", on.reload_seconds,
              on.bytes_reloaded / on.reload_seconds / 1e9);
  EXPECT_EQ(bytes_of(e.sample(r).latent), from_file);
  EXPECT_EQ(e.residency().weights_source, "borrowed host home");
}

TEST_F(ResidencyGpu, ReleaseCacheReturnsTheWorkspaceAndChangesNoBits) {
  sparse3d::Engine e(checkpoint, options(""));
  auto in = inputs();
  const sparse3d::SampleRequest r = request(in);
  const std::vector<uint8_t> first = bytes_of(e.sample(r).latent);
  const size_t cached = e.counters().device_bytes_reserved - e.counters().device_bytes_in_use;
  const size_t free_before = device_free_bytes();
  const size_t released = e.release_cache();
  EXPECT_GT(released, 0u);
  EXPECT_GE(released, cached);
  EXPECT_GE(device_free_bytes() + (size_t(2) << 20), free_before + released);
  EXPECT_EQ(bytes_of(e.sample(r).latent), first);
}

TEST_F(ResidencyGpu, TwoEnginesSharingAWorkspaceGiveTheBitsOfTwoAlone) {
  // Two models (the checkpoint and a second one of other weights), two request sizes each.
  const std::string other = dir + "/other";
  if (!fs::exists(other + ".json")) {
    s3d::model::ModelConfig c = s3d::model::preset("trellis2-shape-1024");
    c.num_blocks = 4;
    s3d::model::make_checkpoint(c, 8, other, DType::BF16);
  }
  auto small = s3d::testing::synthetic_inputs({900}, 1029, 1024, 32, 8);
  auto large = inputs();
  std::vector<std::vector<uint8_t>> alone;
  for (const std::string& ck : {checkpoint, other + ".json"}) {
    sparse3d::Engine e(ck, options(""));
    alone.push_back(bytes_of(e.sample(request(large)).latent));
    alone.push_back(bytes_of(e.sample(request(small)).latent));
  }
  auto ws = std::make_shared<sparse3d::Workspace>(0);
  sparse3d::EngineOptions o = options("");
  o.workspace = ws;
  sparse3d::Engine a(checkpoint, o), b(other + ".json", o);
  // Interleaved, as a pipeline's stages: each request reuses what the other's freed.
  for (int round = 0; round < 2; ++round) {
    EXPECT_EQ(bytes_of(a.sample(request(large)).latent), alone[0]) << "round " << round;
    EXPECT_EQ(bytes_of(b.sample(request(small)).latent), alone[3]) << "round " << round;
    EXPECT_EQ(bytes_of(b.sample(request(large)).latent), alone[2]) << "round " << round;
    EXPECT_EQ(bytes_of(a.sample(request(small)).latent), alone[1]) << "round " << round;
  }
  // One allocator: both engines' counters read it, and one release gives back its cache.
  EXPECT_EQ(a.counters().device_bytes_reserved, ws->bytes_reserved());
  EXPECT_EQ(b.counters().device_bytes_reserved, ws->bytes_reserved());
  const size_t cached = ws->bytes_reserved() - ws->bytes_in_use();
  EXPECT_GT(cached, 0u);
  EXPECT_EQ(ws->release_cache(), cached);
  EXPECT_EQ(ws->bytes_reserved(), ws->bytes_in_use());
}

TEST_F(ResidencyGpu, BetweenRequestsEnginesSharingAWorkspaceHoldOnlyTheirWeights) {
  // What a pipeline's engines keep between their turns is each one's fixed cost beside the
  // running one's activations: after release_cache() no library workspace (cuBLASLt's is
  // 32 MiB, cuDNN's the largest graph's need) and no activation stays, only the weights and
  // a few rows (null-context values, step tables).
  auto ws = std::make_shared<sparse3d::Workspace>(0);
  sparse3d::EngineOptions o = options("");
  o.workspace = ws;
  sparse3d::Engine a(checkpoint, o), b(checkpoint, o);
  const size_t weights_only = ws->bytes_in_use();
  EXPECT_GE(weights_only, a.residency().weight_bytes + b.residency().weight_bytes);
  auto in = inputs();
  const sparse3d::SampleRequest r = request(in);
  const std::vector<uint8_t> first = bytes_of(a.sample(r).latent);
  a.release_cache();
  EXPECT_EQ(bytes_of(b.sample(r).latent), first);  // the same weights: the same bits
  b.release_cache();
  const size_t held = ws->bytes_in_use() - weights_only;
  std::string blocks;
  for (size_t b : ws->impl().allocator->live_block_sizes())
    if (b < (size_t(64) << 20)) blocks += " " + std::to_string(b);  // the weights' left out
  std::printf("[ residency ] two engines hold %zu bytes besides their weights between requests; "
              "live blocks under 64 MiB:%s\n", held, blocks.c_str());
  // Each engine's cuBLASLt workspace alone was 32 MiB (and its cuDNN one beside it); then
  // the few kilobytes of rows held 13.3 MB, each settled in a freed temporary's block (the
  // allocator's fit for small requests, core/allocator.cpp).
  EXPECT_LT(held, size_t(1) << 20);
  EXPECT_EQ(ws->bytes_reserved(), ws->bytes_in_use());
  // The workspaces come back on the next request, with the same bits.
  EXPECT_EQ(bytes_of(a.sample(r).latent), first);
}

TEST_F(ResidencyGpu, ARequestFromACallbackOfAnEngineSharingTheWorkspaceIsRefused) {
  auto ws = std::make_shared<sparse3d::Workspace>(0);
  sparse3d::EngineOptions o = options("");
  o.workspace = ws;
  sparse3d::Engine a(checkpoint, o), b(checkpoint, o);
  auto in = s3d::testing::synthetic_inputs({300}, 64, 1024, 32, 8);
  sparse3d::SampleRequest r = request(in);
  std::string refused;
  r.on_step = [&](const sparse3d::StepInfo&) {
    if (refused.empty()) refused = error_of([&] { b.sample(request(in)); });
  };
  a.sample(r);
  EXPECT_NE(refused.find("sharing this workspace"), std::string::npos) << refused;
  EXPECT_NE(refused.find("could never start"), std::string::npos) << refused;
  r.on_step = nullptr;
  b.sample(r);  // after the request returned: runs
}

// A memory source that counts: cudaMalloc underneath, every block it gave remembered, so
// that a block given back twice, or one it never gave, fails the test.
struct CountingSource {
  std::map<void*, size_t> live;
  size_t taken = 0, returned = 0, bad = 0;
  bool refuse = false;
  sparse3d::DeviceMemorySource source(const char* name) {
    sparse3d::DeviceMemorySource s;
    s.name = name;
    s.allocate = [this](size_t bytes) -> void* {
      void* p = nullptr;
      if (refuse || cudaMalloc(&p, bytes) != cudaSuccess) return nullptr;
      live[p] = bytes;
      ++taken;
      return p;
    };
    s.release = [this](void* p) {
      if (live.erase(p) == 0) ++bad;
      ++returned;
      cudaFree(p);
    };
    return s;
  }
  size_t live_bytes() const {
    size_t n = 0;
    for (const auto& [p, b] : live) n += b;
    return n;
  }
};

TEST_F(ResidencyGpu, AWorkspaceOnAMemorySourceTakesAndGivesBackThereWithTheSameBits) {
  auto in = inputs();
  const sparse3d::SampleRequest r = request(in);
  // Without CUDA graphs: a graph's private pool takes the driver's memory, not the source's.
  const std::string no_graphs = std::string(sparse3d::default_path()) + "-cuda_graphs";
  const std::vector<uint8_t> alone =
      bytes_of(sparse3d::Engine(checkpoint, options(no_graphs)).sample(r).latent);
  CountingSource counting;
  auto ws = std::make_shared<sparse3d::Workspace>(0);
  EXPECT_EQ(ws->memory_source(), "");
  ws->set_memory_source(counting.source("the test's source"));
  EXPECT_EQ(ws->memory_source(), "the test's source");
  sparse3d::EngineOptions o = options(no_graphs);
  o.workspace = ws;
  sparse3d::Engine a(checkpoint, o);
  EXPECT_EQ(counting.live_bytes(), ws->bytes_reserved());  // the weights too: all the source's
  EXPECT_GE(counting.live_bytes(), a.residency().weight_bytes);
  EXPECT_EQ(bytes_of(a.sample(r).latent), alone);
  EXPECT_EQ(counting.live_bytes(), ws->bytes_reserved());
  const size_t cached = ws->bytes_reserved() - ws->bytes_in_use();
  EXPECT_GT(cached, 0u);
  const size_t returned = counting.returned;
  EXPECT_GE(a.release_cache(), cached);  // and the libraries' workspaces, in use until now
  EXPECT_GT(counting.returned, returned);
  EXPECT_EQ(counting.live_bytes(), ws->bytes_in_use());  // what is cached went back there
  const size_t taken = counting.taken;
  EXPECT_EQ(bytes_of(a.sample(r).latent), alone);
  EXPECT_GT(counting.taken, taken);  // and the next request took it from there again

  // A source with no room: the request fails naming it; back on the driver, the same bits.
  a.release_cache();
  counting.refuse = true;
  const std::string refused = error_of([&] { a.sample(r); });
  EXPECT_NE(refused.find("out of device memory"), std::string::npos) << refused;
  EXPECT_NE(refused.find("the test's source had no room"), std::string::npos) << refused;
  ws->set_memory_source({});
  EXPECT_EQ(ws->memory_source(), "");
  EXPECT_EQ(bytes_of(a.sample(r).latent), alone);
  const std::string half = error_of([&] {
    sparse3d::DeviceMemorySource s;
    s.allocate = [](size_t) -> void* { return nullptr; };
    ws->set_memory_source(s);
  });
  EXPECT_NE(half.find("needs both allocate and release"), std::string::npos) << half;
  EXPECT_EQ(counting.bad, 0u);
}

}  // namespace
