// Timestep and absolute position embeddings: argument checks, frequency tables (host, fp32,
// as the original builds them on the CPU), device dispatch, and the CPU oracle.
#include "kernels/embedding.h"

#include <cmath>

#include "kernels/embedding_cuda.h"
#include "kernels/kernel_checks.h"
#include "kernels/reference_math.h"

namespace s3d::kernels {
namespace {

// f_i = exp(-ln(10000) * i / half): torch multiplies the fp32 arange by the Python double
// -ln(10000) (rounded to fp32), then divides by half, then exponentiates, all in fp32.
math::FreqTable timestep_frequencies(int half) {
  const float neg_log_period = static_cast<float>(-std::log(10000.0));
  math::FreqTable table;
  table.count = half;
  for (int i = 0; i < half; ++i) {
    table.value[i] = expf(neg_log_period * static_cast<float>(i) / static_cast<float>(half));
  }
  return table;
}

// omega_j = 1 / 10000^(j / freq_dim), fp32.
math::FreqTable ape_frequencies(int freq_dim) {
  math::FreqTable table;
  table.count = freq_dim;
  for (int j = 0; j < freq_dim; ++j) {
    table.value[j] =
        1.0f / powf(10000.0f, static_cast<float>(j) / static_cast<float>(freq_dim));
  }
  return table;
}

}  // namespace

namespace cpu {

// out[b] = [cos(t f_0..f_{half-1}), sin(t f_0..f_{half-1}), 0 if dim is odd]
void timestep_embedding(const Tensor& t, const math::FreqTable& freqs, Tensor& out) {
  const int64_t B = out.size(0), dim = out.size(1), half = freqs.count;
  const float* tp = t.data_as<float>();
  float* o = out.data_as<float>();
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t i = 0; i < half; ++i) {
      const float arg = tp[b] * freqs.value[i];
      o[b * dim + i] = cosf(arg);
      o[b * dim + half + i] = sinf(arg);
    }
    for (int64_t k = 2 * half; k < dim; ++k) o[b * dim + k] = 0.0f;
  }
}

// out[t] = for each axis a of (x, y, z): [sin(coord_a omega), cos(coord_a omega)], zero pad.
void ape_embedding(const Tensor& coords, const math::FreqTable& omegas, Tensor& out) {
  const int64_t T = out.size(0), C = out.size(1), fd = omegas.count;
  const int32_t* c = coords.data_as<int32_t>();
  float* o = out.data_as<float>();
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < T; ++t) {
    float* row = o + t * C;
    for (int64_t a = 0; a < 3; ++a) {
      const float coord = static_cast<float>(c[t * 4 + 1 + a]);
      for (int64_t j = 0; j < fd; ++j) {
        const float arg = coord * omegas.value[j];
        row[a * 2 * fd + j] = sinf(arg);
        row[a * 2 * fd + fd + j] = cosf(arg);
      }
    }
    for (int64_t k = 6 * fd; k < C; ++k) row[k] = 0.0f;
  }
}

}  // namespace cpu

void timestep_embedding(const Tensor& t, Tensor& out) {
  const char* op = "timestep_embedding";
  detail::check_dtype(t, DType::F32, op, "t");
  S3D_CHECK(t.ndim() == 1, op, ": t must be f32 [B], got ", t.describe());
  detail::check_dtype(out, DType::F32, op, "out");
  S3D_CHECK(out.ndim() == 2 && out.size(0) == t.size(0) && out.size(1) > 0, op,
            ": out must be f32 [", t.size(0), ", dim] with dim > 0, got ", out.describe());
  detail::check_same_device(op, {{"t", &t}, {"out", &out}});
  const int64_t half = out.size(1) / 2;
  S3D_CHECK(half <= math::kMaxFreqs, op, ": dim ", out.size(1), " needs ", half,
            " frequencies, more than the supported ", math::kMaxFreqs);
  if (out.numel() == 0) return;
  const math::FreqTable freqs = timestep_frequencies(static_cast<int>(half));
  if (t.is_cuda()) {
    cuda::timestep_embedding(t, freqs, out);
  } else {
    cpu::timestep_embedding(t, freqs, out);
  }
}

void ape_embedding(const Tensor& coords, Tensor& out) {
  const char* op = "ape_embedding";
  detail::check_dtype(coords, DType::I32, op, "coords");
  S3D_CHECK(coords.ndim() == 2 && coords.size(1) == 4, op,
            ": coords must be i32 [T, 4] (batch, x, y, z), got ", coords.describe());
  detail::check_dtype(out, DType::F32, op, "out");
  S3D_CHECK(out.ndim() == 2 && out.size(0) == coords.size(0) && out.size(1) > 0, op,
            ": out must be f32 [", coords.size(0), ", C] with C > 0, got ", out.describe());
  detail::check_same_device(op, {{"coords", &coords}, {"out", &out}});
  const int64_t freq_dim = out.size(1) / 3 / 2;
  S3D_CHECK(freq_dim <= math::kMaxFreqs, op, ": C = ", out.size(1), " needs ", freq_dim,
            " frequencies, more than the supported ", math::kMaxFreqs);
  if (out.numel() == 0) return;
  const math::FreqTable omegas = ape_frequencies(static_cast<int>(freq_dim));
  if (coords.is_cuda()) {
    cuda::ape_embedding(coords, omegas, out);
  } else {
    cpu::ape_embedding(coords, omegas, out);
  }
}

}  // namespace s3d::kernels
