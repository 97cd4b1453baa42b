// Per-head RMSNorm and RoPE: argument checks, device dispatch, and the CPU oracle.
#include "kernels/qk_norm_rope.h"

#include <cmath>

#include "kernels/kernel_checks.h"
#include "kernels/qk_norm_rope_cuda.h"
#include "kernels/reference_math.h"

namespace s3d::kernels {
namespace {

// omega_j = f0 / theta^(j / freq_dim) in fp32, as the original builds its buffer on the CPU.
math::FreqTable rope_frequencies(int freq_dim, float f0, float theta) {
  math::FreqTable table;
  table.count = freq_dim;
  for (int j = 0; j < freq_dim; ++j) {
    table.value[j] = f0 / powf(theta, static_cast<float>(j) / static_cast<float>(freq_dim));
  }
  return table;
}

}  // namespace

namespace cpu {

void head_rmsnorm(const RowView& x, const Tensor& gamma, int heads, int head_dim, float scale,
                  Tensor& out) {
  const auto* xp = static_cast<const uint16_t*>(x.data());
  const float* g = gamma.data_as<float>();
  uint16_t* yp = out.data_as<uint16_t>();
  const int64_t H = heads, D = head_dim;
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < x.rows; ++t) {
    for (int64_t h = 0; h < H; ++h) {
      const uint16_t* in = xp + t * x.stride + h * D;
      uint16_t* o = yp + (t * H + h) * D;
      double sum_sq = 0.0;
      for (int64_t d = 0; d < D; ++d) {
        const double v = bf16_to_float(in[d]);
        sum_sq += v * v;
      }
      const float norm = math::l2_norm_from_squares(sum_sq);
      for (int64_t d = 0; d < D; ++d) {
        o[d] = float_to_bf16(
            math::head_rmsnorm_apply(bf16_to_float(in[d]), norm, g[h * D + d], scale));
      }
    }
  }
}

void rope_phases(const Tensor& coords, int half, const math::FreqTable& freqs, Tensor& cos_out,
                 Tensor& sin_out) {
  const int32_t* c = coords.data_as<int32_t>();
  float* co = cos_out.data_as<float>();
  float* so = sin_out.data_as<float>();
  const int64_t T = coords.size(0);
  const int fd = freqs.count;
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < T; ++t) {
    for (int p = 0; p < half; ++p) {
      // Phases past 3 * freq_dim are the zero padding up to head_dim / 2.
      const float phase =
          p < 3 * fd ? math::rope_phase(c[t * 4 + 1 + p / fd], freqs.value[p % fd]) : 0.0f;
      co[t * half + p] = cosf(phase);
      so[t * half + p] = sinf(phase);
    }
  }
}

void rope_apply(const Tensor& x, const Tensor& cos, const Tensor& sin, Tensor& out) {
  const int64_t T = x.size(0), H = x.size(1), D = x.size(2), half = D / 2;
  const uint16_t* xp = x.data_as<uint16_t>();
  const float* cp = cos.data_as<float>();
  const float* sp = sin.data_as<float>();
  uint16_t* yp = out.data_as<uint16_t>();
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t h = 0; h < H; ++h) {
      const int64_t base = (t * H + h) * D;
      for (int64_t p = 0; p < half; ++p) {
        float re, im;
        math::rope_rotate(bf16_to_float(xp[base + 2 * p]), bf16_to_float(xp[base + 2 * p + 1]),
                          cp[t * half + p], sp[t * half + p], re, im);
        yp[base + 2 * p] = float_to_bf16(re);
        yp[base + 2 * p + 1] = float_to_bf16(im);
      }
    }
  }
}

}  // namespace cpu

void head_rmsnorm(const RowView& x, const Tensor& gamma, int heads, int head_dim, Tensor& out) {
  const char* op = "head_rmsnorm";
  detail::check_view(x, op, "x");
  detail::check_dtype(x.base, DType::BF16, op, "x");
  S3D_CHECK(heads > 0 && head_dim > 0, op, ": heads and head_dim must be positive, got ", heads,
            " x ", head_dim);
  S3D_CHECK(x.cols == int64_t{heads} * head_dim, op, ": x rows must hold heads * head_dim = ",
            int64_t{heads} * head_dim, " elements, got ", x.cols);
  detail::check_dtype(gamma, DType::F32, op, "gamma");
  detail::check_shape(gamma, {heads, head_dim}, op, "gamma");
  detail::check_dtype(out, DType::BF16, op, "out");
  detail::check_shape(out, {x.rows, heads, head_dim}, op, "out");
  detail::check_same_device(op, {{"x", &x.base}, {"gamma", &gamma}, {"out", &out}});
  if (x.rows == 0) return;
  const float scale = math::head_rmsnorm_scale(head_dim);
  if (out.is_cuda()) {
    cuda::head_rmsnorm(x, gamma, heads, head_dim, scale, out);
  } else {
    cpu::head_rmsnorm(x, gamma, heads, head_dim, scale, out);
  }
}

void rope_phases(const Tensor& coords, int head_dim, float f0, float theta, Tensor& cos_out,
                 Tensor& sin_out) {
  const char* op = "rope_phases";
  detail::check_dtype(coords, DType::I32, op, "coords");
  S3D_CHECK(coords.ndim() == 2 && coords.size(1) == 4, op,
            ": coords must be i32 [T, 4] (batch, x, y, z), got ", coords.describe());
  S3D_CHECK(head_dim > 0 && head_dim % 2 == 0, op, ": head_dim must be positive and even, got ",
            head_dim);
  const int half = head_dim / 2;
  const int freq_dim = half / 3;
  S3D_CHECK(freq_dim <= math::kMaxFreqs, op, ": head_dim ", head_dim, " needs ", freq_dim,
            " frequencies, more than the supported ", math::kMaxFreqs);
  const int64_t T = coords.size(0);
  detail::check_dtype(cos_out, DType::F32, op, "cos_out");
  detail::check_shape(cos_out, {T, half}, op, "cos_out");
  detail::check_dtype(sin_out, DType::F32, op, "sin_out");
  detail::check_shape(sin_out, {T, half}, op, "sin_out");
  detail::check_same_device(op, {{"coords", &coords}, {"cos_out", &cos_out}, {"sin_out", &sin_out}});
  if (T == 0) return;
  const math::FreqTable freqs = rope_frequencies(freq_dim, f0, theta);
  if (coords.is_cuda()) {
    cuda::rope_phases(coords, half, freqs, cos_out, sin_out);
  } else {
    cpu::rope_phases(coords, half, freqs, cos_out, sin_out);
  }
}

void rope_apply(const Tensor& x, const Tensor& cos, const Tensor& sin, Tensor& out) {
  const char* op = "rope_apply";
  detail::check_dtype(x, DType::BF16, op, "x");
  S3D_CHECK(x.ndim() == 3 && x.size(2) % 2 == 0, op,
            ": x must be bf16 [T, H, D] with D even, got ", x.describe());
  const int64_t T = x.size(0), half = x.size(2) / 2;
  detail::check_dtype(cos, DType::F32, op, "cos");
  detail::check_shape(cos, {T, half}, op, "cos");
  detail::check_dtype(sin, DType::F32, op, "sin");
  detail::check_shape(sin, {T, half}, op, "sin");
  detail::check_dtype(out, DType::BF16, op, "out");
  detail::check_same_shape(out, x, op, "out", "x");
  detail::check_same_device(op, {{"x", &x}, {"cos", &cos}, {"sin", &sin}, {"out", &out}});
  if (x.numel() == 0) return;
  if (x.is_cuda()) {
    cuda::rope_apply(x, cos, sin, out);
  } else {
    cpu::rope_apply(x, cos, sin, out);
  }
}

}  // namespace s3d::kernels
