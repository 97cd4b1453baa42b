// The tolerance kernels' contract (src/kernels/fast_norm.h, docs/CONTRACTS.md), shared by
// the CPU and GPU tests: the fp64 golden results of the three ops, computed on the host from
// the same bf16 inputs (and f32 gamma / cos / sin), and the checks
//   - the fp64-golden rule: mean |g - f| <= 1.1 mean |g - r| (r the bitwise path's output),
//   - no NaN or Inf in f,
//   - every element |f - g| <= ulp_bf16(g) + slop, slop the fp32 evaluation's error budget
//     (below): a wrong, stale or unwritten element (in-place ops cannot be poisoned) fails
//     here even where the mean would hide it.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "core/bf16.h"
#include "core/tensor.h"
#include "cpu/kernel_test_util.h"
#include "kernels/qk_norm_rope.h"

namespace s3d::testing {

// The budget of the fp32 evaluation, as a fraction of the magnitudes it works with: an fp32
// sum of n terms in a chain errs by at most n u of the summed magnitudes (u = 2^-24; n = 53
// for C = 1536: a lane's 48 elements, then the 5-step butterfly; 133 for C = 4096; 19 for a
// head of 128), ~1e-7 typically (the errors are not all of one sign), plus a handful of fp32
// products. 1e-5 covers the worst case and is still 1/400 of a bf16 ulp.
inline constexpr double kFp32Budget = 1e-5;

struct Golden {
  std::vector<double> value;  // per element of the op's output
  std::vector<double> slop;   // kFp32Budget * the magnitudes the element's evaluation saw
};

inline double bf16_bits_value(uint16_t b) { return static_cast<double>(bf16_to_float(b)); }

// Modulated LayerNorm in fp64: x host bf16 [T, C]; shift, scale host bf16 views; batch_index
// host i32 [T]. y = (x - mean) / sqrt(var + eps) * (1 + scale[b]) + shift[b].
inline Golden golden_modulated_layernorm(const Tensor& x, const RowView& shift,
                                          const RowView& scale, const Tensor& batch_index,
                                          float eps) {
  const int64_t T = x.size(0), C = x.size(1);
  const auto* xp = x.data_as<uint16_t>();
  const auto* shp = static_cast<const uint16_t*>(shift.data());
  const auto* scp = static_cast<const uint16_t*>(scale.data());
  const int32_t* bp = batch_index.data_as<int32_t>();
  Golden g;
  g.value.resize(static_cast<size_t>(T * C));
  g.slop.resize(g.value.size());
  for (int64_t t = 0; t < T; ++t) {
    const uint16_t* xr = xp + t * C;
    double sum = 0, sum_abs = 0;
    for (int64_t c = 0; c < C; ++c) {
      sum += bf16_bits_value(xr[c]);
      sum_abs += std::fabs(bf16_bits_value(xr[c]));
    }
    const double mean = sum / C;
    double sq = 0;
    for (int64_t c = 0; c < C; ++c) sq += (bf16_bits_value(xr[c]) - mean) * (bf16_bits_value(xr[c]) - mean);
    const double rstd = 1.0 / std::sqrt(sq / C + static_cast<double>(eps));
    const uint16_t* sh = shp + bp[t] * shift.stride;
    const uint16_t* sc = scp + bp[t] * scale.stride;
    for (int64_t c = 0; c < C; ++c) {
      const double h = (bf16_bits_value(xr[c]) - mean) * rstd;
      const double s1 = 1.0 + bf16_bits_value(sc[c]), b = bf16_bits_value(sh[c]);
      const size_t i = static_cast<size_t>(t * C + c);
      g.value[i] = h * s1 + b;
      // The fp32 mean errs by ~n u mean|x|, which moves h by that times rstd (large for a
      // row far from zero mean); rstd's relative error moves h by ~n u |h|; the
      // modulation's products and sum add ~u of their magnitudes.
      g.slop[i] = kFp32Budget * (std::fabs(s1) * (std::fabs(h) + rstd * sum_abs / C) + std::fabs(b));
    }
  }
  return g;
}

// q/k RMSNorm (+ RoPE) in fp64 over the first `slots` C-wide slots of each row of x (host
// bf16 [T, >= slots * C]); the output covers those slots only, [T, slots * C]. gamma[s] (host
// f32 [H, D]) or null for no norm; cos/sin (host f32 [T, D/2]) or null for no RoPE.
inline Golden golden_qk(const Tensor& x, int slots, int H, int D, const Tensor* gamma0,
                        const Tensor* gamma1, const Tensor* cos, const Tensor* sin) {
  const int64_t T = x.size(0), stride = x.size(1), C = int64_t{H} * D, half = D / 2;
  const auto* xp = x.data_as<uint16_t>();
  const Tensor* gammas[2] = {gamma0, gamma1};
  const double scale = std::sqrt(static_cast<double>(D));
  Golden g;
  g.value.resize(static_cast<size_t>(T * slots * C));
  g.slop.resize(g.value.size());
  std::vector<double> y(static_cast<size_t>(D));
  for (int64_t t = 0; t < T; ++t) {
    for (int s = 0; s < slots; ++s) {
      for (int64_t h = 0; h < H; ++h) {
        const uint16_t* in = xp + t * stride + (s * H + h) * D;
        for (int64_t d = 0; d < D; ++d) y[d] = bf16_bits_value(in[d]);
        if (gammas[s] != nullptr) {
          const float* gm = gammas[s]->data_as<float>() + h * D;
          double sq = 0;
          for (int64_t d = 0; d < D; ++d) sq += y[d] * y[d];
          const double norm = std::fmax(std::sqrt(sq), 1e-12);
          for (int64_t d = 0; d < D; ++d) y[d] = y[d] / norm * gm[d] * scale;
        }
        const size_t base = static_cast<size_t>((t * slots + s) * C + h * D);
        for (int64_t p = 0; p < half; ++p) {
          const double a = y[2 * p], b = y[2 * p + 1];
          double re = a, im = b;
          if (cos != nullptr) {
            const double c = cos->data_as<float>()[t * half + p];
            const double sn = sin->data_as<float>()[t * half + p];
            re = a * c - b * sn;
            im = a * sn + b * c;
          }
          g.value[base + 2 * p] = re;
          g.value[base + 2 * p + 1] = im;
          // A rotation mixes the pair: its error is that of the pair's magnitude.
          const double mag = cos != nullptr ? std::fabs(a) + std::fabs(b) : 0.0;
          g.slop[base + 2 * p] = kFp32Budget * (cos != nullptr ? mag : std::fabs(a));
          g.slop[base + 2 * p + 1] = kFp32Budget * (cos != nullptr ? mag : std::fabs(b));
        }
      }
    }
  }
  return g;
}

// The first `slots * C` columns of each row of a host or device bf16 [T, cols] tensor, as
// floats, [T, slots * C] (the q/k part of a packed qkv; the whole tensor when it is [T, C]).
inline std::vector<float> leading_columns(const Tensor& t, int64_t cols) {
  const Tensor h = t.is_cuda() ? t.to(Device::CPU) : t;
  const std::vector<float> all = h.to_floats();
  const int64_t T = h.size(0), stride = h.size(1);
  std::vector<float> out(static_cast<size_t>(T * cols));
  for (int64_t r = 0; r < T; ++r)
    for (int64_t c = 0; c < cols; ++c) out[r * cols + c] = all[r * stride + c];
  return out;
}

// The contract of a tolerance kernel's output `fast` against the golden g and the bitwise
// path's output `ref` (both [T, cols] floats, the op's output elements). Prints both means.
inline ::testing::AssertionResult meets_golden_rule(const Golden& g, const std::vector<float>& ref,
                                                    const std::vector<float>& fast,
                                                    const std::string& what) {
  if (ref.size() != g.value.size() || fast.size() != g.value.size())
    return ::testing::AssertionFailure() << what << ": " << fast.size() << " fast and "
                                         << ref.size() << " reference elements for "
                                         << g.value.size() << " golden ones";
  double err_ref = 0, err_fast = 0;
  int64_t non_finite = 0, outside = 0;
  std::ostringstream first;
  for (size_t i = 0; i < g.value.size(); ++i) {
    const double f = fast[i];
    if (!std::isfinite(f)) {
      if (non_finite++ < 3) first << "\n  [" << i << "] fast " << f << " (not finite)";
      continue;
    }
    err_ref += std::fabs(g.value[i] - ref[i]);
    err_fast += std::fabs(g.value[i] - f);
    const double bound = test::bf16_ulp(g.value[i]) + g.slop[i];
    if (std::fabs(f - g.value[i]) > bound && outside++ < 3)
      first << "\n  [" << i << "] fast " << f << ", golden " << g.value[i] << ", bound "
            << bound;
  }
  const double n = static_cast<double>(g.value.size());
  std::cout << "[ golden   ] " << what << ": mean|g - fast| " << err_fast / n
            << ", mean|g - reference| " << err_ref / n << " (ratio "
            << (err_ref > 0 ? err_fast / err_ref : 0.0) << ", bound 1.1)\n";
  if (non_finite > 0 || outside > 0)
    return ::testing::AssertionFailure() << what << ": " << non_finite << " non-finite and "
                                         << outside << " elements farther than 1 bf16 ulp + "
                                         << "the fp32 budget from the golden value:"
                                         << first.str();
  if (err_fast > 1.1 * err_ref)
    return ::testing::AssertionFailure()
           << what << ": mean|g - fast| " << err_fast / n << " > 1.1 mean|g - reference| "
           << err_ref / n;
  return ::testing::AssertionSuccess();
}


// The q/k operands of the fast kernels' tests (host): a packed QKV [T, 3HD] with one all-zero
// k head when norm is on and T > 1 (the norm is clamped to 1e-12 and the output is 0), gammas
// not all ones, RoPE phases of random coordinates.
struct QkOperands {
  Tensor qkv, q_gamma, k_gamma, cos, sin;
};
inline QkOperands make_qk_operands(int64_t T, int H, int D, bool norm, uint64_t seed) {
  const int64_t C = int64_t{H} * D;
  QkOperands o;
  o.qkv = test::random_tensor({T, 3 * C}, DType::BF16, seed, 1.5f, 0.1f);
  if (norm && T > 1) {
    auto* p = o.qkv.data_as<uint16_t>();
    for (int d = 0; d < D; ++d) p[1 * 3 * C + C + d] = 0;
  }
  o.q_gamma = test::random_tensor({H, D}, DType::F32, seed + 1, 0.3f, 1.0f);
  o.k_gamma = test::random_tensor({H, D}, DType::F32, seed + 2, 0.3f, 1.0f);
  o.cos = Tensor::empty({T, D / 2}, DType::F32, Device::CPU);
  o.sin = Tensor::empty({T, D / 2}, DType::F32, Device::CPU);
  kernels::rope_phases(test::random_coords(T, seed + 3), D, 1.0f, 10000.0f, o.cos, o.sin);
  return o;
}

}  // namespace s3d::testing
