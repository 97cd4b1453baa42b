// The reference op chains that the fused kernels replace, written with the reference ops
// exactly as model/slat_flow.cpp and model/cross_attention.cpp run them (pure_eager), on
// whichever device the inputs live. Shared by the CPU and GPU fused-kernel tests.
#pragma once

#include <vector>

#include "core/tensor.h"
#include "kernels/elementwise.h"
#include "kernels/layernorm.h"
#include "kernels/qk_norm_rope.h"

namespace s3d::testing {

// A copy of t on t's device (fused ops write in place; the tests keep the input).
inline Tensor copy_of(const Tensor& t) {
  Tensor c = Tensor::empty(t.shape(), t.dtype(), t.device());
  c.copy_from(t);
  return c;
}

// Batch indices: B assets, tokens in runs (as packed requests are), every asset present
// when T >= B.
inline Tensor batch_runs(int64_t T, int B) {
  std::vector<int32_t> v(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) v[t] = static_cast<int32_t>(t * B / T);
  return Tensor::from_ints(v, {T});
}

// q/k: RMSNorm (if gammas) -> bf16 [T, H, D] -> RoPE (if cos) -> bf16 -> restack with v into
// a new [T, 3C].
inline Tensor reference_qk_chain(const Tensor& qkv, int H, int D, const Tensor* q_gamma,
                                 const Tensor* k_gamma, const Tensor* cos, const Tensor* sin) {
  const int64_t T = qkv.size(0), C = int64_t{H} * D;
  const Device dev = qkv.device();
  auto prep = [&](int64_t col, const Tensor* gamma) {
    const RowView view{qkv, col, T, C, 3 * C};
    Tensor t = Tensor::empty({T, H, D}, DType::BF16, dev);
    if (gamma) {
      kernels::head_rmsnorm(view, *gamma, H, D, t);
    } else {
      RowView dst = RowView::of(t.reshape({T, C}));
      kernels::copy_rows(view, dst);
    }
    if (!cos) return t;
    Tensor r = Tensor::empty({T, H, D}, DType::BF16, dev);
    kernels::rope_apply(t, *cos, *sin, r);
    return r;
  };
  Tensor qn = prep(0, q_gamma), kn = prep(C, k_gamma);
  Tensor out = Tensor::empty({T, 3 * C}, DType::BF16, dev);
  out.poison();
  RowView dq = RowView::columns(out, 0, C), dk = RowView::columns(out, C, C),
          dv = RowView::columns(out, 2 * C, C);
  kernels::copy_rows(RowView::of(qn.reshape({T, C})), dq);
  kernels::copy_rows(RowView::of(kn.reshape({T, C})), dk);
  kernels::copy_rows(RowView{qkv, 2 * C, T, C, 3 * C}, dv);
  return out;
}

// Cross-attention q: head_rmsnorm into a new [T, H, D], viewed as [T, C].
inline Tensor reference_head_rmsnorm(const Tensor& q, const Tensor& gamma, int H, int D) {
  const int64_t T = q.size(0);
  Tensor out = Tensor::empty({T, H, D}, DType::BF16, q.device());
  out.poison();
  kernels::head_rmsnorm(RowView::of(q), gamma, H, D, out);
  return out.reshape({T, int64_t{H} * D});
}

// layer_norm -> add_scalar(scale, 1) -> gather -> mul -> gather(shift) -> add.
inline Tensor reference_modulate_chain(const Tensor& x, const RowView& shift, const RowView& scale,
                                       const Tensor& batch_index, float eps) {
  const int64_t T = x.size(0), C = x.size(1), B = scale.rows;
  const Device dev = x.device();
  auto bf16 = [&](Shape s) { return Tensor::empty(s, DType::BF16, dev); };
  Tensor hn = bf16({T, C});
  kernels::layer_norm(x, nullptr, nullptr, eps, hn);
  Tensor one_plus = bf16({B, C});
  kernels::add_scalar(scale, 1.0f, one_plus);
  Tensor g = bf16({T, C});
  kernels::gather_rows(RowView::of(one_plus), batch_index, g);
  Tensor scaled = bf16({T, C});
  kernels::mul(hn, g, scaled);
  kernels::gather_rows(shift, batch_index, g);
  Tensor out = bf16({T, C});
  out.poison();
  kernels::add(scaled, g, out);
  return out;
}

// gather(gate) -> mul -> add.
inline Tensor reference_gated_chain(const Tensor& x, const Tensor& h, const RowView& gate,
                                    const Tensor& batch_index) {
  const int64_t T = x.size(0), C = x.size(1);
  const Device dev = x.device();
  Tensor g = Tensor::empty({T, C}, DType::BF16, dev);
  kernels::gather_rows(gate, batch_index, g);
  Tensor gh = Tensor::empty({T, C}, DType::BF16, dev);
  kernels::mul(h, g, gh);
  Tensor out = Tensor::empty({T, C}, DType::BF16, dev);
  out.poison();
  kernels::add(x, gh, out);
  return out;
}

}  // namespace s3d::testing
