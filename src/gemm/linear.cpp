// gemm::linear: validation at the boundary, then cuBLASLt (linear_cublaslt.cpp) or the CPU
// reference below. The CPU reference is the oracle the GPU path is tested against: fp32
// accumulation over K, bias added in fp32, optional GELU(tanh) in fp32, one rounding.
#include "gemm/linear.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/bf16.h"
#include "core/error.h"
#include "core/profiler.h"
#include "gemm/linear_cublaslt.h"

namespace s3d::gemm {
namespace {

const char* epilogue_name(Epilogue e) {
  switch (e) {
    case Epilogue::None: return "None";
    case Epilogue::Bias: return "Bias";
    case Epilogue::BiasGelu: return "BiasGelu";
  }
  return "?";
}

// aten::gelu(approximate="tanh") in fp32; the cuBLASLt GELU epilogue uses the same form.
float gelu_tanh(float x) {
  return 0.5f * x * (1.0f + std::tanh(0.7978845608f * (x + 0.044715f * x * x * x)));
}

// Values of a bf16 or f32 buffer as fp32.
void to_fp32(const Tensor& t, int64_t begin, int64_t n, float* out) {
  if (t.dtype() == DType::F32) {
    std::copy_n(t.data_as<float>() + begin, n, out);
  } else {
    const uint16_t* p = t.data_as<uint16_t>() + begin;
    for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_float(p[i]);
  }
}

float dot(const float* a, const float* b, int64_t n) {
  float s = 0.0f;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

// Work is split into jobs of (4 rows) x (64 output columns): the 4 rows are converted to fp32
// once per thread and reused while each weight row stays in L1 for 4 dot products.
void linear_cpu(const Tensor& x, const Tensor& weight, const Tensor* bias, Tensor& y,
                Epilogue epilogue) {
  const int64_t M = x.size(0), K = x.size(1), N = weight.size(0);
  constexpr int64_t kRows = 4, kCols = 64;

  std::vector<float> w32;
  const float* w = nullptr;
  if (weight.dtype() == DType::F32) {
    w = weight.data_as<float>();
  } else {
    w32.resize(static_cast<size_t>(N * K));
#pragma omp parallel for schedule(static) if (N * K > (int64_t{1} << 16))
    for (int64_t n = 0; n < N; ++n) to_fp32(weight, n * K, K, w32.data() + n * K);
    w = w32.data();
  }
  std::vector<float> b32(static_cast<size_t>(N), 0.0f);
  if (bias != nullptr) to_fp32(*bias, 0, N, b32.data());

  const bool gelu = epilogue == Epilogue::BiasGelu;
  const bool out_f32 = y.dtype() == DType::F32;
  const int64_t row_blocks = (M + kRows - 1) / kRows, col_blocks = (N + kCols - 1) / kCols;
  // Threads only pay off above ~1 MFLOP; tiny test-model GEMMs stay on the calling thread.
  const bool parallel = M * N * K > (int64_t{1} << 19);

#pragma omp parallel if (parallel)
  {
    std::vector<float> xs(static_cast<size_t>(kRows * K));
    int64_t loaded_block = -1;
#pragma omp for schedule(static)
    for (int64_t job = 0; job < row_blocks * col_blocks; ++job) {
      const int64_t rb = job / col_blocks, cb = job % col_blocks;
      const int64_t r0 = rb * kRows, rows = std::min(kRows, M - r0);
      if (rb != loaded_block) {
        to_fp32(x, r0 * K, rows * K, xs.data());
        loaded_block = rb;
      }
      for (int64_t n = cb * kCols; n < std::min(N, (cb + 1) * kCols); ++n) {
        const float* wr = w + n * K;
        for (int64_t r = 0; r < rows; ++r) {
          float v = dot(xs.data() + r * K, wr, K) + b32[static_cast<size_t>(n)];
          if (gelu) v = gelu_tanh(v);
          const int64_t i = (r0 + r) * N + n;
          if (out_f32) {
            y.data_as<float>()[i] = v;
          } else {
            y.data_as<uint16_t>()[i] = float_to_bf16(v);
          }
        }
      }
    }
  }
}

}  // namespace

void linear(const Tensor& x, const Tensor& weight, const Tensor* bias, Tensor& y,
            Epilogue epilogue, plan_search::Search search) {
  S3D_CHECK(x.defined() && weight.defined() && y.defined(),
            "linear: x, weight and y must all be defined tensors");
  const DType dt = x.dtype();
  S3D_CHECK(dt == DType::BF16 || dt == DType::F32, "linear: x must be bf16 or f32, got ",
            x.describe());
  S3D_CHECK(x.ndim() == 2 && weight.ndim() == 2 && y.ndim() == 2,
            "linear: x, weight and y must be 2-D, got x ", x.describe(), ", weight ",
            weight.describe(), ", y ", y.describe());
  S3D_CHECK(weight.dtype() == dt && y.dtype() == dt, "linear: dtypes differ: x ", x.describe(),
            ", weight ", weight.describe(), ", y ", y.describe(), " (all must be ", dtype_name(dt),
            ")");
  const int64_t M = x.size(0), K = x.size(1), N = weight.size(0);
  S3D_CHECK(weight.size(1) == K, "linear: x ", x.describe(), " has ", K, " columns but weight ",
            weight.describe(), " has ", weight.size(1), " (weight is [out_features, in_features])");
  S3D_CHECK(y.size(0) == M && y.size(1) == N, "linear: y must be ", dtype_name(dt), "[", M, ", ", N,
            "] for x ", x.describe(), " and weight ", weight.describe(), ", got ", y.describe());
  S3D_CHECK(K > 0 && N > 0, "linear: in_features (", K, ") and out_features (", N,
            ") must be positive");
  check_same_device(x, weight, "linear: x and weight");
  check_same_device(x, y, "linear: x and y");
  if (epilogue == Epilogue::None) {
    S3D_CHECK(bias == nullptr, "linear: a bias ", bias->describe(),
              " was given with Epilogue::None; use Epilogue::Bias or pass no bias");
  } else {
    S3D_CHECK(bias != nullptr, "linear: Epilogue::", epilogue_name(epilogue),
              " needs a bias, none was given");
    check_tensor(*bias, "linear: bias", dt, {N});
    check_same_device(x, *bias, "linear: x and bias");
  }
  if (M == 0) return;

  if (x.is_cuda()) {
    profiler::LibraryScope scope("gemm", 2.0 * static_cast<double>(M) * N * K);
    detail::linear_cublaslt(x, weight, bias, y, epilogue, search);
  } else {
    linear_cpu(x, weight, bias, y, epilogue);
  }
}

bool output_overlaps_input(const Tensor& x, const Tensor& weight, const Tensor* bias,
                           const Tensor& y) {
  auto overlaps = [&](const Tensor& t) {
    if (!t.defined() || !y.defined()) return false;
    const auto a0 = reinterpret_cast<uintptr_t>(y.data());
    const auto b0 = reinterpret_cast<uintptr_t>(t.data());
    return a0 < b0 + t.nbytes() && b0 < a0 + y.nbytes();
  };
  return overlaps(x) || overlaps(weight) || (bias != nullptr && overlaps(*bias));
}

void release_resources() { detail::release_cublaslt(); }

size_t release_workspaces() { return detail::release_cublaslt_workspaces(); }

}  // namespace s3d::gemm
