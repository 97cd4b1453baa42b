// The bytes of an engine result, wherever it lives (device or host), for bit-for-bit checks.
// A host result is copied without the CUDA runtime, so the CPU binary needs no GPU for it.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "sparse3d/sparse3d.h"

inline std::vector<uint8_t> bytes_of(const sparse3d::Array& a) {
  std::vector<uint8_t> out(a.view.nbytes());
  if (out.empty()) return out;
  if (a.view.device != sparse3d::Device::CUDA) {
    std::memcpy(out.data(), a.view.data, out.size());
    return out;
  }
  EXPECT_EQ(cudaMemcpy(out.data(), a.view.data, out.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  return out;
}
