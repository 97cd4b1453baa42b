// The device the device-parametrised tests run on (tests/device/, tests/ops/, tests/parallel/):
// the same source files are built into the CPU test binary (the CPU backend) and into the GPU
// suite (the GPU, against the same cases), so that one test covers both backends. Where a
// backend needs another case (the GPU's sizes reach past its tiles, the CPU's stay small),
// the test picks it with kTestOnCuda; where the GPU has an extra check (its result against
// the CPU oracle, launch counts), the check is under kTestOnCuda.
#pragma once

#include <gtest/gtest.h>

#include "core/cuda_util.h"
#include "core/tensor.h"

namespace s3d::test {

#ifdef SPARSE3D_TEST_DEVICE_CUDA
inline constexpr Device kTestDevice = Device::CUDA;
#else
inline constexpr Device kTestDevice = Device::CPU;
#endif
inline constexpr bool kTestOnCuda = kTestDevice == Device::CUDA;

}  // namespace s3d::test

// First line of every device-parametrised test: the GPU build skips without a usable GPU.
#define S3D_TEST_DEVICE()                                                                 \
  do {                                                                                    \
    if (::s3d::test::kTestOnCuda && !::s3d::cuda_available())                             \
      GTEST_SKIP() << "no CUDA device here: the GPU suite's device tests run on a GPU machine"; \
  } while (0)
