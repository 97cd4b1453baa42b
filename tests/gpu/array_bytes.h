// The bytes of an engine result, wherever it lives (device or host), for bit-for-bit checks.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "sparse3d/sparse3d.h"

inline std::vector<uint8_t> bytes_of(const sparse3d::Array& a) {
  std::vector<uint8_t> out(a.view.nbytes());
  const auto kind =
      a.view.device == sparse3d::Device::CUDA ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost;
  EXPECT_EQ(cudaMemcpy(out.data(), a.view.data, out.size(), kind), cudaSuccess);
  return out;
}
