// The public diagnostics (include/sparse3d/diagnostics.h): library peaks and kernel
// bandwidths measured on the engine's device, in its context (stream, allocator).
#include "sparse3d/diagnostics.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <functional>

#include "attention/attention.h"
#include "core/cuda_util.h"
#include "core/error.h"
#include "core/plan_search.h"
#include "engine/engine_impl.h"
#include "engine/measure.h"
#include "gemm/linear.h"
#include "kernels/elementwise.h"
#include "kernels/fast_norm.h"
#include "kernels/fused_gelu.h"
#include "kernels/fused_norm.h"
#include "kernels/fused_qk.h"
#include "kernels/fused_residual.h"
#include "kernels/layernorm.h"

namespace sparse3d {
namespace {

using s3d::RowView;
using s3d::Tensor;
using s3d::engine::random_device;
using s3d::engine::time_calls;

EngineAccess::Impl& gpu_engine(Engine& engine, const char* what) {
  EngineAccess::Impl& impl = EngineAccess::of(engine);
  S3D_CHECK(impl.device == Device::CUDA, what,
            " needs an engine on a CUDA GPU (this one runs on the CPU)");
  return impl;
}

// Enough distinct buffer sets that the rotation's working set is several times the L2
// (50 MiB on an H200): every timed call reads cold data, as in the model.
constexpr double kRotationBytes = 512.0 * (1 << 20);

// Copies of `t` (same bytes) for the rotation.
std::vector<Tensor> replicas(const Tensor& t, int n) {
  std::vector<Tensor> out;
  for (int i = 0; i < n; ++i) {
    Tensor c = Tensor::empty(t.shape(), t.dtype(), Device::CUDA);
    c.copy_from(t);
    out.push_back(std::move(c));
  }
  return out;
}

// Seconds per call of fn(set), cycling over `sets`, after a warm-up pass over them.
double time_rotating(int sets, const std::function<void(int)>& fn) {
  return time_calls([&](int i) { fn(i % sets); }, sets, std::max(sets, 20));
}

int sets_for(double bytes_per_call) {
  return std::clamp(static_cast<int>(std::ceil(kRotationBytes / bytes_per_call)), 2, 64);
}

}  // namespace

// The libraries' rates at the model's shapes: cuBLASLt bf16 at the two MLP GEMMs and cuDNN
// SDPA self-attention at the model's head shape; the best of each.
LibraryPeaks measure_library_peaks(Engine& engine, int64_t tokens) {
  EngineAccess::Impl& impl = gpu_engine(engine, "measure_library_peaks");
  EngineLock lock(impl, "measure_library_peaks", Access::Write);
  s3d::ContextScope scope(*impl.context);
  const s3d::model::ModelConfig& c = impl.model->config();
  LibraryPeaks p;
  const int64_t C = c.model_channels, hidden = c.mlp_hidden();
  const int64_t M = std::max<int64_t>(tokens, 4096);
  for (auto [K, N] : {std::pair<int64_t, int64_t>{C, hidden}, {hidden, C}}) {
    Tensor x = random_device({M, K}, DType::BF16, 1), w = random_device({N, K}, DType::BF16, 2);
    Tensor b = random_device({N}, DType::BF16, 3);
    Tensor y = Tensor::empty({M, N}, DType::BF16, Device::CUDA);
    double s = time_calls([&](int) { s3d::gemm::linear(x, w, &b, y); }, 3, 20);
    double tflops = 2.0 * M * N * K / s / 1e12;
    if (tflops > p.gemm_tflops) {
      p.gemm_tflops = tflops;
      p.gemm_shape = s3d::cat("bf16 M=", M, " K=", K, " N=", N, " +bias");
    }
  }
  const int H = c.num_heads, D = c.head_dim();
  const int64_t T = M;
  Tensor qkv = random_device({T, 3 * H * D}, DType::BF16, 4);
  Tensor out = Tensor::empty({T, int64_t(H) * D}, DType::BF16, Device::CUDA);
  s3d::attention::SeqLayout layout =
      s3d::attention::make_seq_layout({static_cast<int32_t>(T)}, Device::CUDA);
  const int64_t HD = int64_t(H) * D;
  double s = time_calls([&](int) {
    const RowView q{qkv, 0, T, HD, 3 * HD}, k{qkv, HD, T, HD, 3 * HD},
        v{qkv, 2 * HD, T, HD, 3 * HD};
    s3d::attention::sdpa_varlen(q, layout, k, v, layout, H, D,
                                static_cast<float>(1.0 / std::sqrt(double(D))), out);
  }, 3, 10);
  p.attention_tflops = 4.0 * double(T) * T * H * D / s / 1e12;
  p.attention_shape = s3d::cat("bf16 self-attention T=", T, " H=", H, " D=", D);
  return p;
}


namespace {

// The device's copy rate: 1 GiB device to device, bytes read + written.
void measure_copy(KernelBandwidth& k) {
  const size_t n = size_t(1) << 30;
  void *src = nullptr, *dst = nullptr;
  S3D_CUDA_CHECK(cudaMalloc(&src, n));
  S3D_CUDA_CHECK(cudaMalloc(&dst, n));
  S3D_CUDA_CHECK(cudaMemsetAsync(src, 1, n, s3d::current_stream()));
  k.copy_seconds = time_rotating(1, [&](int) {
    S3D_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, s3d::current_stream()));
  });
  k.copy_bytes = 2.0 * static_cast<double>(n);
  cudaFree(src);
  cudaFree(dst);
}

// The operands every row of one token count shares, and the row writer.
struct KernelBench {
  KernelBandwidth& k;
  int64_t T;
  int H, D;
  int64_t C, hidden;
  const Tensor &q_gamma, &k_gamma, &batch_index, &cos, &sin;
  RowView shift, scale, gate;
  void add(const std::string& kernel, const std::string& role, double bytes, int sets,
           const std::function<void(int)>& fn) {
    k.rows.push_back(KernelBandwidthRow{kernel, role, T, bytes, time_rotating(sets, fn)});
  }
};

// The per-head norms of the attentions and the modulated LayerNorm: each bitwise fused
// kernel beside its tolerance twin (fast_*, kernels/fast_norm.h), same compulsory traffic.
void measure_norms(KernelBench& b) {
  const int64_t T = b.T, C = b.C;
  const int H = b.H, D = b.D;
  {  // self-attention q/k: RMSNorm + RoPE in place in the packed QKV
    const double bytes = double(T) * (2 * C * 2 * 2) + double(T) * (D / 2) * 4 * 2;
    const int n = sets_for(bytes);
    auto qkv = replicas(random_device({T, 3 * C}, DType::BF16, 16), n);
    b.add("qk_rmsnorm_rope_inplace", "fused", bytes, n, [&](int i) {
      s3d::kernels::fused::qk_rmsnorm_rope_inplace(qkv[i], H, D, &b.q_gamma, &b.k_gamma, &b.cos,
                                                   &b.sin);
    });
    b.add("fast qk_rmsnorm_rope_inplace (fast_qk_rmsnorm_rope)", "tolerance", bytes, n, [&](int i) {
      s3d::kernels::fast::qk_rmsnorm_rope_inplace(qkv[i], H, D, &b.q_gamma, &b.k_gamma, &b.cos,
                                                  &b.sin);
    });
  }
  {  // cross-attention q RMSNorm in place
    const double bytes = double(T) * C * 2 * 2;
    const int n = sets_for(bytes);
    auto q = replicas(random_device({T, C}, DType::BF16, 17), n);
    b.add("head_rmsnorm_inplace (qk_rmsnorm_cross_inplace)", "fused", bytes, n,
          [&](int i) { s3d::kernels::fused::head_rmsnorm_inplace(q[i], b.q_gamma, H, D); });
    b.add("fast head_rmsnorm_inplace (fast_head_rmsnorm)", "tolerance", bytes, n,
          [&](int i) { s3d::kernels::fast::head_rmsnorm_inplace(q[i], b.q_gamma, H, D); });
  }
  {  // modulated LayerNorm, and the reference's LayerNorm alone (same traffic)
    const double bytes = double(T) * C * 2 * 2 + double(T) * 4;
    const int n = sets_for(bytes);
    auto x = replicas(random_device({T, C}, DType::BF16, 18), n);
    auto out = replicas(random_device({T, C}, DType::BF16, 19), n);
    b.add("modulated_layer_norm", "fused", bytes, n, [&](int i) {
      s3d::kernels::fused::modulated_layer_norm(x[i], b.shift, b.scale, b.batch_index, 1e-6f,
                                                out[i]);
    });
    b.add("fast modulated_layer_norm (fast_modulated_layernorm)", "tolerance", bytes, n,
          [&](int i) {
            s3d::kernels::fast::modulated_layer_norm(x[i], b.shift, b.scale, b.batch_index, 1e-6f,
                                                     out[i]);
          });
    b.add("layer_norm (reference op, no affine)", "reference", double(T) * C * 2 * 2, n,
          [&](int i) { s3d::kernels::layer_norm(x[i], nullptr, nullptr, 1e-6f, out[i]); });
  }
}

// The gated residual and the GELU on the MLP hidden, each beside the reference op.
void measure_elementwise(KernelBench& b) {
  const int64_t T = b.T, C = b.C, hidden = b.hidden;
  {
    const double bytes = double(T) * C * 2 * 3 + double(T) * 4;
    const int n = sets_for(bytes);
    auto x = replicas(random_device({T, C}, DType::BF16, 20), n);
    auto h = replicas(random_device({T, C}, DType::BF16, 21), n);
    auto out = replicas(random_device({T, C}, DType::BF16, 22), n);
    b.add("gated_residual_add", "fused", bytes, n, [&](int i) {
      s3d::kernels::fused::gated_residual_add(x[i], h[i], b.gate, b.batch_index, out[i]);
    });
    b.add("add (reference op, one of the three it replaces)", "reference", double(T) * C * 2 * 3,
          n, [&](int i) { s3d::kernels::add(x[i], h[i], out[i]); });
  }
  {
    const double bytes = double(T) * hidden * 2 * 2;
    const int n = sets_for(bytes);
    auto x = replicas(random_device({T, hidden}, DType::BF16, 23), n);
    auto out = replicas(random_device({T, hidden}, DType::BF16, 24), n);
    b.add("gelu_tanh_wide (gelu_tanh candidate)", "fused", bytes, n,
          [&](int i) { s3d::kernels::fused::gelu_tanh_wide(x[i], out[i]); });
    b.add("gelu_tanh (reference op)", "reference", bytes, n,
          [&](int i) { s3d::kernels::gelu_tanh(x[i], out[i]); });
  }
}

}  // namespace

KernelBandwidth measure_kernel_bandwidth(Engine& engine, const std::vector<int64_t>& token_counts) {
  EngineAccess::Impl& impl = gpu_engine(engine, "measure_kernel_bandwidth");
  EngineLock lock(impl, "measure_kernel_bandwidth", Access::Write);
  s3d::ContextScope scope(*impl.context);
  const s3d::model::ModelConfig& c = impl.model->config();
  S3D_CHECK(!token_counts.empty(), "measure_kernel_bandwidth: no token count given");
  for (int64_t t : token_counts)
    S3D_CHECK(t >= 1, "measure_kernel_bandwidth: token counts must be >= 1, got ", t);
  KernelBandwidth k;
  measure_copy(k);
  const int H = c.num_heads, D = c.head_dim();
  const int64_t C = c.model_channels;
  const Tensor q_gamma = random_device({H, D}, DType::F32, 11, 0.2f);
  const Tensor k_gamma = random_device({H, D}, DType::F32, 12, 0.2f);
  const Tensor mod = random_device({1, 6 * C}, DType::BF16, 13, 0.3f);
  for (const int64_t T : token_counts) {
    const Tensor batch_index = Tensor::zeros({T}, DType::I32, Device::CUDA);
    const Tensor cos = random_device({T, D / 2}, DType::F32, 14);
    const Tensor sin = random_device({T, D / 2}, DType::F32, 15);
    KernelBench b{k, T, H, D, C, c.mlp_hidden(), q_gamma, k_gamma, batch_index, cos, sin,
                  RowView::columns(mod, 0, C), RowView::columns(mod, C, C),
                  RowView::columns(mod, 2 * C, C)};
    measure_norms(b);
    measure_elementwise(b);
  }
  s3d::synchronize();
  return k;
}

std::vector<SearchedPlan> searched_plans(Engine& engine) {
  EngineAccess::Impl& impl = EngineAccess::of(engine);
  EngineLock lock(impl, "searched_plans", Access::Read);
  s3d::ContextScope scope(*impl.context);  // the report lives in the engine's context
  std::vector<SearchedPlan> out;
  for (const s3d::plan_search::Row& r : s3d::plan_search::report())
    out.push_back(SearchedPlan{s3d::plan_search::kind_name(r.kind), r.shape, r.choice.candidates,
                               r.choice.timed, r.choice.index, r.choice.default_ms,
                               r.choice.best_ms, s3d::plan_search::source_name(r.source)});
  return out;
}

}  // namespace sparse3d
