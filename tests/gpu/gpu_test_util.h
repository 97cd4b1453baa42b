// Helpers for the GPU kernel tests: every op runs on the GPU and on the CPU oracle from the
// same inputs into poisoned outputs, and the two results are compared under a contract
// (tests/device_contract.h: poisoned outputs and the bitwise / 1-ulp comparison, shared with
// the device-parametrised op tests of tests/ops/, which the CPU binary builds too).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <iostream>
#include <sstream>
#include <string>

#include "../cpu/kernel_test_util.h"
#include "../device_contract.h"
#include "core/cuda_util.h"
#include "core/tensor.h"

// Every GPU test starts with this.
#define S3D_REQUIRE_CUDA()                                                                  \
  do {                                                                                      \
    if (!::s3d::cuda_available())                                                           \
      GTEST_SKIP() << "no CUDA device here: the GPU kernel tests run on a GPU machine "     \
                      "(scripts/device/run.sh unit)";                                      \
  } while (0)

namespace s3d::test {

inline Tensor on_gpu(const Tensor& host) { return host.to(Device::CUDA); }

inline std::string tag(const std::string& op, const Shape& s, DType in, DType out) {
  return cat(op, " ", shape_str(s), " ", dtype_name(in), "->", dtype_name(out));
}

}  // namespace s3d::test
