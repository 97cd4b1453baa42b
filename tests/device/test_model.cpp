// The whole model on the test device (tests/device_under_test.h), tiny preset: a forward is
// finite, repeatable bit for bit, and depends on its condition and its timestep; on the GPU
// its launches are counted and the same from run to run. The CPU backend's own properties
// (bitwise batching, CFG modes and chunking; checkpoints and request checks) are in
// tests/cpu/test_model_cpu.cpp; the GPU against the CPU backend in tests/gpu/test_model_gpu.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "core/cuda_util.h"
#include "device/device_test_util.h"
#include "model/checkpoint.h"
#include "model/trunk/transformer.h"
#include "model_inputs.h"

namespace s3d::model {
namespace {

using test::kTestDevice;
using test::kTestOnCuda;

struct ModelOnDevice : ::testing::Test {
  static void TearDownTestSuite() {
    if (!dir.empty()) std::filesystem::remove_all(dir);
    dir.clear();
  }
  void SetUp() override {
    S3D_TEST_DEVICE();
    if (dir.empty()) dir = test::scratch_dir("model_device");
    checkpoint = test::checkpoint_in(dir, "tiny", preset("tiny"), 7);
  }
  static std::string dir;
  std::string checkpoint;
};
std::string ModelOnDevice::dir;

// Mean |a - b| over the elements.
double mean_abs_difference(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff += std::abs(a[i] - b[i]);
  return diff / a.size();
}

TEST_F(ModelOnDevice, ForwardIsFiniteRepeatableAndNonTrivial) {
  Transformer m(load_checkpoint(checkpoint, kTestDevice));
  auto in = testing::synthetic_inputs({100}, 8, 64, 32, 41);
  Request req = m.prepare(in.coords, 1, 8);
  const Tensor t = Tensor::from_floats({500.0f}, {1}, DType::F32).to(kTestDevice);
  const Tensor x = in.noise.to(kTestDevice), cond = in.cond.to(kTestDevice);
  m.forward(req, x, t, cond);  // warm-up: graph and algorithm caches
  if constexpr (kTestOnCuda) synchronize();
  reset_launch_counts();
  const Tensor v1 = m.forward(req, x, t, cond).to(Device::CPU);
  const LaunchCounts first = launch_counts();
  reset_launch_counts();
  const Tensor v2 = m.forward(req, x, t, cond).to(Device::CPU);
  const LaunchCounts second = launch_counts();
  ASSERT_EQ(v1.shape(), (Shape{100, 32}));
  const auto a = v1.to_floats(), b = v2.to_floats();
  double norm = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_TRUE(std::isfinite(a[i])) << i;
    ASSERT_EQ(a[i], b[i]) << "run-to-run difference at " << i;
    norm += double(a[i]) * a[i];
  }
  EXPECT_GT(norm / a.size(), 1e-3);
  // The condition matters, and so does the timestep.
  const Tensor zero = Tensor::zeros(in.cond.shape(), DType::BF16, kTestDevice);
  const Tensor t2 = Tensor::from_floats({1000.0f}, {1}, DType::F32).to(kTestDevice);
  EXPECT_GT(mean_abs_difference(a, m.forward(req, x, t, zero).to_floats()), 1e-4);
  EXPECT_GT(mean_abs_difference(a, m.forward(req, x, t2, cond).to_floats()), 1e-4);
  if constexpr (kTestOnCuda) {  // the CPU backend counts no launches
    EXPECT_GT(first.total, 50u);
    EXPECT_EQ(first.total, second.total);
    EXPECT_EQ(first.by_op.at("sdpa"), 2u * 2u);  // 2 blocks x (self + cross)
  }
}

}  // namespace
}  // namespace s3d::model
