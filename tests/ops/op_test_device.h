// The device the op tests of tests/ops/ run on: the same source files are built into the CPU
// test binary (the CPU backend) and into the GPU suite (the GPU, against the same table and
// the same cases), so that one case list covers both backends.
#pragma once

#include <gtest/gtest.h>

#include "core/cuda_util.h"
#include "core/tensor.h"

namespace s3d::test {

#ifdef SPARSE3D_OP_TEST_DEVICE_CUDA
inline constexpr Device kOpTestDevice = Device::CUDA;
#else
inline constexpr Device kOpTestDevice = Device::CPU;
#endif

}  // namespace s3d::test

// First line of every op test: the GPU build skips without a usable GPU.
#define S3D_OP_TEST_DEVICE()                                                       \
  do {                                                                             \
    if (::s3d::test::kOpTestDevice == ::s3d::Device::CUDA && !::s3d::cuda_available()) \
      GTEST_SKIP() << "no CUDA device here: the GPU op tests run on a GPU machine"; \
  } while (0)
