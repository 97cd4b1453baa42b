// The public diagnostics (include/sparse3d/diagnostics.h): library peaks and searched plans
// of the engine's device, in its context (stream, allocator). The kernel bench is
// ops/bandwidth.h.
#include "sparse3d/diagnostics.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>

#include "attention/attention.h"
#include "core/cuda_util.h"
#include "core/error.h"
#include "core/plan_search.h"
#include "engine/engine_impl.h"
#include "core/measure.h"
#include "ops/linear.h"
#include "ops/sdpa.h"

namespace sparse3d {
namespace {

using s3d::RowView;
using s3d::Tensor;
using s3d::random_device;
using s3d::time_calls;

EngineAccess::Impl& gpu_engine(Engine& engine, const char* what) {
  EngineAccess::Impl& impl = EngineAccess::of(engine);
  S3D_CHECK(impl.device == Device::CUDA, what,
            " needs an engine on a CUDA GPU (this one runs on the CPU)");
  return impl;
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
  // The libraries' own choices: the `linear` and `sdpa` ops' references (no flag on).
  const s3d::ops::OpPlan plan = s3d::ops::OpPlan::resolve(sparse3d::FlagSet());
  const int64_t C = c.model_channels, hidden = c.mlp_hidden();
  const int64_t M = std::max<int64_t>(tokens, 4096);
  for (auto [K, N] : {std::pair<int64_t, int64_t>{C, hidden}, {hidden, C}}) {
    Tensor x = random_device({M, K}, DType::BF16, 1), w = random_device({N, K}, DType::BF16, 2);
    Tensor b = random_device({N}, DType::BF16, 3);
    Tensor y = Tensor::empty({M, N}, DType::BF16, Device::CUDA);
    double s = time_calls([&](int) { s3d::ops::linear(plan, x, w, &b, y); }, 3, 20);
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
    s3d::ops::sdpa(plan, q, layout, k, v, layout, H, D,
                   static_cast<float>(1.0 / std::sqrt(double(D))), out);
  }, 3, 10);
  p.attention_tflops = 4.0 * double(T) * T * H * D / s / 1e12;
  p.attention_shape = s3d::cat("bf16 self-attention T=", T, " H=", H, " D=", D);
  return p;
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
