// Sampler kernels: fp32 maps through elementwise_kernels.cuh with reference_math.h's
// formulas, a per-asset standard deviation (one block per asset, fp64 sums), and the
// per-asset guidance rescale.
#include <cstdio>

#include "core/cuda_util.h"
#include "kernels/cuda_common.cuh"
#include "kernels/elementwise_kernels.cuh"
#include "kernels/reference_math.h"
#include "kernels/sampler_ops_cuda.h"

namespace s3d::kernels::cuda {
namespace {

struct CfgCombine {
  float g, one_minus_g;
  __device__ float operator()(float c, float u) const {
    return math::cfg_combine(c, u, g, one_minus_g);
  }
};
struct EulerStep {
  float dt;
  __device__ float operator()(float x, float v) const { return math::euler_step(x, v, dt); }
};
struct AxpbySub {
  float a, b;
  __device__ float operator()(float x, float v) const { return math::axpby_sub(x, a, v, b); }
};
struct XstartToPred {
  float a, b;
  __device__ float operator()(float x, float x0) const {
    return math::xstart_to_pred(x, a, x0, b);
  }
};

constexpr int kStdThreads = 1024;

// Block b: mean of rows [offsets[b], offsets[b+1]) of x (all C columns), then the sum of
// squared deviations, both in double; population std rounded to fp32.
__global__ void asset_std_kernel(const float* x, int64_t T, int64_t C, const int32_t* offsets,
                                 int64_t ddof, float* out) {
  __shared__ double scratch[33];
  const int64_t lo = offsets[blockIdx.x], hi = offsets[blockIdx.x + 1];
  if (lo < 0 || hi < lo || hi > T) {
    if (threadIdx.x == 0)
      printf("asset_std: asset %u has rows [%lld, %lld), outside [0, %lld) or reversed\n",
             blockIdx.x, static_cast<long long>(lo), static_cast<long long>(hi),
             static_cast<long long>(T));
    __trap();
  }
  const float* p = x + lo * C;
  const int64_t n = (hi - lo) * C;
  double sum = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) sum += p[i];
  const double mean = block_sum(sum, scratch) / static_cast<double>(n);
  double sum_sq = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const double d = p[i] - mean;
    sum_sq += d * d;
  }
  sum_sq = block_sum(sum_sq, scratch);
  if (threadIdx.x == 0) out[blockIdx.x] = math::std_from_squares(sum_sq, n - ddof);
}

// out[t, c] = rho * (x0[t, c] * (std_pos[b] / std_cfg[b])) + (1 - rho) * x0[t, c], b the
// asset of token t.
__global__ void guidance_rescale_kernel(const float* x0, int64_t T, int64_t C,
                                        const float* std_pos, const float* std_cfg,
                                        const int32_t* batch_index, int64_t B, float rho,
                                        float one_minus_rho, float* out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= T * C) return;
  const int64_t t = i / C;
  const int64_t b =
      checked_index(batch_index[t], t, B, "guidance_rescale", "batch_index", i % C == 0);
  out[i] = math::guidance_rescale(x0[i], std_pos[b] / std_cfg[b], rho, one_minus_rho);
}

}  // namespace

void cfg_combine(const Tensor& v_cond, const Tensor& v_uncond, float g, float one_minus_g,
                 Tensor& out) {
  launch_binary(v_cond, v_uncond, 0, out, CfgCombine{g, one_minus_g}, "cfg_combine");
}

void euler_step(const Tensor& x, const Tensor& v, float dt, Tensor& out) {
  launch_binary(x, v, 0, out, EulerStep{dt}, "euler_step");
}

void axpby_sub(const Tensor& x, float a, const Tensor& v, float b, Tensor& out) {
  launch_binary(x, v, 0, out, AxpbySub{a, b}, "axpby_sub");
}

void xstart_to_pred(const Tensor& x, float a, const Tensor& x0, float b, Tensor& out) {
  launch_binary(x, x0, 0, out, XstartToPred{a, b}, "xstart_to_pred");
}

void asset_std(const Tensor& x, const Tensor& offsets, Tensor& out, bool unbiased) {
  const int64_t B = out.numel();
  asset_std_kernel<<<static_cast<unsigned>(B), kStdThreads, 0, current_stream()>>>(
      x.data_as<float>(), x.size(0), x.size(1), offsets.data_as<int32_t>(), unbiased ? 1 : 0,
      out.data_as<float>());
  after_launch("asset_std");
}

void guidance_rescale(const Tensor& x0_cfg, const Tensor& std_pos, const Tensor& std_cfg,
                      const Tensor& batch_index, float rho, float one_minus_rho, Tensor& out) {
  const int64_t T = x0_cfg.size(0), C = x0_cfg.size(1);
  guidance_rescale_kernel<<<grid_for(T * C, kMapThreads), kMapThreads, 0, current_stream()>>>(
      x0_cfg.data_as<float>(), T, C, std_pos.data_as<float>(), std_cfg.data_as<float>(),
      batch_index.data_as<int32_t>(), std_pos.numel(), rho, one_minus_rho,
      out.data_as<float>());
  after_launch("guidance_rescale");
}

}  // namespace s3d::kernels::cuda
