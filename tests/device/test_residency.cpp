// Engine residency on the test device (tests/device_under_test.h; Engine::offload / reload,
// docs/API.md "Residency"), as the Python drop-in uses it for TRELLIS.2's low_vram mode: a
// request after offload and reload gives the bits it gave before on every path, the host copy
// is made once and the counters say what moved (on the GPU: the device memory returned, and
// no library plan or graph rebuilt); requests, forwards and warm-ups reload by themselves; a
// failed reload changes nothing; the weights keep their bits and alignment away and back, and
// a forward needs them home; an engine over the caller's tensors uses them in place and lets
// them go at an offload. The CPU's own checks (no-op calls, the dense model, borrowing rules,
// release_cache) are in tests/cpu/test_residency.cpp; the GPU's (pinned memory, workspaces
// shared between engines, host homes) in tests/gpu/test_residency_gpu.cpp.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "array_bytes.h"
#include "caller_tensors.h"
#include "core/fault.h"
#include "device/device_test_util.h"
#include "model/checkpoint.h"
#include "model/config.h"
#include "model/trunk/transformer.h"
#include "model/trunk/weights.h"
#include "model_inputs.h"
#include "sparse3d/sparse3d.h"
#include "test_numerics.h"

namespace {

namespace fs = std::filesystem;
using s3d::fault::Point;
using s3d::test::kTestDevice;
using s3d::test::kTestOnCuda;
using s3d::testing::error_of;

// The model and request of the tests: on the CPU the tiny preset and two small assets; on the
// GPU a 4-block cut of trellis2-shape-1024 (about 150M parameters, 0.3 GB, big enough for the
// memory to be measured against the allocator's granularity), two assets and a 1,029-token
// condition (the 512 stages'). CFG on every step: batched CFG, the null-context cache and the
// condition K/V cache all run.
struct ResidencyCase {
  s3d::model::ModelConfig config;
  uint64_t checkpoint_seed;
  std::vector<int64_t> tokens;
  int cond_tokens;
  uint64_t inputs_seed, noise_seed;
};

ResidencyCase residency_case() {
  if (!kTestOnCuda) return {s3d::model::preset("tiny"), 5, {37, 21}, 9, 4, 17};
  s3d::model::ModelConfig c = s3d::model::preset("trellis2-shape-1024");
  c.num_blocks = 4;
  return {c, 7, {1500, 700}, 1029, 8, 21};
}

// The weights' bytes in their run-time dtypes, from the config alone.
size_t expected_weight_bytes(const std::string& checkpoint) {
  size_t n = 0;
  for (const auto& s : s3d::model::param_specs(s3d::model::read_config_file(checkpoint)))
    n += static_cast<size_t>(s3d::shape_numel(s.shape)) * s3d::dtype_size(s.runtime_dtype);
  return n;
}

size_t device_free_bytes() {
  size_t free_b = 0, total_b = 0;
  EXPECT_EQ(cudaMemGetInfo(&free_b, &total_b), cudaSuccess);
  return free_b;
}

// The allocation a move makes on the test device, and how its failure reads.
constexpr Point kAllocPoint = kTestOnCuda ? Point::DeviceAlloc : Point::HostAlloc;
constexpr const char* kOutOfMemory = kTestOnCuda ? "out of device memory" : "out of host memory";

struct ResidencyOnDevice : ::testing::Test {
  static void TearDownTestSuite() {
    if (!dir.empty()) fs::remove_all(dir);
    dir.clear();
  }
  void SetUp() override {
    S3D_TEST_DEVICE();
    if (dir.empty()) dir = s3d::test::scratch_dir("residency_device");
    const ResidencyCase c = residency_case();
    checkpoint = s3d::test::checkpoint_in(dir, "model", c.config, c.checkpoint_seed);
    cache = dir + "/cache_" + ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(cache);
  }
  void TearDown() override {
    s3d::fault::arm(Point::HostAlloc, 0);
    s3d::fault::arm(Point::DeviceAlloc, 0);
    if (!cache.empty()) fs::remove_all(cache);
  }
  sparse3d::EngineOptions options(const std::string& path = "") const {
    return s3d::test::test_engine_options(path, cache);
  }
  static s3d::sampler::Inputs inputs() {
    const ResidencyCase c = residency_case();
    return s3d::testing::synthetic_inputs(c.tokens, c.cond_tokens, c.config.cond_channels, 32,
                                          c.inputs_seed);
  }
  static sparse3d::SampleRequest request(s3d::sampler::Inputs& in) {
    sparse3d::SampleRequest r = s3d::testing::sample_request(in, residency_case().noise_seed, 3);
    r.sampler.interval_lo = 0.0;
    return r;
  }
  static std::string dir;
  std::string checkpoint, cache;
};
std::string ResidencyOnDevice::dir;

// What an offload moved, and (on the GPU) what it returned: the weights left the tensors in
// use, and with the cached blocks the driver got back at least the weights' bytes.
void expect_offloaded(const sparse3d::Engine& e, const sparse3d::Counters& held, size_t free_before,
                      const std::string& checkpoint, const std::string& path) {
  const sparse3d::Residency off = e.residency();
  const size_t weights = off.weight_bytes;
  EXPECT_FALSE(off.resident);
  EXPECT_EQ(off.offloads, 1u);
  EXPECT_EQ(off.bytes_offloaded, weights);  // every weight copied once
  // The copy holds each tensor at a 256-byte aligned offset: the gaps are under 256 bytes a
  // tensor.
  const size_t tensors =
      s3d::model::param_specs(s3d::model::read_config_file(checkpoint)).size();
  EXPECT_GE(off.host_copy_bytes, weights);
  EXPECT_LT(off.host_copy_bytes, weights + 256 * tensors);
  EXPECT_EQ(off.host_copy_bytes % 256, 0u);
  if constexpr (!kTestOnCuda) {
    EXPECT_EQ(off.device_bytes_released, 0u);  // no device memory on the CPU backend
    return;
  }
  const sparse3d::Counters away = e.counters();
  EXPECT_GE(off.device_bytes_released, weights);
  EXPECT_LE(away.device_bytes_in_use + weights, held.device_bytes_in_use);
  EXPECT_LE(away.device_bytes_reserved + weights, held.device_bytes_reserved);
  EXPECT_GE(device_free_bytes(), free_before + weights);
  std::printf("[ residency ] path '%s': %.3f GiB weights, offload %.3f s, %.3f GiB released, "
              "%.1f MiB still reserved\n",
              path.c_str(), weights / double(1 << 30), off.offload_seconds,
              off.device_bytes_released / double(1 << 30),
              away.device_bytes_reserved / double(1 << 20));
}

TEST_F(ResidencyOnDevice, OffloadAndReloadGiveTheSameBitsOnEveryPathAndSayWhatMoved) {
  for (const std::string path : {"", "pure_eager", "fast", "fast+tuned_gemm+tuned_attention"}) {
    SCOPED_TRACE("path '" + path + "'");
    sparse3d::Engine e(checkpoint, options(path));
    auto in = inputs();
    const sparse3d::SampleRequest r = request(in);
    const std::vector<uint8_t> before = bytes_of(e.sample(r).latent);
    const sparse3d::Residency res = e.residency();
    EXPECT_TRUE(res.resident);
    EXPECT_EQ(res.weight_bytes, expected_weight_bytes(checkpoint));
    EXPECT_EQ(res.offloads, 0u);
    EXPECT_EQ(res.host_copy_bytes, 0u);  // no copy before the first offload
    if (kTestOnCuda) {
      ASSERT_GT(res.weight_bytes, size_t(250) << 20);
    }
    const sparse3d::Counters held = e.counters();
    const size_t free_before = kTestOnCuda ? device_free_bytes() : 0;

    e.offload();
    expect_offloaded(e, held, free_before, checkpoint, path);

    e.reload();
    const sparse3d::Residency on = e.residency();
    EXPECT_TRUE(on.resident);
    EXPECT_EQ(on.reloads, 1u);
    EXPECT_EQ(on.bytes_reloaded, on.host_copy_bytes);  // one copy of the whole buffer
    EXPECT_GE(on.offload_seconds, 0.0);
    EXPECT_GE(on.reload_seconds, 0.0);
    std::printf("[ residency ] path '%s': reload %.3f s (%.1f GB/s)\n", path.c_str(),
                on.reload_seconds, on.bytes_reloaded / on.reload_seconds / 1e9);
    const sparse3d::SampleResult after = e.sample(r);
    EXPECT_EQ(bytes_of(after.latent), before);
    // Nothing was rebuilt: no cuDNN graph, cuBLASLt plan or plan search, no qualification.
    for (const char* kind : {"attention_graph", "gemm_plan", "gemm_plan_search",
                             "attention_plan_search"})
      EXPECT_EQ(after.stats.first_use.count(kind), 0u) << kind;
    EXPECT_EQ(e.counters().qualifications_run, held.qualifications_run);
    if (kTestOnCuda) {  // (the CPU backend counts cuda_graphs' refusal on "fast")
      EXPECT_TRUE(e.counters().fallbacks.empty());
    }
  }
}

TEST_F(ResidencyOnDevice, ARequestAForwardAndAWarmUpReloadByThemselves) {
  sparse3d::Engine e(checkpoint, options());
  auto in = inputs();
  const sparse3d::SampleRequest r = request(in);
  const std::vector<uint8_t> before = bytes_of(e.sample(r).latent);
  for (int round = 0; round < 3; ++round) {
    e.offload();
    EXPECT_EQ(bytes_of(e.sample(r).latent), before) << "round " << round;
    EXPECT_TRUE(e.residency().resident);
    EXPECT_EQ(e.residency().reloads, static_cast<uint64_t>(round + 1));
  }
  const sparse3d::Residency res = e.residency();
  EXPECT_EQ(res.offloads, 3u);
  EXPECT_EQ(res.bytes_offloaded, res.weight_bytes);  // the first offload's copy serves all
  EXPECT_EQ(res.bytes_reloaded, 3 * res.host_copy_bytes);

  s3d::Tensor x = in.noise.to(kTestDevice);
  s3d::Tensor t = s3d::Tensor::from_floats({900.0f, 900.0f}, {2}, s3d::DType::F32);
  sparse3d::ForwardRequest f;
  f.x = s3d::test::view_of(x);
  f.t = s3d::test::view_of(t);
  f.coords = r.coords;
  f.batch = 2;
  f.cond = r.cond;
  const std::vector<uint8_t> v = bytes_of(e.forward(f));
  e.offload();
  EXPECT_EQ(bytes_of(e.forward(f)), v);
  EXPECT_TRUE(e.residency().resident);
  EXPECT_EQ(e.residency().reloads, 4u);
  e.offload();
  e.warm_up({40}, residency_case().cond_tokens);
  EXPECT_EQ(e.residency().reloads, 5u);
  // fits() moves nothing.
  e.offload();
  EXPECT_EQ(e.fits(40, 1, residency_case().cond_tokens, e.plan().flags()), "");
  EXPECT_FALSE(e.residency().resident);
}

TEST_F(ResidencyOnDevice, AFailedMoveChangesNothing) {
  sparse3d::Engine e(checkpoint, options());
  auto in = inputs();
  const sparse3d::SampleRequest r = request(in);
  const std::vector<uint8_t> before = bytes_of(e.sample(r).latent);
  if constexpr (!kTestOnCuda) {
    // The host copy's allocation fails: still resident, nothing counted, requests run.
    s3d::fault::arm(Point::HostAlloc, 1);
    EXPECT_NE(error_of([&] { e.offload(); }).find("out of host memory"), std::string::npos);
    s3d::fault::arm(Point::HostAlloc, 0);
    EXPECT_TRUE(e.residency().resident);
    EXPECT_EQ(e.residency().offloads, 0u);
    EXPECT_EQ(bytes_of(e.sample(r).latent), before);
  }
  // The reload's buffer fails: still offloaded, and the next reload works.
  e.offload();
  s3d::fault::arm(kAllocPoint, 1);
  const std::string refused = error_of([&] { e.reload(); });
  s3d::fault::arm(kAllocPoint, 0);
  EXPECT_NE(refused.find(kOutOfMemory), std::string::npos) << refused;
  EXPECT_FALSE(e.residency().resident);
  EXPECT_EQ(e.residency().reloads, 0u);
  e.reload();
  EXPECT_EQ(bytes_of(e.sample(r).latent), before);
}

// The tensor's bytes (wherever it is) equal `want`'s (a host tensor).
bool same_bytes(const s3d::Tensor& t, const s3d::Tensor& want) {
  const s3d::Tensor h = t.to(s3d::Device::CPU);
  return h.nbytes() == want.nbytes() && std::memcmp(h.data(), want.data(), want.nbytes()) == 0;
}

bool aligned_256(const s3d::Tensor& t) { return reinterpret_cast<uintptr_t>(t.data()) % 256 == 0; }

// On the GPU: where a pointer's memory is (device, or page-locked host: cudaHostAlloc).
void expect_memory_type(const s3d::Tensor& t, cudaMemoryType want) {
  cudaPointerAttributes a{};
  EXPECT_EQ(cudaPointerGetAttributes(&a, t.data()), cudaSuccess);
  EXPECT_EQ(a.type, want);
}

TEST_F(ResidencyOnDevice, TheWeightsMoveWithTheirBitsAndAForwardNeedsThemHome) {
  using namespace s3d::model;
  auto m = std::make_unique<Transformer>(load_checkpoint(checkpoint, kTestDevice));
  const Checkpoint original = load_checkpoint(checkpoint, s3d::Device::CPU);
  const auto& qkv = [](const Transformer& model) -> const s3d::Tensor& {
    return model.weights().blocks[1].self_attn.to_qkv.weight;
  };
  const s3d::Tensor& want = original.tensors.at("blocks.1.self_attn.to_qkv.weight");
  const void* home = qkv(*m).data();
  if constexpr (kTestOnCuda) expect_memory_type(qkv(*m), cudaMemoryTypeDevice);
  EXPECT_EQ(m->offload_weights(), m->weight_bytes());
  EXPECT_FALSE(m->weights_resident());
  // Bound to the host copy (pinned on a GPU), at a 256-byte aligned address, with the
  // checkpoint's bits.
  EXPECT_NE(qkv(*m).data(), home);
  EXPECT_EQ(qkv(*m).device(), s3d::Device::CPU);
  if constexpr (kTestOnCuda) expect_memory_type(qkv(*m), cudaMemoryTypeHost);
  EXPECT_TRUE(aligned_256(qkv(*m)));
  EXPECT_TRUE(same_bytes(qkv(*m), want));

  auto in = s3d::testing::synthetic_inputs({12}, 5, 64, 32, 2);
  const std::string refused = error_of([&] { m->prepare(in.coords, 1, 5); });
  EXPECT_NE(refused.find("offloaded to host memory"), std::string::npos) << refused;
  EXPECT_NE(refused.find("Engine::reload"), std::string::npos) << refused;

  EXPECT_EQ(m->offload_weights(), 0u);  // already there
  EXPECT_EQ(m->reload_weights(), m->host_copy_bytes());
  EXPECT_TRUE(m->weights_resident());
  EXPECT_EQ(qkv(*m).device(), kTestDevice);
  if constexpr (kTestOnCuda) expect_memory_type(qkv(*m), cudaMemoryTypeDevice);
  EXPECT_TRUE(aligned_256(qkv(*m)));
  EXPECT_TRUE(same_bytes(qkv(*m), want));
  EXPECT_NO_THROW(m->prepare(in.coords, 1, 5));
  EXPECT_EQ(m->reload_weights(), 0u);  // already there
}

// Borrowed weights (InMemoryCheckpoint::borrow) on the engine's device: the engine gives the
// bits an engine over the file gives without a copy of its own, holds the caller's memory
// only while it uses it, and makes a copy of its own when an offload asks for the memory back.
TEST_F(ResidencyOnDevice, AnEngineUsesTheCallersTensorsInPlace) {
  auto in = inputs();
  const sparse3d::SampleRequest r = request(in);
  std::vector<uint8_t> from_file;
  std::string file_hash;
  {
    sparse3d::Engine file(checkpoint, options());
    from_file = bytes_of(file.sample(r).latent);
    file_hash = file.model().content_hash;
  }
  auto token = std::make_shared<int>(0);
  std::weak_ptr<int> held = token;
  s3d::testing::CallerTensors caller(checkpoint, kTestOnCuda, token);
  token.reset();
  const size_t free_before = kTestOnCuda ? device_free_bytes() : 0;
  sparse3d::Engine e(caller.ck, options());
  caller.ck.keep_alive.reset();  // the engine's reference is the last one now
  EXPECT_FALSE(held.expired()) << "the engine holds the caller's tensors while it uses them";
  const sparse3d::Residency res = e.residency();
  EXPECT_EQ(res.weights_source, "borrowed in place");
  EXPECT_EQ(res.host_copy_bytes, 0u);
  if (kTestOnCuda) {  // no weight copy on the device: the build took far less than the weights
    EXPECT_LT(free_before - std::min(free_before, device_free_bytes()), res.weight_bytes / 4);
  }
  EXPECT_EQ(bytes_of(e.sample(r).latent), from_file);
  EXPECT_FALSE(held.expired());
  // The content hash is the file's: caches keyed by it (the null context's) are shared.
  EXPECT_EQ(e.model().content_hash, file_hash);
  // offload(): a copy of the engine's own, and the caller's tensors let go; the bits stay.
  e.offload();
  EXPECT_TRUE(held.expired()) << "offload() lets the borrowed tensors go";
  EXPECT_EQ(e.residency().weights_source, "own copy");
  EXPECT_EQ(e.residency().bytes_offloaded, res.weight_bytes);
  EXPECT_EQ(bytes_of(e.sample(r).latent), from_file);
  e.reload();
  EXPECT_EQ(bytes_of(e.sample(r).latent), from_file);
}

}  // namespace
