// The comparison of a result against another device's (the GPU's against the CPU oracle),
// shared by the GPU tests (tests/gpu/) and the device-parametrised op tests (tests/ops/),
// which both binaries build: poisoned outputs on any device, and a contract, bitwise (raw
// bits), at most 1 bf16 ulp, or relative error 2e-6 for f32. Each comparison prints how many
// elements were not bitwise equal, so that a drift shows before it fails. Host code only.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace s3d::test {

inline Tensor poisoned(const Shape& shape, DType dtype, Device device) {
  Tensor t = Tensor::empty(shape, dtype, device);
  t.poison();
  return t;
}

enum class Contract {
  Bitwise,  // identical raw bits
  Close,    // bf16: at most 1 ulp apart; f32: relative error at most 2e-6
};

// An element outside the contract that the caller can explain (e.g. 1 + tanh cancelling):
// (index, gpu value, cpu value) -> true when excused. Excused elements are counted apart.
using Excuse = std::function<bool(size_t, double, double)>;

// Order-preserving integer of a bf16 bit pattern (+0 and -0 both 0), for ulp distances.
inline int32_t bf16_order(uint16_t bits) {
  return (bits & 0x8000u) ? -static_cast<int32_t>(bits & 0x7fffu) : static_cast<int32_t>(bits);
}

inline ::testing::AssertionResult meets(const Tensor& gpu, const Tensor& cpu, Contract contract,
                                        const std::string& what, const Excuse& excuse = {}) {
  if (gpu.shape() != cpu.shape() || gpu.dtype() != cpu.dtype())
    return ::testing::AssertionFailure() << what << ": " << gpu.describe() << " vs "
                                         << cpu.describe();
  const Tensor g = gpu.to(Device::CPU);
  // The reference may live on the GPU too (graph replay vs eager launches): compare host copies.
  const Tensor c = cpu.is_cuda() ? cpu.to(Device::CPU) : cpu;
  const bool bf16 = c.dtype() == DType::BF16;
  const std::vector<float> gv = g.to_floats(), cv = c.to_floats();
  int64_t non_bitwise = 0, failures = 0, excused = 0;
  double worst = 0.0;
  std::ostringstream first;
  for (size_t i = 0; i < gv.size(); ++i) {
    const size_t es = dtype_size(c.dtype());
    const bool same = std::memcmp(static_cast<const char*>(g.data()) + i * es,
                                  static_cast<const char*>(c.data()) + i * es, es) == 0;
    bool ok = same && std::isfinite(cv[i]);
    if (!same) {
      ++non_bitwise;
      double dist = 0.0;
      if (bf16) {
        dist = std::abs(bf16_order(g.data_as<uint16_t>()[i]) -
                        bf16_order(c.data_as<uint16_t>()[i]));
      } else {
        dist = cv[i] == 0.0f ? INFINITY : std::fabs(double(gv[i]) - cv[i]) / std::fabs(cv[i]);
      }
      if (std::isfinite(dist) && dist > worst) worst = dist;
      ok = contract == Contract::Close && std::isfinite(gv[i]) && std::isfinite(cv[i]) &&
           dist <= (bf16 ? 1.0 : 2e-6);
      if (!ok && excuse && std::isfinite(gv[i]) && std::isfinite(cv[i]) &&
          excuse(i, gv[i], cv[i])) {
        ++excused;
        ok = true;
      }
    }
    if (!ok && failures++ < 5)
      first << "\n  [" << i << "] gpu " << gv[i] << " cpu " << cv[i]
            << (same ? " (not finite)" : "");
  }
  std::cout << "[ contract ] " << what << ": " << non_bitwise << " of " << gv.size()
            << " elements not bitwise, worst " << worst << (bf16 ? " ulp" : " rel");
  if (excuse) std::cout << ", " << excused << " excused";
  std::cout << "\n";
  if (failures == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << what << ": " << failures << " of " << gv.size() << " elements break the "
         << (contract == Contract::Bitwise ? "bitwise" : bf16 ? "1-ulp" : "2e-6 relative")
         << " contract:" << first.str();
}

}  // namespace s3d::test
