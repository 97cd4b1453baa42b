// gemm::linear on the test device (tests/device_under_test.h) where both backends answer the
// same question: an empty batch is a no-op that launches nothing. The CPU path against an
// independent fp64 loop and its boundary checks are in tests/cpu/test_linear.cpp; cuBLASLt
// against the CPU reference at the model's shapes in tests/gpu/test_linear_gpu.cpp.
#include <gtest/gtest.h>

#include <cstdint>

#include "core/cuda_util.h"
#include "device_under_test.h"
#include "gemm/linear.h"
#include "test_numerics.h"

namespace s3d {
namespace {

using test::kTestDevice;
using testing::random_tensor;

TEST(Linear, EmptyBatchIsANoOpWithoutACall) {
  S3D_TEST_DEVICE();
  Tensor x = Tensor::empty({0, 64}, DType::BF16, kTestDevice);
  Tensor w = random_tensor({32, 64}, DType::BF16, 1).to(kTestDevice);
  Tensor b = random_tensor({32}, DType::BF16, 2).to(kTestDevice);
  Tensor y = Tensor::empty({0, 32}, DType::BF16, kTestDevice);
  const uint64_t calls = launch_counts().by_op["gemm"];
  EXPECT_NO_THROW(gemm::linear(x, w, &b, y));
  EXPECT_EQ(launch_counts().by_op["gemm"], calls);
}

}  // namespace
}  // namespace s3d
