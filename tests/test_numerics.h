// Small helpers shared by the CPU and GPU tests: random inputs, error statistics against a
// reference, and checks that every output element was written (poison detection).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "core/tensor.h"

namespace s3d::testing {

// Host tensor of mean + stddev * N(0, 1) values from the engine's generator, rounded to dtype.
inline Tensor random_tensor(const Shape& shape, DType dtype, uint64_t seed, float stddev = 1.0f,
                            float mean = 0.0f) {
  std::vector<float> v(static_cast<size_t>(shape_numel(shape)));
  normal_fill(seed, 0, v.size(), v.data());
  for (float& x : v) x = mean + stddev * x;
  return Tensor::from_floats(v, shape, dtype);
}

// A copy of t on t's device (in-place ops overwrite their input; the tests keep it).
inline Tensor copy_of(const Tensor& t) {
  Tensor c = Tensor::empty(t.shape(), t.dtype(), t.device());
  c.copy_from(t);
  return c;
}

// Batch indices of B assets over T tokens, in runs as packed requests hold them; every asset
// present when T >= B.
inline Tensor batch_runs(int64_t T, int B) {
  std::vector<int32_t> v(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) v[t] = static_cast<int32_t>(t * B / T);
  return Tensor::from_ints(v, {T});
}

struct ErrorStats {
  double rel_l2 = 0;   // ||got - want|| / ||want||
  double max_abs = 0;  // max |got - want|
  int64_t non_finite = 0;
};

template <class Want>
ErrorStats compare(const std::vector<float>& got, const std::vector<Want>& want) {
  ErrorStats s;
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
    if (!std::isfinite(got[i])) {
      ++s.non_finite;
      continue;
    }
    double d = static_cast<double>(got[i]) - static_cast<double>(want[i]);
    num += d * d;
    den += static_cast<double>(want[i]) * static_cast<double>(want[i]);
    s.max_abs = std::max(s.max_abs, std::fabs(d));
  }
  s.rel_l2 = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  if (got.size() != want.size()) s.non_finite += 1;  // a size mismatch must fail the test
  return s;
}

// Relative L2 error, or infinity when any element of `got` is not finite.
inline double rel_l2(const std::vector<float>& got, const std::vector<float>& ref) {
  ErrorStats e = compare(got, ref);
  return e.non_finite ? INFINITY : e.rel_l2;
}

// Same shape, dtype and bytes (any devices): bit-for-bit equality of two tensors.
inline bool bitwise_equal(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  Tensor ha = a.device() == Device::CPU ? a : a.to(Device::CPU);
  Tensor hb = b.device() == Device::CPU ? b : b.to(Device::CPU);
  return std::memcmp(ha.data(), hb.data(), ha.nbytes()) == 0;
}

// The same 32 bits (a NaN equals only the same NaN; -0 differs from +0).
inline bool bits_equal(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// Elements still holding Tensor::poison()'s all-ones pattern (bf16/f32 only), on any device.
inline int64_t count_poisoned(const Tensor& t) {
  Tensor h = t.device() == Device::CPU ? t : t.to(Device::CPU);
  int64_t n = 0;
  if (h.dtype() == DType::BF16) {
    const auto* p = h.data_as<uint16_t>();
    for (int64_t i = 0; i < h.numel(); ++i) n += p[i] == 0xFFFFu;
  } else {
    const auto* p = h.data_as<uint32_t>();
    for (int64_t i = 0; i < h.numel(); ++i) n += p[i] == 0xFFFFFFFFu;
  }
  return n;
}

// The message of the s3d::Error that f throws, or "<no error>".
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

}  // namespace s3d::testing
