// Helpers for the kernel tests (on top of tests/test_numerics.h): integer and coordinate
// inputs, an fp64 rounding to bf16 written independently of core/bf16.h, and a comparison of
// an op's output against exact fp64 values with an error bound that says where it comes from.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <sstream>
#include <string>
#include <vector>

#include "../test_numerics.h"
#include "contract/fallback.h"
#include "core/error.h"
#include "core/rng.h"
#include "core/tensor.h"

namespace s3d::test {

// A host bf16 tensor with every element poisoned, so that an unwritten element fails a check.
inline Tensor poisoned_bf16(const Shape& shape) {
  Tensor t = Tensor::empty(shape, DType::BF16, Device::CPU);
  t.poison();
  return t;
}

// The fallbacks counted so far for one flag, every reason together.
inline uint64_t fallbacks_of(const std::string& flag) {
  uint64_t n = 0;
  for (const auto& c : contract::fallback_counts())
    if (c.optimization == flag) n += c.count;
  return n;
}

// Normal inputs (mean + stddev * N(0, 1), rounded to dtype) from the shared test helpers.
using s3d::testing::random_tensor;

// Integers uniform in [lo, hi).
inline Tensor random_ints(const Shape& shape, uint64_t seed, int lo, int hi) {
  std::vector<int32_t> v(static_cast<size_t>(shape_numel(shape)));
  for (size_t i = 0; i < v.size(); ++i)
    v[i] = lo + static_cast<int32_t>(uniform_at(seed, i) * (hi - lo));
  return Tensor::from_ints(v, shape);
}

// Voxel coordinates [T, 4]: batch index 0, x, y, z in [0, 64).
inline Tensor random_coords(int64_t T, uint64_t seed) {
  std::vector<int32_t> v(static_cast<size_t>(T * 4));
  for (int64_t t = 0; t < T; ++t) {
    v[t * 4] = 0;
    for (int a = 1; a < 4; ++a)
      v[t * 4 + a] = static_cast<int32_t>(uniform_at(seed, static_cast<uint64_t>(t * 4 + a)) * 64);
  }
  return Tensor::from_ints(v, {T, 4});
}

// Spacing of bf16 (8 significant bits) or fp32 (24) values at |x|, subnormals included.
inline double ulp_at(double x, int bits) {
  const double min_ulp = std::ldexp(1.0, -126 - (bits - 1));
  if (x == 0.0 || !std::isfinite(x)) return min_ulp;
  int e;
  std::frexp(x, &e);  // |x| = m 2^e, m in [0.5, 1)
  return std::fmax(std::ldexp(1.0, e - bits), min_ulp);
}
inline double bf16_ulp(double x) { return ulp_at(x, 8); }
inline double f32_ulp(double x) { return ulp_at(x, 24); }

// Nearest bf16 value to x, ties to even (nearbyint in the default rounding mode).
inline double round_to_bf16(double x) {
  if (x == 0.0 || !std::isfinite(x)) return x;
  const double ulp = bf16_ulp(x);
  return std::nearbyint(x / ulp) * ulp;
}

inline constexpr double kU32 = 0x1.0p-24;  // unit roundoff of fp32

// Checks every element of `out` (host, bf16 or f32) against exact fp64 values:
//   |got - round(exact)| <= ulps * ulp_out(round(exact)) + kU32 * mag[i]
// where round() rounds to out's dtype and ulps is 1 for bf16, 4 for f32. mag[i] is the
// rounding-error budget of the op's fp32 evaluation (e.g. k * sum of |terms|); NaN and Inf
// always fail. For bf16 outputs, a bias smaller than an ulp would still pass that test, so
// the well-conditioned elements (budget under 1/256 ulp) must also round to exactly
// round(exact), allowing 2% near-tie exceptions. Names the first failures.
inline ::testing::AssertionResult matches_exact(const Tensor& out, const std::vector<double>& exact,
                                                const std::vector<double>& mag) {
  const std::vector<float> got = out.to_floats();
  if (got.size() != exact.size() || got.size() != mag.size())
    return ::testing::AssertionFailure() << "size mismatch: " << got.size() << " outputs, "
                                         << exact.size() << " exact values";
  const bool bf16 = out.dtype() == DType::BF16;
  int64_t failures = 0, conditioned = 0, misrounded = 0;
  std::ostringstream first;
  for (size_t i = 0; i < got.size(); ++i) {
    const double ref = bf16 ? round_to_bf16(exact[i]) : static_cast<double>(static_cast<float>(exact[i]));
    const double ulp = bf16 ? bf16_ulp(ref) : f32_ulp(ref);
    const double tol = (bf16 ? 1.0 : 4.0) * ulp + kU32 * mag[i];
    const double g = got[i];
    if (bf16 && kU32 * mag[i] < ulp / 256) {
      ++conditioned;
      if (g != ref) ++misrounded;
    }
    if (std::isfinite(g) && std::fabs(g - ref) <= tol) continue;
    if (failures++ < 5)
      first << "\n  [" << i << "] got " << g << ", exact " << exact[i] << " (rounded " << ref
            << "), tolerance " << tol;
  }
  if (misrounded > std::max<int64_t>(2, conditioned / 50))
    return ::testing::AssertionFailure()
           << misrounded << " of " << conditioned
           << " well-conditioned bf16 elements are not the nearest bf16 of the exact value";
  if (failures == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << failures << " of " << got.size()
                                       << " elements outside tolerance:" << first.str();
}

// Runs `fn` and expects an s3d::Error whose message contains every fragment.
template <class Fn>
::testing::AssertionResult throws_error(Fn fn, std::initializer_list<const char*> fragments) {
  const std::string msg = s3d::testing::error_of(fn);
  for (const char* f : fragments)
    if (msg.find(f) == std::string::npos)
      return ::testing::AssertionFailure() << "error \"" << msg << "\" lacks \"" << f << "\"";
  return ::testing::AssertionSuccess();
}

}  // namespace s3d::test
