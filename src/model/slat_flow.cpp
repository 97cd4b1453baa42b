#include "model/slat_flow.h"

#include <cmath>

#include "contract/fallback.h"
#include "core/error.h"
#include "gemm/linear.h"
#include "kernels/elementwise.h"
#include "kernels/embedding.h"
#include "kernels/fused_gelu.h"
#include "kernels/fused_norm.h"
#include "kernels/fused_qk.h"
#include "kernels/fused_residual.h"
#include "kernels/layernorm.h"
#include "kernels/qk_norm_rope.h"
#include "payload/payload.h"

namespace s3d::model {
namespace {

using gemm::Epilogue;

constexpr float kBlockNormEps = 1e-6f;  // LayerNorm32 inside blocks
constexpr float kOutNormEps = 1e-5f;    // F.layer_norm default before out_layer

}  // namespace

SLatFlowModel::SLatFlowModel(Checkpoint checkpoint) : ck_(std::move(checkpoint)) {
  S3D_CHECK(!ck_.tensors.empty(), "SLatFlowModel: checkpoint ", ck_.path, " holds no tensors");
  device_ = ck_.tensors.begin()->second.device();
}

const Tensor& SLatFlowModel::w(const std::string& name) const {
  auto it = ck_.tensors.find(name);
  S3D_CHECK(it != ck_.tensors.end(), "SLatFlowModel: parameter ", name, " is not loaded");
  return it->second;
}

Request SLatFlowModel::prepare(const Tensor& coords, int batch, int cond_tokens,
                               const Tensor& concat_cond, int null_assets) const {
  const ModelConfig& c = config();
  S3D_CHECK(batch >= 1, "request: needs at least one asset, got ", batch);
  S3D_CHECK(cond_tokens >= 1, "request: the condition needs at least one token, got ",
            cond_tokens);
  check_tensor(coords, "request coords", DType::I32, {-1, 4});
  S3D_CHECK(coords.device() == Device::CPU, "request coords must be on the host");
  payload::validate_packed_coords(coords, batch, c.resolution, "request coords");

  Request r;
  r.batch = batch;
  r.tokens = coords.size(0);
  r.cond_tokens = cond_tokens;
  const int32_t* p = coords.data_as<int32_t>();
  std::vector<int32_t> lengths(batch, 0), bidx(static_cast<size_t>(r.tokens));
  for (int64_t t = 0; t < r.tokens; ++t) {
    bidx[t] = p[4 * t];
    ++lengths[p[4 * t]];
  }
  std::vector<int32_t> offsets(batch + 1, 0);
  for (int b = 0; b < batch; ++b) offsets[b + 1] = offsets[b] + lengths[b];

  r.coords = coords.to(device_);
  r.batch_index = Tensor::from_ints(bidx, {r.tokens}).to(device_);
  r.token_offsets = Tensor::from_ints(offsets, {batch + 1}).to(device_);
  r.tokens_layout = attention::make_seq_layout(lengths, device_);
  r.cond_layout = attention::make_seq_layout(std::vector<int32_t>(batch, cond_tokens), device_);
  S3D_CHECK(null_assets >= 0 && null_assets <= batch, "request: null_assets must be in [0, ",
            batch, "], got ", null_assets);
  r.null_assets = null_assets;
  r.cond_part_tokens = offsets[batch - null_assets];
  if (null_assets > 0 && null_assets < batch) {
    const int conditional = batch - null_assets;
    r.cond_part_tokens_layout = attention::make_seq_layout(
        std::vector<int32_t>(lengths.begin(), lengths.begin() + conditional), device_);
    r.cond_part_cond_layout =
        attention::make_seq_layout(std::vector<int32_t>(conditional, cond_tokens), device_);
  }

  if (c.pe_mode == "rope") {
    const int half = c.head_dim() / 2;
    r.rope_cos = Tensor::empty({r.tokens, half}, DType::F32, device_);
    r.rope_sin = Tensor::empty({r.tokens, half}, DType::F32, device_);
    kernels::rope_phases(r.coords, c.head_dim(), static_cast<float>(c.rope_freq0),
                         static_cast<float>(c.rope_theta), r.rope_cos, r.rope_sin);
  }
  const int concat_channels = c.in_channels - c.out_channels;
  if (concat_channels > 0) {
    check_tensor(concat_cond, "request concat_cond (texture model shape latent)", DType::F32,
                 {r.tokens, concat_channels});
    r.concat_cond = concat_cond.to(device_);
  } else {
    S3D_CHECK(!concat_cond.defined(), "request: concat_cond given, but the model takes ",
              c.in_channels, " input channels = its ", c.out_channels, " output channels");
  }
  return r;
}

Tensor SLatFlowModel::forward(const Request& req, const Tensor& x, const Tensor& t1000,
                              const Tensor& cond) const {
  check_tensor(cond, "forward cond", DType::BF16,
               {req.batch, req.cond_tokens, config().cond_channels});
  return forward(req, x, t1000, Condition{cond, 0, nullptr});
}

Tensor SLatFlowModel::forward(const Request& req, const Tensor& x, const Tensor& t1000,
                              const Condition& cond, const NullPath* null,
                              const Modulation* mod) const {
  const ModelConfig& c = config();
  const int64_t T = req.tokens, C = c.model_channels;
  const int B = req.batch;
  check_tensor(x, "forward x", DType::F32, {T, c.out_channels});
  check_tensor(t1000, "forward t", DType::F32, {B});
  const int n_null = cond.null_assets;
  S3D_CHECK(n_null >= 0 && n_null <= B, "forward: condition marks ", n_null,
            " null assets of ", B);
  if (n_null < B) {
    check_tensor(cond.tokens, "forward condition tokens", DType::BF16,
                 {B - n_null, req.cond_tokens, c.cond_channels});
  } else {
    S3D_CHECK(!cond.tokens.defined(), "forward: every asset is null, but condition tokens ",
              cond.tokens.describe(), " were given");
  }
  if (n_null > 0) {
    S3D_CHECK(null && null->mode != NullContextMode::Reference,
              "forward: a symbolic null condition needs a null-context path (Exact or Cache); "
              "pure_eager passes a real zero tensor");
    S3D_CHECK(null->rows.size() == static_cast<size_t>(c.num_blocks),
              "forward: the null-context path holds ", null->rows.size(), " rows for ",
              c.num_blocks, " blocks");
    S3D_CHECK(n_null == B || n_null == req.null_assets, "forward: ", n_null,
              " null assets, but the request was prepared for ", req.null_assets,
              " (prepare(..., null_assets))");
  }
  if (mod) {
    S3D_CHECK(mod->blocks.size() == static_cast<size_t>(c.num_blocks),
              "forward: the given modulation holds ", mod->blocks.size(), " blocks for ",
              c.num_blocks);
    for (const Tensor& m : mod->blocks)
      check_tensor(m, "forward modulation", DType::BF16, {B, 6 * C});
  }
  if (cond.kv) {
    S3D_CHECK(cond.kv->kv.size() == static_cast<size_t>(c.num_blocks) &&
                  cond.kv->kv[0].size(0) == (B - n_null) * int64_t{req.cond_tokens},
              "forward: the cached condition K/V does not belong to this condition (",
              cond.kv->kv.size(), " blocks of ",
              cond.kv->kv.empty() ? 0 : cond.kv->kv[0].size(0), " rows)");
  }
  const Device dev = device_;

  // Input layer in fp32, then cast to bf16 (manual_cast in the original).
  Tensor feats = x;
  if (req.concat_cond.defined()) {
    feats = Tensor::empty({T, c.in_channels}, DType::F32, dev);
    RowView left = RowView::columns(feats, 0, c.out_channels);
    RowView right = RowView::columns(feats, c.out_channels, c.in_channels - c.out_channels);
    kernels::copy_rows(RowView::of(x), left);
    kernels::copy_rows(RowView::of(req.concat_cond), right);
  }
  Tensor h32 = Tensor::empty({T, C}, DType::F32, dev);
  gemm::linear(feats, w("input_layer.weight"), &w("input_layer.bias"), h32);
  Tensor h = Tensor::empty({T, C}, DType::BF16, dev);
  kernels::cast(h32, h);
  h32 = Tensor();
  if (c.pe_mode == "ape") {
    Tensor pe32 = Tensor::empty({T, C}, DType::F32, dev);
    kernels::ape_embedding(req.coords, pe32);
    Tensor pe = Tensor::empty({T, C}, DType::BF16, dev);
    kernels::cast(pe32, pe);
    Tensor sum = Tensor::empty({T, C}, DType::BF16, dev);
    kernels::add(h, pe, sum);
    h = sum;
  }

  // The t-only part: every block's modulation (precomputed per step with step_tables).
  Modulation computed;
  if (mod == nullptr) {
    computed = modulation(t1000);
    mod = &computed;
  }
  for (int i = 0; i < c.num_blocks; ++i) h = block(i, req, h, mod->blocks[i], cond, null);

  // Output: fp32 LayerNorm (eps 1e-5, no affine) and the fp32 out_layer.
  Tensor o32 = Tensor::empty({T, C}, DType::F32, dev);
  kernels::cast(h, o32);
  Tensor on = Tensor::empty({T, C}, DType::F32, dev);
  kernels::layer_norm(o32, nullptr, nullptr, kOutNormEps, on);
  Tensor v = Tensor::empty({T, c.out_channels}, DType::F32, dev);
  gemm::linear(on, w("out_layer.weight"), &w("out_layer.bias"), v);
  return v;
}

Modulation SLatFlowModel::modulation(const Tensor& t1000) const {
  const ModelConfig& c = config();
  const int64_t C = c.model_channels;
  check_tensor(t1000, "modulation t", DType::F32, {t1000.numel()});
  const int B = static_cast<int>(t1000.size(0));
  const Device dev = device_;
  auto bf16 = [&](Shape s) { return Tensor::empty(s, DType::BF16, dev); };
  // Timestep embedding and shared modulation, fp32, [B, ...].
  Tensor freq = Tensor::empty({B, 256}, DType::F32, dev);
  kernels::timestep_embedding(t1000, freq);
  Tensor a = Tensor::empty({B, C}, DType::F32, dev);
  gemm::linear(freq, w("t_embedder.mlp.0.weight"), &w("t_embedder.mlp.0.bias"), a);
  Tensor a_act = Tensor::empty({B, C}, DType::F32, dev);
  kernels::silu(a, a_act);
  Tensor t_emb = Tensor::empty({B, C}, DType::F32, dev);
  gemm::linear(a_act, w("t_embedder.mlp.2.weight"), &w("t_embedder.mlp.2.bias"), t_emb);

  Tensor mod_shared, t_emb_bf16;
  if (c.share_mod) {
    Tensor s = Tensor::empty({B, C}, DType::F32, dev);
    kernels::silu(t_emb, s);
    Tensor m32 = Tensor::empty({B, 6 * C}, DType::F32, dev);
    gemm::linear(s, w("adaLN_modulation.1.weight"), &w("adaLN_modulation.1.bias"), m32);
    mod_shared = Tensor::empty({B, 6 * C}, DType::BF16, dev);
    kernels::cast(m32, mod_shared);
  } else {
    t_emb_bf16 = Tensor::empty({B, C}, DType::BF16, dev);
    kernels::cast(t_emb, t_emb_bf16);
  }

  Modulation out;
  for (int i = 0; i < c.num_blocks; ++i) {
    const std::string p = "blocks." + std::to_string(i) + ".";
    // mod = (block.modulation + m).to(bf16), or the block's own adaLN on SiLU(t_emb).
    Tensor mod = bf16({B, 6 * C});
    if (c.share_mod) {
      Tensor sum32 = Tensor::empty({B, 6 * C}, DType::F32, dev);
      kernels::add(mod_shared, w(p + "modulation"), sum32);
      kernels::cast(sum32, mod);
    } else {
      Tensor s = bf16({B, C});
      kernels::silu(t_emb_bf16, s);
      gemm::linear(s, w(p + "adaLN_modulation.1.weight"), &w(p + "adaLN_modulation.1.bias"), mod);
    }
    out.blocks.push_back(std::move(mod));
  }
  return out;
}

Modulation Modulation::view(const Tensor& buffer, int num_blocks, int rows, int used) {
  S3D_CHECK(buffer.defined() && buffer.ndim() == 2 && buffer.size(0) == int64_t{num_blocks} * rows &&
                used >= 1 && used <= rows,
            "modulation view: expected a buffer of ", num_blocks, " x ", rows,
            " rows with 1..", rows, " used, got ", buffer.describe(), " with ", used, " used");
  Modulation m;
  for (int i = 0; i < num_blocks; ++i)
    m.blocks.push_back(buffer.rows(int64_t{i} * rows, int64_t{i} * rows + used));
  return m;
}

Tensor ModulationTable::step_buffer(int k) const {
  S3D_CHECK(k >= 0 && k < steps(), "modulation table: step ", k, " of ", steps());
  return storage.rows(k, k + 1).reshape({int64_t{num_blocks} * rows, width});
}

ModulationTable SLatFlowModel::modulation_table(const Tensor& t1000) const {
  S3D_CHECK(t1000.defined() && t1000.ndim() == 2 && t1000.dtype() == DType::F32 &&
                t1000.size(0) >= 1 && t1000.size(1) >= 1,
            "modulation table: t must be f32 [steps, rows], got ", t1000.describe());
  const int64_t S = t1000.size(0), R = t1000.size(1);
  const ModelConfig& c = config();
  // One call over every step's rows: each block's modulation [S * R, 6C], step-major.
  const Modulation all = modulation(t1000.reshape({S * R}));
  ModulationTable tab;
  tab.num_blocks = c.num_blocks;
  tab.rows = static_cast<int>(R);
  tab.width = 6 * c.model_channels;
  const int64_t per_block = R * tab.width;  // one block's elements of one step
  tab.storage = Tensor::empty({S, c.num_blocks * per_block}, DType::BF16, device_);
  for (int i = 0; i < c.num_blocks; ++i) {
    RowView dst = RowView::columns(tab.storage, i * per_block, per_block);
    kernels::copy_rows(RowView::of(all.blocks[static_cast<size_t>(i)].reshape({S, per_block})),
                       dst);
  }
  return tab;
}

Tensor SLatFlowModel::block(int i, const Request& req, const Tensor& x_in, const Tensor& mod,
                            const Condition& cond, const NullPath* null) const {
  const ModelConfig& c = config();
  const int64_t T = req.tokens, C = c.model_channels, H = c.num_heads, D = c.head_dim();
  const int B = req.batch;
  const Device dev = device_;
  const std::string p = "blocks." + std::to_string(i) + ".";
  auto bf16 = [&](Shape s) { return Tensor::empty(s, DType::BF16, dev); };

  auto chunk = [&](int k) { return RowView::columns(mod, k * C, C); };
  enum { kShiftMsa, kScaleMsa, kGateMsa, kShiftMlp, kScaleMlp, kGateMlp };

  using sparse3d::Flag;
  const sparse3d::FlagSet& fused = req.flags;
  // A fused op that is on but cannot take this shape: the reference chain runs, counted.
  auto usable = [&](Flag flag, const std::string& why) {
    if (!fused.on(flag)) return false;
    if (why.empty()) return true;
    contract::record_fallback(flag, why);
    return false;
  };

  // LayerNorm(x) * (1 + scale[batch]) + shift[batch]. The reference writes the norm into
  // hn and materialises every eager step; modulated_layernorm does it in one kernel (hn is
  // then left unwritten: only the reference chain and cross-attention's scratch use it).
  auto norm_modulate = [&](const Tensor& x, Tensor& hn, int shift_k, int scale_k) {
    Tensor out = bf16({T, C});
    if (usable(Flag::modulated_layernorm,
               kernels::modulated_layer_norm_unsupported(x, chunk(shift_k), chunk(scale_k), out))) {
      kernels::modulated_layer_norm(x, chunk(shift_k), chunk(scale_k), req.batch_index,
                                    kBlockNormEps, out);
      return out;
    }
    kernels::layer_norm(x, nullptr, nullptr, kBlockNormEps, hn);
    Tensor one_plus = bf16({B, C});
    kernels::add_scalar(chunk(scale_k), 1.0f, one_plus);
    Tensor g = bf16({T, C});
    kernels::gather_rows(RowView::of(one_plus), req.batch_index, g);
    Tensor scaled = bf16({T, C});
    kernels::mul(hn, g, scaled);
    kernels::gather_rows(chunk(shift_k), req.batch_index, g);
    kernels::add(scaled, g, out);
    return out;
  };
  // x + h * gate[batch]
  auto gated_residual = [&](const Tensor& x, const Tensor& hb, int gate_k) {
    Tensor out = bf16({T, C});
    if (usable(Flag::gated_residual_add,
               kernels::gated_residual_add_unsupported(x, hb, chunk(gate_k), out))) {
      kernels::gated_residual_add(x, hb, chunk(gate_k), req.batch_index, out);
      return out;
    }
    Tensor g = bf16({T, C});
    kernels::gather_rows(chunk(gate_k), req.batch_index, g);
    Tensor gh = bf16({T, C});
    kernels::mul(hb, g, gh);
    kernels::add(x, gh, out);
    return out;
  };
  auto linear = [&](const Tensor& in, const std::string& name, int64_t out_features) {
    Tensor y = bf16({in.size(0), out_features});
    gemm::linear(in, w(name + ".weight"), &w(name + ".bias"), y);
    return y;
  };
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));

  // Self-attention branch.
  Tensor x = x_in;
  Tensor hn = bf16({T, C});
  Tensor hm = norm_modulate(x, hn, kShiftMsa, kScaleMsa);
  Tensor qkv = linear(hm, p + "self_attn.to_qkv", 3 * C);
  const RowView q_view{qkv, 0, T, C, 3 * C}, k_view{qkv, C, T, C, 3 * C},
      v_view{qkv, 2 * C, T, C, 3 * C};
  Tensor attn_in = qkv;
  const bool rope = c.pe_mode == "rope";
  const Tensor* q_gamma = c.qk_rms_norm ? &w(p + "self_attn.q_rms_norm.gamma") : nullptr;
  const Tensor* k_gamma = c.qk_rms_norm ? &w(p + "self_attn.k_rms_norm.gamma") : nullptr;
  const Tensor* cos = rope ? &req.rope_cos : nullptr;
  const Tensor* sin = rope ? &req.rope_sin : nullptr;
  if ((c.qk_rms_norm || rope) &&
      usable(Flag::qk_rmsnorm_rope_inplace,
             kernels::fused_qk_unsupported(qkv, 3 * C, static_cast<int>(H), static_cast<int>(D),
                                           cos, sin))) {
    // q and k normalised and rotated in place; attention reads q, k, v straight from qkv
    // (the same [T, 3C] layout the reference restack produces).
    kernels::qk_rmsnorm_rope_inplace(qkv, static_cast<int>(H), static_cast<int>(D), q_gamma,
                                     k_gamma, cos, sin);
  } else if (c.qk_rms_norm || rope) {
    // unbind -> RMSNorm (bf16 out) -> RoPE (bf16 out) -> torch.stack, as the original.
    auto prep = [&](const RowView& view, const char* gamma) {
      Tensor t = bf16({T, H, D});
      if (c.qk_rms_norm) {
        kernels::head_rmsnorm(view, w(p + gamma), static_cast<int>(H), static_cast<int>(D), t);
      } else {
        RowView dst = RowView::of(t.reshape({T, C}));
        kernels::copy_rows(view, dst);
      }
      if (!rope) return t;
      Tensor r = bf16({T, H, D});
      kernels::rope_apply(t, req.rope_cos, req.rope_sin, r);
      return r;
    };
    Tensor qn = prep(q_view, "self_attn.q_rms_norm.gamma");
    Tensor kn = prep(k_view, "self_attn.k_rms_norm.gamma");
    attn_in = bf16({T, 3 * C});
    RowView dq = RowView::columns(attn_in, 0, C), dk = RowView::columns(attn_in, C, C),
            dv = RowView::columns(attn_in, 2 * C, C);
    kernels::copy_rows(RowView::of(qn.reshape({T, C})), dq);
    kernels::copy_rows(RowView::of(kn.reshape({T, C})), dk);
    kernels::copy_rows(v_view, dv);
  }
  Tensor attn = bf16({T, C});
  attention::sdpa_varlen(RowView{attn_in, 0, T, C, 3 * C}, req.tokens_layout,
                         RowView{attn_in, C, T, C, 3 * C}, RowView{attn_in, 2 * C, T, C, 3 * C},
                         req.tokens_layout, static_cast<int>(H), static_cast<int>(D), scale,
                         attn);
  Tensor sa = linear(attn, p + "self_attn.to_out", C);
  x = gated_residual(x, sa, kGateMsa);

  // Cross-attention branch: no modulation, no gate.
  x = cross_attention(i, req, x, hn, cond, null);

  // MLP branch.
  hm = norm_modulate(x, hn, kShiftMlp, kScaleMlp);
  if (req.mlp_probe) req.mlp_probe(i, hm);
  // Three MLP paths: the cuBLASLt bias+GELU epilogue (one rounding: bounded error); the
  // reference rounding points with the wide GELU kernel (gelu_tanh: bitwise); the reference.
  Tensor ug = bf16({T, c.mlp_hidden()});
  if (fused.on(Flag::gemm_gelu_epilogue)) {
    gemm::linear(hm, w(p + "mlp.mlp.0.weight"), &w(p + "mlp.mlp.0.bias"), ug,
                 Epilogue::BiasGelu);
  } else {
    Tensor u = linear(hm, p + "mlp.mlp.0", c.mlp_hidden());
    if (fused.on(Flag::gelu_tanh)) {
      kernels::gelu_tanh_wide(u, ug);
    } else {
      kernels::gelu_tanh(u, ug);
    }
  }
  Tensor mo = linear(ug, p + "mlp.mlp.2", C);
  return gated_residual(x, mo, kGateMlp);
}

size_t SLatFlowModel::weight_bytes() const {
  size_t n = 0;
  for (const auto& [name, t] : ck_.tensors) n += t.nbytes();
  return n;
}

size_t SLatFlowModel::activation_bytes(int64_t tokens, int batch, int cond_tokens) const {
  const ModelConfig& c = config();
  const auto T = static_cast<size_t>(tokens);
  const auto C = static_cast<size_t>(c.model_channels);
  const auto hidden = static_cast<size_t>(c.mlp_hidden());
  const size_t BL = static_cast<size_t>(batch) * static_cast<size_t>(cond_tokens);
  // Tensors alive at the worst point of a block (the MLP: x, norm, modulated, the hidden
  // and its GELU, plus transient [T, C] buffers), counted generously: the caching allocator
  // rounds and keeps freed blocks.
  size_t per_token_block = 2 * (10 * C + 2 * hidden) + 2 * (3 * C) * 2;
  // Around the blocks: fp32 input/output paths and the request's RoPE tables.
  size_t per_token_io = 4 * (3 * C + 2 * static_cast<size_t>(c.in_channels)) +
                        4 * static_cast<size_t>(c.head_dim());
  size_t cond = BL * (2 * static_cast<size_t>(c.cond_channels) + 2 * 3 * C);
  size_t per_request = T * (per_token_block + per_token_io) + cond;
  return per_request + per_request / 4 + (64u << 20);
}

}  // namespace s3d::model
