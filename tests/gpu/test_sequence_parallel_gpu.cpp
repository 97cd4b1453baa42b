// Sequence parallelism on the GPU, beyond the device-parametrised tests of tests/parallel/
// (which the GPU suite runs too):
//   - full-size blocks (the released shape model's C = 1536, H = 12, D = 128, 2 blocks) at
//     30,227 tokens over P = 2, 3, 4 simulated ranks, and batched CFG's two 30,227-token halves
//     in two rank groups of P / 2 = 1, 2, 3: per forward rel L2 <= 1e-2 against the unsharded
//     forward (docs/CONTRACTS.md, "Sequence parallelism");
//   - the NCCL group: a group of one GPU exchanges through ncclSend/ncclRecv bit for bit and
//     runs the sharded forward; a group naming a missing or repeated device is refused;
//   - the Engine with EngineOptions::devices: a listed device that does not exist is a counted
//     fallback and the request runs on one GPU, bit for bit as without the option (any machine);
//   - on a machine with two or more GPUs, the sharded forward over two GPUs, each with its own
//     context and replica, and the Engine splitting a request over them (skipped, saying so,
//     on one GPU).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <memory>

#include "../parallel/forward_case.h"
#include "array_bytes.h"
#include "core/context.h"
#include "core/cuda_util.h"
#include "expect_error.h"
#include "model/checkpoint.h"
#include "model/config.h"
#include "model/trunk/sequence_parallel.h"
#include "model_inputs.h"
#include "ops/op.h"
#include "parallel/group.h"
#include "sparse3d/flags.h"
#include "sparse3d/sparse3d.h"
#include "test_numerics.h"

namespace s3d::model {
namespace {

namespace fs = std::filesystem;

#define S3D_REQUIRE_GPU() \
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device: run on the GPU machine"

constexpr double kBound = 1e-2;

struct SequenceParallelGpu : ::testing::Test {
  static void SetUpTestSuite() {
    dir =
        (fs::temp_directory_path() / ("sparse3d_seqpar_gpu_" + std::to_string(getpid()))).string();
    fs::create_directories(dir);
    ModelConfig full = preset("trellis2-shape-1024");
    full.num_blocks = 2;
    make_checkpoint(full, 21, dir + "/full2", DType::BF16);
    ModelConfig small = preset("tiny");
    small.model_channels = 288;
    small.num_heads = 12;
    make_checkpoint(small, 22, dir + "/small", DType::BF16);
  }
  static void TearDownTestSuite() { fs::remove_all(dir); }
  static std::string dir;

  using Case = testing::ForwardCase;
  static Case make_case(const Transformer& m, const std::vector<int64_t>& counts, int L,
                        const char* path) {
    return testing::forward_case(m, counts, L, 0, sparse3d::ExecutionPlan::of_path(path).flags(),
                                 31, Device::CUDA);
  }
};
std::string SequenceParallelGpu::dir;

TEST_F(SequenceParallelGpu, FullSizeBlocksAt30227TokensStayWithinTheBound) {
  S3D_REQUIRE_GPU();
  Transformer m(load_checkpoint(dir + "/full2.json", Device::CUDA));
  for (const char* path : {"pure_eager", "fast"}) {
    const Case k = make_case(m, {30227}, 64, path);
    const Condition cond{k.cond, 0, nullptr};
    const std::vector<float> want = m.forward(k.req, k.x, k.t1000, cond).to_floats();
    for (int P : {2, 3, 4}) {
      parallel::LocalGroup group(P, Device::CUDA);
      SequenceParallel sp(std::vector<const Transformer*>(static_cast<size_t>(P), &m), group);
      const ShardedRequest sr = sp.shard(k.req);
      const double e = testing::rel_l2(sp.forward(sr, k.x, k.t1000, cond).to_floats(), want);
      std::printf("[ sequence parallel ] %s, 30227 tokens, P = %d: rel L2 %.3g\n", path, P, e);
      EXPECT_LE(e, kBound) << path << ", P = " << P;
    }
  }
}

TEST_F(SequenceParallelGpu, FullSizeCfgGroupsStayWithinTheBound) {
  // Batched CFG's layout (the conditional asset, then the unconditional one with a zero
  // condition, as the reference path runs it): each half over its own group of ranks.
  S3D_REQUIRE_GPU();
  Transformer m(load_checkpoint(dir + "/full2.json", Device::CUDA));
  Case k = make_case(m, {30227, 30227}, 64, "fast");
  k.cond.rows(1, 2).copy_from(
      Tensor::zeros({1, 64, m.config().cond_channels}, k.cond.dtype(), Device::CUDA));
  const Condition cond{k.cond, 0, nullptr};
  const std::vector<float> want = m.forward(k.req, k.x, k.t1000, cond).to_floats();
  for (int P : {2, 4, 6}) {
    parallel::LocalGroup group(P, Device::CUDA);
    SequenceParallel sp(std::vector<const Transformer*>(static_cast<size_t>(P), &m), group);
    const ShardedRequest sr = sp.shard(k.req, 2);
    const double e = testing::rel_l2(sp.forward(sr, k.x, k.t1000, cond).to_floats(), want);
    std::printf("[ sequence parallel ] fast, 2 x 30227 tokens, 2 groups of %d: rel L2 %.3g\n",
                P / 2, e);
    EXPECT_LE(e, kBound) << "P = " << P;
  }
}

TEST_F(SequenceParallelGpu, NcclGroupOfOneGpuExchangesBitForBit) {
  S3D_REQUIRE_GPU();
  ASSERT_TRUE(parallel::nccl_built()) << "this build has no NCCL group";
  const std::string version = parallel::nccl_version();
  ASSERT_TRUE(!version.empty() && std::isdigit(static_cast<unsigned char>(version[0])))
      << version << " (put NCCL's lib on LD_LIBRARY_PATH or set SPARSE3D_NCCL_LIBRARY)";
  Context ctx(0);
  auto group = parallel::make_nccl_group({&ctx});
  EXPECT_NE(group->describe().find("GPUs 0"), std::string::npos) << group->describe();
  Tensor src = ops::random_tensor({37, 19}, DType::BF16, Device::CUDA, 5);
  Tensor dst = Tensor::empty({37, 19}, DType::BF16, Device::CUDA);
  dst.poison();
  group->exchange({{0, 0, src, dst}});
  synchronize();
  cudaDeviceSynchronize();
  EXPECT_TRUE(testing::bitwise_equal(src, dst));
  EXPECT_ERROR((group->exchange({{0, 1, src, dst}})), "to rank 1 in a group of 1");

  // The sharded forward over the one-rank NCCL group.
  Transformer m(load_checkpoint(dir + "/small.json", Device::CUDA));
  const Case k = make_case(m, {41, 77}, 5, "fast");
  const Condition cond{k.cond, 0, nullptr};
  const Tensor want = m.forward(k.req, k.x, k.t1000, cond);
  SequenceParallel sp({&m}, *group);
  const Tensor got = sp.forward(sp.shard(k.req), k.x, k.t1000, cond);
  cudaDeviceSynchronize();
  EXPECT_LE(testing::rel_l2(got.to_floats(), want.to_floats()), kBound);
}

TEST_F(SequenceParallelGpu, NcclGroupRefusesMissingAndRepeatedDevices) {
  S3D_REQUIRE_GPU();
  const int n = cuda_device_count();
  Context a(0), b(0), missing(n);
  EXPECT_ERROR(parallel::make_nccl_group({&a, &missing}),
               "device " + std::to_string(n) + " is missing");
  EXPECT_ERROR(parallel::make_nccl_group({&a, &b}), "device 0 is given to two ranks");
  Context cpu(-1);
  EXPECT_ERROR(parallel::make_nccl_group({&cpu}), "a rank has no CUDA device");
}

TEST_F(SequenceParallelGpu, TwoGpusMatchOneGpu) {
  S3D_REQUIRE_GPU();
  if (cuda_device_count() < 2)
    GTEST_SKIP() << "one GPU here: the two-GPU test runs on a 2-GPU machine";
  Transformer m(load_checkpoint(dir + "/full2.json", Device::CUDA));
  const Case k = make_case(m, {30227}, 64, "fast");
  const Condition cond{k.cond, 0, nullptr};
  const std::vector<float> want = m.forward(k.req, k.x, k.t1000, cond).to_floats();
  int home = 0;
  S3D_CUDA_CHECK(cudaGetDevice(&home));
  Context c0(home), c1(home == 0 ? 1 : 0);
  std::unique_ptr<Transformer> r0, r1;
  {
    ContextScope s(c0);
    r0 = std::make_unique<Transformer>(load_checkpoint(dir + "/full2.json", Device::CUDA));
  }
  {
    ContextScope s(c1);
    r1 = std::make_unique<Transformer>(load_checkpoint(dir + "/full2.json", Device::CUDA));
  }
  auto group = parallel::make_nccl_group({&c0, &c1});
  SequenceParallel sp({r0.get(), r1.get()}, *group);
  const ShardedRequest sr = sp.shard(k.req);
  const Tensor got = sp.forward(sr, k.x, k.t1000, cond);
  cudaDeviceSynchronize();
  const double e = testing::rel_l2(got.to_floats(), want);
  std::printf("[ sequence parallel ] fast, 30227 tokens, 2 GPUs: rel L2 %.3g\n", e);
  EXPECT_LE(e, kBound);
}

// The Engine with EngineOptions::devices: the small 12-head model, a request of 2 x 700
// tokens (split when a device per part holds at least 64).
struct EngineOnDevices : SequenceParallelGpu {
  sparse3d::EngineOptions options(std::vector<int> devices) const {
    sparse3d::EngineOptions o;
    o.device = sparse3d::DeviceChoice::CUDA;
    o.cache_dir = dir + "/cache";
    o.devices = std::move(devices);
    o.parallel_min_tokens = 64;
    return o;
  }
  static std::vector<float> floats_of(const sparse3d::SampleResult& r) {
    const std::vector<uint8_t> b = bytes_of(r.latent);
    std::vector<float> f(b.size() / sizeof(float));
    std::memcpy(f.data(), b.data(), f.size() * sizeof(float));
    return f;
  }
  static size_t fallbacks(const sparse3d::Engine& e, const std::string& reason_part) {
    size_t n = 0;
    for (const auto& f : e.counters().fallbacks)
      if (f.optimization == "sequence_parallel" && f.reason.find(reason_part) != std::string::npos)
        n += static_cast<size_t>(f.count);
    return n;
  }
};

TEST_F(EngineOnDevices, CountsAMissingDeviceAndRunsOnOne) {
  S3D_REQUIRE_GPU();
  const int n = cuda_device_count();
  int home = 0;
  S3D_CUDA_CHECK(cudaGetDevice(&home));
  sparse3d::Engine one(dir + "/small.json", options({}));
  sparse3d::Engine e(dir + "/small.json", options({home, n}));
  auto in = testing::synthetic_inputs({700, 700}, 13, 64, 32, 3);
  const sparse3d::SampleRequest r = testing::sample_request(in, 7, 4);
  const sparse3d::SampleResult want = one.sample(r);
  const sparse3d::SampleResult got = e.sample(r);
  EXPECT_EQ(got.stats.devices, 1);
  EXPECT_NE(
      got.stats.devices_reason.find("1 of 2 devices (device " + std::to_string(n) + " missing"),
      std::string::npos)
      << got.stats.devices_reason;
  EXPECT_GE(fallbacks(e, "device " + std::to_string(n) + " missing"), 1u);
  EXPECT_EQ(bytes_of(got.latent), bytes_of(want.latent));
  std::printf("[ sequence parallel ] engine, devices {%d, %d} on %d GPU(s): %d device (%s)\n", home,
              n, n, got.stats.devices, got.stats.devices_reason.c_str());
}

TEST_F(EngineOnDevices, SplitsARequestOverTwoGpus) {
  S3D_REQUIRE_GPU();
  if (cuda_device_count() < 2)
    GTEST_SKIP() << "one GPU here: the two-GPU test runs on a 2-GPU machine";
  int home = 0;
  S3D_CUDA_CHECK(cudaGetDevice(&home));
  sparse3d::Engine one(dir + "/small.json", options({}));
  sparse3d::Engine e(dir + "/small.json", options({home, home == 0 ? 1 : 0}));
  auto in = testing::synthetic_inputs({700, 700}, 13, 64, 32, 3);
  const sparse3d::SampleRequest r = testing::sample_request(in, 7, 4);
  const sparse3d::SampleResult got = e.sample(r);
  EXPECT_EQ(got.stats.devices, 2) << got.stats.devices_reason;
  const double err = testing::rel_l2(floats_of(got), floats_of(one.sample(r)));
  std::printf("[ sequence parallel ] engine, 2 x 700 tokens on 2 GPUs: rel L2 %.3g (%s)\n", err,
              got.stats.devices_reason.c_str());
  EXPECT_LE(err, 2 * kBound);
  EXPECT_EQ(fallbacks(e, ""), 0u);
  // Below the minimum per device the request stays on one GPU, and says so.
  auto small = testing::synthetic_inputs({90}, 13, 64, 32, 5);
  const sparse3d::SampleResult kept = e.sample(testing::sample_request(small, 7, 4));
  EXPECT_EQ(kept.stats.devices, 1) << kept.stats.devices_reason;
  EXPECT_NE(kept.stats.devices_reason.find("fewer than 64 per device"), std::string::npos)
      << kept.stats.devices_reason;
}

}  // namespace
}  // namespace s3d::model
