// The cross-attention branch of a block, x + to_out(SDPA(q(norm2(x)), K, V of
// the condition)), in its three forms: the reference (pure_eager, optionally
// with the condition's K/V cached per request) and the two null-context forms
// (article section 2): with the null condition every value row is v0, the
// softmax weights of each query sum to 1 over the context, so every output row
// is v0 whatever the queries are, and the branch reduces to to_out(v0 rows)
// (Exact) or to the constant row c = to_out(v0) (Cache).

#include "core/error.h"
#include "ops/linear.h"
#include "kernels/elementwise.h"
#include "kernels/layernorm.h"
#include "kernels/qk_norm_rope.h"
#include "model/trunk/transformer.h"
#include "ops/qk_rmsnorm_cross.h"
#include "ops/sdpa.h"

namespace s3d::model {
namespace {

constexpr float kBlockNormEps = 1e-6f;  // LayerNorm32 inside blocks (as transformer.cpp)

}  // namespace

Transformer::CrossKV Transformer::condition_kv(const ops::OpPlan& plan, int block,
                                               const Tensor& cond2d) const {
  const ModelConfig& c = config();
  const int64_t C = c.model_channels, BL = cond2d.size(0);
  const CrossAttentionWeights& w = weights_.blocks[static_cast<size_t>(block)].cross_attn;
  CrossKV r;
  r.kv = Tensor::empty({BL, 2 * C}, DType::BF16, device_);
  ops::linear(plan, cond2d, w.to_kv, r.kv);
  if (c.qk_rms_norm_cross) {
    r.k_normed = Tensor::empty({BL, c.num_heads, c.head_dim()}, DType::BF16, device_);
    kernels::head_rmsnorm(RowView{r.kv, 0, BL, C, 2 * C}, w.k_rms_gamma, c.num_heads,
                          c.head_dim(), r.k_normed);
  }
  return r;
}

CondKV Transformer::precompute_cond_kv(const ops::OpPlan& plan, const Tensor& tokens) const {
  const ModelConfig& c = config();
  S3D_CHECK(tokens.defined() && tokens.ndim() == 3 && tokens.dtype() == DType::BF16 &&
                tokens.size(2) == c.cond_channels && tokens.device() == device_,
            "precompute_cond_kv: tokens must be bf16 [B, L, ", c.cond_channels, "] on ",
            device_name(device_), ", got ", tokens.describe());
  const Tensor cond2d = tokens.reshape({tokens.size(0) * tokens.size(1), c.cond_channels});
  CondKV out;
  for (int i = 0; i < c.num_blocks; ++i) {
    CrossKV kv = condition_kv(plan, i, cond2d);
    if (kv.k_normed.defined()) {
      // Keep V alone: the raw K half is not read once K is normalised (denoiser.h, CondKV).
      const int64_t BL = kv.kv.size(0), C = c.model_channels;
      Tensor v = Tensor::empty({BL, C}, DType::BF16, device_);
      RowView dst = RowView::of(v);
      kernels::copy_rows(RowView{kv.kv, C, BL, C, 2 * C}, dst);
      out.kv.push_back(std::move(v));
      out.k_normed.push_back(kv.k_normed);
    } else {
      out.kv.push_back(kv.kv);
    }
  }
  return out;
}

// Conditional rows [0, rows) of the branch up to the attention output: norm2, to_q, the
// condition's K/V (cached or projected), q/k RMSNorm, SDPA over the given layouts.
// Writes attn (bf16 [rows, C]). q's RMSNorm is the op qk_rmsnorm_cross (in place in the to_q
// output with its candidates); K keeps the reference op (its [BL, H, D] layout is the one the condition
// K/V cache stores and the attention reads; normalising it in place inside to_kv's [BL, 2C]
// output would change K's row stride, and with cond_kv_cache it runs once per request).
void Transformer::attend_condition(int i, const Request& req, const Tensor& x,
                                   const Condition& cond, const attention::SeqLayout& q_layout,
                                   const attention::SeqLayout& kv_layout, Tensor& attn) const {
  const ModelConfig& c = config();
  const int64_t T = x.size(0), C = c.model_channels;
  const int H = c.num_heads, D = c.head_dim();
  const BlockWeights& w = weights_.blocks[static_cast<size_t>(i)];
  Tensor hn = Tensor::empty({T, C}, DType::BF16, device_);
  kernels::layer_norm(x, &w.norm2.weight, &w.norm2.bias, kBlockNormEps, hn);
  Tensor q = Tensor::empty({T, C}, DType::BF16, device_);
  ops::linear(req.ops, hn, w.cross_attn.to_q, q);
  hn = Tensor();
  CrossKV kv;
  if (cond.kv) {
    kv.kv = cond.kv->kv[static_cast<size_t>(i)];
    if (c.qk_rms_norm_cross) kv.k_normed = cond.kv->k_normed[static_cast<size_t>(i)];
  } else {
    kv = condition_kv(req.ops, i, cond.tokens.reshape({cond.tokens.size(0) * cond.tokens.size(1),
                                               c.cond_channels}));
  }
  const int64_t BL = kv.kv.size(0);
  RowView cq = RowView::of(q), ck{kv.kv, 0, BL, C, 2 * C}, cv{kv.kv, C, BL, C, 2 * C};
  if (cond.kv && c.qk_rms_norm_cross) cv = RowView::of(kv.kv);  // the cache keeps V alone
  Tensor qn;
  if (c.qk_rms_norm_cross) {
    qn = ops::qk_rmsnorm_cross(req.ops, q, w.cross_attn.q_rms_gamma, H, D);
    cq = RowView::of(qn);
    ck = RowView::of(kv.k_normed.reshape({BL, C}));
    q = Tensor();  // qn holds its storage when the norm ran in place
  }
  ops::sdpa(req.ops, cq, q_layout, ck, cv, kv_layout, H, D, attention_scale(), attn);
}

Tensor Transformer::cross_attention(int i, const Request& req, const Tensor& x,
                                    const Condition& cond, const NullPath* null) const {
  if (cond.null_assets > 0) return cross_attention_null(i, req, x, cond, *null);
  const int64_t T = req.tokens, C = config().model_channels;
  const Linear& to_out = weights_.blocks[static_cast<size_t>(i)].cross_attn.to_out;
  Tensor attn = Tensor::empty({T, C}, DType::BF16, device_);
  attend_condition(i, req, x, cond, req.tokens_layout, req.cond_layout, attn);
  Tensor ca = Tensor::empty({T, C}, DType::BF16, device_);
  ops::linear(req.ops, attn, to_out, ca);
  attn = Tensor();
  Tensor x2 = Tensor::empty({T, C}, DType::BF16, device_);
  kernels::add(x, ca, x2);
  return x2;
}

// Null assets are the last ones, so their tokens are rows [Tc, T): the conditional part
// [0, Tc) runs as the reference (on its own assets' layouts), the null part is v0 or c.
Tensor Transformer::cross_attention_null(int i, const Request& req, const Tensor& x,
                                         const Condition& cond, const NullPath& null) const {
  const int64_t T = req.tokens, C = config().model_channels;
  const bool all_null = cond.null_assets == req.batch;
  const int64_t Tc = all_null ? 0 : req.cond_part_tokens;
  const Linear& to_out = weights_.blocks[static_cast<size_t>(i)].cross_attn.to_out;
  const Tensor& row = null.rows[static_cast<size_t>(i)];
  auto bf16 = [&](Shape s) { return Tensor::empty(s, DType::BF16, device_); };
  auto attend = [&](Tensor& attn_c) {
    attend_condition(i, req, x.rows(0, Tc), cond, req.cond_part_tokens_layout,
                     req.cond_part_cond_layout, attn_c);
  };

  Tensor x2 = bf16({T, C});
  if (null.mode == NullContextMode::Exact) {
    // [attention rows of the conditional assets; v0 rows], then the reference-shaped to_out.
    Tensor attn = bf16({T, C});
    if (Tc > 0) {
      Tensor attn_c = attn.rows(0, Tc);
      attend(attn_c);
    }
    Tensor attn_null = attn.rows(Tc, T);
    kernels::broadcast_row(row, attn_null);
    Tensor ca = bf16({T, C});
    ops::linear(req.ops, attn, to_out, ca);
    kernels::add(x, ca, x2);
    return x2;
  }
  S3D_CHECK(null.mode == NullContextMode::Cache, "cross_attention_null: mode must be Exact or "
            "Cache");
  if (Tc > 0) {
    Tensor attn_c = bf16({Tc, C});
    attend(attn_c);
    Tensor ca = bf16({Tc, C});
    ops::linear(req.ops, attn_c, to_out, ca);
    Tensor out_c = x2.rows(0, Tc);
    kernels::add(x.rows(0, Tc), ca, out_c);
  }
  // x + c with c broadcast over the rows: no [N, C] tensor for the null branch.
  Tensor out_null = x2.rows(Tc, T);
  kernels::add(x.rows(Tc, T), row, out_null);
  return x2;
}

}  // namespace s3d::model
