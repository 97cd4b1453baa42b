// The numerical contract of gemm_gelu_epilogue (stated here once, used by the CPU and GPU
// tests): the fused fc1 y' = bf16(GELU(Wx + b)) against the reference chain
// y = bf16(GELU(u)), u = bf16(Wx + b), per layer:
//   1. every element of y' finite;
//   2. per element |y' - y| <= 1.13 ulp(u) + ulp(max(|y|, |y'|)), all ulps of bf16: the
//      reference's extra rounding of u moves GELU's input by at most ulp(u)/2, a different
//      fp32 accumulation (another cuBLASLt algorithm) may flip that rounding (up to ulp(u)),
//      |GELU'| <= 1.13, and each side rounds its output once (ulp / 2 each);
//   3. relative L2 of y' - y at most 2^-8 (the bf16 unit roundoff).
// Tests also apply docs/RELIABILITY.md's fp64-golden rule where they have an fp64 GEMM:
// mean|golden - y'| <= 1.1 mean|golden - y|.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <iostream>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace s3d::testing {

// The distance between adjacent bf16 values around x (8 significant bits): 2^(e - 7) for
// |x| in [2^e, 2^(e+1)), from the bits of the float (the full-model test calls this on
// hundreds of millions of elements).
inline double bf16_spacing(double x) {
  const float f = static_cast<float>(std::fabs(x));
  if (!(f >= 0x1.0p-126f)) return 0x1.0p-133;
  if (!std::isfinite(f)) return std::numeric_limits<double>::infinity();
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  const int e = static_cast<int>((bits >> 23) & 0xff) - 127;
  return std::ldexp(1.0, e - 7);
}

struct EpilogueError {
  double max_abs = 0, rel_l2 = 0, worst_excess = 0;  // worst |d| / bound
  int64_t non_finite = 0, outside = 0;
};

inline EpilogueError gelu_epilogue_error(const Tensor& u, const Tensor& ref, const Tensor& fused) {
  const std::vector<float> uv = u.to(Device::CPU).to_floats();
  const std::vector<float> rv = ref.to(Device::CPU).to_floats();
  const std::vector<float> fv = fused.to(Device::CPU).to_floats();
  EpilogueError e;
  double num = 0, den = 0;
  for (size_t i = 0; i < fv.size(); ++i) {
    if (!std::isfinite(fv[i])) {
      ++e.non_finite;
      continue;
    }
    const double d = std::fabs(double(fv[i]) - rv[i]);
    const double bound = 1.13 * bf16_spacing(uv[i]) +
                         bf16_spacing(std::max(std::fabs(double(rv[i])), std::fabs(double(fv[i]))));
    e.max_abs = std::max(e.max_abs, d);
    e.worst_excess = std::max(e.worst_excess, d / bound);
    if (d > bound) ++e.outside;
    num += d * d;
    den += double(rv[i]) * rv[i];
  }
  e.rel_l2 = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  return e;
}

inline ::testing::AssertionResult meets_gelu_epilogue_contract(const Tensor& u, const Tensor& ref,
                                                               const Tensor& fused,
                                                               const std::string& what) {
  const EpilogueError e = gelu_epilogue_error(u, ref, fused);
  std::cout << "[ contract ] gemm_gelu_epilogue " << what << ": max abs " << e.max_abs
            << ", rel L2 " << e.rel_l2 << ", worst |d|/bound " << e.worst_excess << "\n";
  if (e.non_finite == 0 && e.outside == 0 && e.rel_l2 <= 0x1.0p-8)
    return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": " << e.non_finite << " non-finite, "
                                       << e.outside << " outside the per-element bound, rel L2 "
                                       << e.rel_l2 << " (max abs " << e.max_abs << ")";
}

}  // namespace s3d::testing
