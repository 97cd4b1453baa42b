#include "bench/kernel_bandwidth.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <ctime>
#include <functional>
#include <sstream>

#include "bench/format.h"
#include "bench/measure.h"
#include "contract/fingerprint.h"
#include "core/cuda_util.h"
#include "core/error.h"
#include "core/rng.h"
#include "kernels/elementwise.h"
#include "kernels/fused_gelu.h"
#include "kernels/fused_norm.h"
#include "kernels/fused_qk.h"
#include "kernels/fused_residual.h"
#include "kernels/layernorm.h"

namespace s3d::bench {
namespace {

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

KernelBandwidth measure_kernel_bandwidth(const model::ModelConfig& c,
                                         const std::vector<int64_t>& token_counts) {
  S3D_CHECK(cuda_available(), "sparse3d bench-kernels needs a CUDA GPU (none found)");
  S3D_CHECK(!token_counts.empty(), "bench-kernels: no token count given");
  for (int64_t t : token_counts)
    S3D_CHECK(t >= 1, "bench-kernels: token counts must be >= 1, got ", t);
  KernelBandwidth k;
  {
    std::time_t now = std::time(nullptr);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
    k.date = buf;
  }
  k.fingerprint = contract::environment_fingerprint().to_json();

  // The copy rate: 1 GiB device to device, bytes read + written.
  {
    const size_t n = size_t(1) << 30;
    void *src = nullptr, *dst = nullptr;
    S3D_CUDA_CHECK(cudaMalloc(&src, n));
    S3D_CUDA_CHECK(cudaMalloc(&dst, n));
    S3D_CUDA_CHECK(cudaMemsetAsync(src, 1, n, current_stream()));
    k.copy_seconds = time_rotating(1, [&](int) {
      S3D_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, current_stream()));
    });
    k.copy_bytes = 2.0 * static_cast<double>(n);
    cudaFree(src);
    cudaFree(dst);
  }

  const int H = c.num_heads, D = c.head_dim();
  const int64_t C = c.model_channels, hidden = c.mlp_hidden();
  Tensor q_gamma = random_device({H, D}, DType::F32, 11, 0.2f);
  Tensor k_gamma = random_device({H, D}, DType::F32, 12, 0.2f);
  Tensor mod = random_device({1, 6 * C}, DType::BF16, 13, 0.3f);
  const RowView shift = RowView::columns(mod, 0, C), scale = RowView::columns(mod, C, C),
                gate = RowView::columns(mod, 2 * C, C);
  for (const int64_t T : token_counts) {
    auto add = [&](const std::string& kernel, const std::string& role, double bytes, int sets,
                   const std::function<void(int)>& fn) {
      k.rows.push_back(KernelBandwidthRow{kernel, role, T, bytes, time_rotating(sets, fn)});
    };
    Tensor batch_index = Tensor::zeros({T}, DType::I32, Device::CUDA);
    Tensor cos = random_device({T, D / 2}, DType::F32, 14), sin = random_device({T, D / 2}, DType::F32, 15);
    {  // self-attention q/k: RMSNorm + RoPE in place in the packed QKV
      const double bytes = double(T) * (2 * C * 2 * 2) + double(T) * (D / 2) * 4 * 2;
      const int n = sets_for(bytes);
      auto qkv = replicas(random_device({T, 3 * C}, DType::BF16, 16), n);
      add("qk_rmsnorm_rope_inplace", "fused", bytes, n, [&](int i) {
        kernels::fused::qk_rmsnorm_rope_inplace(qkv[i], H, D, &q_gamma, &k_gamma, &cos, &sin);
      });
    }
    {  // cross-attention q RMSNorm in place
      const double bytes = double(T) * C * 2 * 2;
      const int n = sets_for(bytes);
      auto q = replicas(random_device({T, C}, DType::BF16, 17), n);
      add("head_rmsnorm_inplace (qk_rmsnorm_cross_inplace)", "fused", bytes, n,
          [&](int i) { kernels::fused::head_rmsnorm_inplace(q[i], q_gamma, H, D); });
    }
    {  // modulated LayerNorm, and the reference's LayerNorm alone (same traffic)
      const double bytes = double(T) * C * 2 * 2 + double(T) * 4;
      const int n = sets_for(bytes);
      auto x = replicas(random_device({T, C}, DType::BF16, 18), n);
      auto out = replicas(random_device({T, C}, DType::BF16, 19), n);
      add("modulated_layer_norm", "fused", bytes, n, [&](int i) {
        kernels::fused::modulated_layer_norm(x[i], shift, scale, batch_index, 1e-6f, out[i]);
      });
      add("layer_norm (reference op, no affine)", "reference", double(T) * C * 2 * 2, n,
          [&](int i) { kernels::layer_norm(x[i], nullptr, nullptr, 1e-6f, out[i]); });
    }
    {  // gated residual
      const double bytes = double(T) * C * 2 * 3 + double(T) * 4;
      const int n = sets_for(bytes);
      auto x = replicas(random_device({T, C}, DType::BF16, 20), n);
      auto h = replicas(random_device({T, C}, DType::BF16, 21), n);
      auto out = replicas(random_device({T, C}, DType::BF16, 22), n);
      add("gated_residual_add", "fused", bytes, n, [&](int i) {
        kernels::fused::gated_residual_add(x[i], h[i], gate, batch_index, out[i]);
      });
      add("add (reference op, one of the three it replaces)", "reference", double(T) * C * 2 * 3,
          n, [&](int i) { kernels::add(x[i], h[i], out[i]); });
    }
    {  // GELU on the MLP hidden: the wide candidate and the reference kernel
      const double bytes = double(T) * hidden * 2 * 2;
      const int n = sets_for(bytes);
      auto x = replicas(random_device({T, hidden}, DType::BF16, 23), n);
      auto out = replicas(random_device({T, hidden}, DType::BF16, 24), n);
      add("gelu_tanh_wide (gelu_tanh candidate)", "fused", bytes, n,
          [&](int i) { kernels::fused::gelu_tanh_wide(x[i], out[i]); });
      add("gelu_tanh (reference op)", "reference", bytes, n,
          [&](int i) { kernels::gelu_tanh(x[i], out[i]); });
    }
  }
  synchronize();
  return k;
}

std::string to_markdown(const KernelBandwidth& k) {
  std::ostringstream o;
  o << "# sparse3d bench-kernels, " << k.date << "\n\n";
  std::string env;
  if (k.fingerprint.is_object())
    for (const auto& [key, v] : k.fingerprint.items())
      env += (env.empty() ? "" : ", ") + key + ": " + (v.is_string() ? v.get<std::string>() : v.dump());
  o << "- Environment: " << env << "\n"
    << "- Copy bandwidth (cudaMemcpy device to device, 1 GiB, read + written): "
    << fixed(k.copy_gbps(), 1) << " GB/s\n\n"
    << "| kernel | role | tokens | MB per call | us per call | GB/s | % of copy |\n"
    << "|---|---|---:|---:|---:|---:|---:|\n";
  for (const auto& r : k.rows)
    o << "| " << r.kernel << " | " << r.role << " | " << group_digits(r.tokens) << " | "
      << fixed(r.bytes / 1e6, 1) << " | " << fixed(r.seconds * 1e6, 1) << " | "
      << fixed(r.gbps(), 1) << " | " << fixed(100.0 * r.gbps() / k.copy_gbps(), 1) << "% |\n";
  o << "\nBytes are compulsory traffic (each input read once, each output written once); "
       "inputs rotate over enough buffers (>= 512 MiB in all) that no call finds its data in "
       "L2. Event-timed over at least 20 calls after one warm-up pass over the buffers.\n";
  return o.str();
}

io::Json to_json(const KernelBandwidth& k) {
  io::Json rows = io::Json::array();
  for (const auto& r : k.rows)
    rows.push_back({{"kernel", r.kernel}, {"role", r.role}, {"tokens", r.tokens},
                    {"bytes", r.bytes}, {"seconds", r.seconds}, {"gbps", r.gbps()},
                    {"fraction_of_copy", r.gbps() / k.copy_gbps()}});
  return io::Json{{"date", k.date},
                  {"fingerprint", k.fingerprint},
                  {"copy_bytes", k.copy_bytes},
                  {"copy_seconds", k.copy_seconds},
                  {"copy_gbps", k.copy_gbps()},
                  {"rows", rows}};
}

}  // namespace s3d::bench
