#include "model/trunk/transformer.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "core/error.h"
#include "kernels/elementwise.h"
#include "kernels/embedding.h"
#include "kernels/layernorm.h"
#include "ops/gated_residual_add.h"
#include "ops/linear.h"
#include "ops/linear_gelu.h"
#include "ops/modulated_layernorm.h"
#include "ops/qk_rmsnorm_rope.h"
#include "ops/sdpa.h"
#include "payload/payload.h"

namespace s3d::model {
namespace {

constexpr float kBlockNormEps = 1e-6f;  // LayerNorm32 inside blocks
constexpr float kOutNormEps = 1e-5f;    // F.layer_norm default before out_layer
// Largest voxel coordinate + 1 a request may use: far above TRELLIS.2's largest latent grid
// (96, the 1536 cascade) and far below where fp32 RoPE phases lose integer precision (2^24).
constexpr int kMaxCoordinate = 1 << 16;

// The six C-wide chunks of a block's modulation [B, 6C], in the original's order.
enum ModulationChunk { kShiftMsa, kScaleMsa, kGateMsa, kShiftMlp, kScaleMlp, kGateMlp };

RowView chunk(const Tensor& mod, ModulationChunk k, int64_t C) {
  return RowView::columns(mod, k * C, C);
}

Tensor bf16_empty(Shape s, Device dev) { return Tensor::empty(s, DType::BF16, dev); }

// y = x W^T + b in bf16, [rows of x, out_features of W].
Tensor project(const ops::OpPlan& plan, const Tensor& x, const Linear& l) {
  Tensor y = bf16_empty({x.size(0), l.out_features()}, x.device());
  ops::linear(plan, x, l, y);
  return y;
}

}  // namespace

Transformer::Transformer(Checkpoint checkpoint)
    : ck_(std::move(checkpoint)), family_(&find_family(ck_.config.family)) {
  S3D_CHECK(!ck_.tensors.empty(), "model: checkpoint ", ck_.path, " holds no tensors");
  device_ = ck_.tensors.begin()->second.device();
  weights_ = bind_weights(ck_.config, ck_.tensors, ck_.weight_format());
  positions_ = family_->positions(ck_.config, device_);
  if (!ck_.home.empty()) {
    host_copy_.emplace(HostWeights::borrowed(ck_.home, std::move(ck_.keep_alive),
                                             device_ == Device::CUDA));
    ck_.home.clear();
  }
}

const char* Transformer::weights_source() const {
  if (ck_.borrowed_in_place) return "borrowed in place";
  if (host_copy_ && host_copy_->is_borrowed()) return "borrowed host home";
  return "own copy";
}

ModelSummary Transformer::summary() const {
  const ModelConfig& c = config();
  return ModelSummary{c.family, c.in_channels, c.out_channels, c.cond_channels,
                      family_->unbiased_rescale_std()};
}

Tensor Transformer::forward(const Request& req, const Tensor& x, const Tensor& t1000,
                            const Tensor& cond) const {
  check_tensor(cond, "forward cond", DType::BF16,
               {req.batch, req.cond_tokens, config().cond_channels});
  return forward(req, x, t1000, Condition{cond, 0, nullptr});
}

void Transformer::check_request(const Tensor& coords, int batch, int cond_tokens,
                                const Tensor& concat_cond) const {
  const ModelConfig& c = config();
  S3D_CHECK(batch >= 1, "request: needs at least one asset, got ", batch);
  S3D_CHECK(cond_tokens >= 1, "request: the condition needs at least one token, got ",
            cond_tokens);
  check_tensor(coords, "request coords", DType::I32, {-1, 4});
  S3D_CHECK(coords.device() == Device::CPU, "request coords must be on the host");
  // The layouts hold token offsets as int32 (attention's cu_seqlens among them).
  S3D_CHECK(coords.size(0) <= INT32_MAX, "request coords: ", coords.size(0),
            " rows, more than the ", INT32_MAX, " tokens a request may have");
  // The original never reads `resolution` at inference (RoPE and APE take the coordinates as
  // they are), and the released pipeline relies on it: its 1024 texture model's config says 32
  // while it is fed the 64-grid coordinates of the 1024 shape stage. So `resolution` is not a
  // bound here; coordinates must only be non-negative and below kMaxCoordinate.
  payload::validate_packed_coords(coords, batch, std::max(c.resolution, kMaxCoordinate),
                                  "request coords");
  const int concat_channels = c.in_channels - c.out_channels;
  if (concat_channels > 0) {
    check_tensor(concat_cond, "request concat_cond (texture model shape latent)", DType::F32,
                 {coords.size(0), concat_channels});
  } else {
    S3D_CHECK(!concat_cond.defined(), "request: concat_cond given, but the model takes ",
              c.in_channels, " input channels = its ", c.out_channels, " output channels");
  }
  family_->check_coords(c, coords, batch);
}

Request Transformer::prepare(const Tensor& coords, int batch, int cond_tokens,
                             const Tensor& concat_cond, int null_assets) const {
  check_resident();
  const ModelConfig& c = config();
  check_request(coords, batch, cond_tokens, concat_cond);

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

  positions_->apply(r);
  if (c.in_channels > c.out_channels) r.concat_cond = concat_cond.to(device_);
  return r;
}

void Transformer::check_forward_operands(const Request& req, const Tensor& x,
                                         const Tensor& t1000, const Condition& cond,
                                         const NullPath* null, const Modulation* mod) const {
  check_step_operands(req, x, t1000, mod);
  check_condition_operands(req, cond, null);
}

void Transformer::check_step_operands(const Request& req, const Tensor& x, const Tensor& t1000,
                                      const Modulation* mod) const {
  const ModelConfig& c = config();
  const int64_t T = req.tokens, C = c.model_channels;
  const int B = req.batch;
  check_tensor(x, "forward x", DType::F32, {T, c.out_channels});
  check_tensor(t1000, "forward t", DType::F32, {B});
  S3D_CHECK(req.ops.flags() == req.flags, "forward: the request's op plan was resolved from "
            "other flags than its own; set them with Request::use_flags");
  if (mod) {
    S3D_CHECK(mod->blocks.size() == static_cast<size_t>(c.num_blocks),
              "forward: the given modulation holds ", mod->blocks.size(), " blocks for ",
              c.num_blocks);
    for (const Tensor& m : mod->blocks)
      check_tensor(m, "forward modulation", DType::BF16, {B, 6 * C});
  }
}

void Transformer::check_condition_operands(const Request& req, const Condition& cond,
                                           const NullPath* null) const {
  const ModelConfig& c = config();
  const int B = req.batch;
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
  if (cond.kv) {
    S3D_CHECK(cond.kv->kv.size() == static_cast<size_t>(c.num_blocks) &&
                  cond.kv->kv[0].size(0) == (B - n_null) * int64_t{req.cond_tokens},
              "forward: the cached condition K/V does not belong to this condition (",
              cond.kv->kv.size(), " blocks of ",
              cond.kv->kv.empty() ? 0 : cond.kv->kv[0].size(0), " rows)");
  }
}

Tensor Transformer::forward(const Request& req, const Tensor& x, const Tensor& t1000,
                            const Condition& cond, const NullPath* null,
                            const Modulation* mod) const {
  check_resident();
  check_forward_operands(req, x, t1000, cond, null, mod);
  Tensor h = embed_input(req, x);
  // The t-only part: every block's modulation (precomputed per step with step_tables).
  Modulation computed;
  if (mod == nullptr) {
    computed = modulation(req.ops, t1000);
    mod = &computed;
  }
  // The block takes h by value: its input dies inside it, as soon as it is last read.
  for (int i = 0; i < config().num_blocks; ++i)
    h = block(i, req, std::move(h), mod->blocks[static_cast<size_t>(i)], cond, null);
  return output_layer(req.ops, h);
}

Tensor Transformer::embed_input(const Request& req, const Tensor& x) const {
  const ModelConfig& c = config();
  const int64_t T = req.tokens, C = c.model_channels;
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
  ops::linear(req.ops, feats, weights_.input_layer, h32);
  if (req.position_f32.defined()) {
    // The dense model's APE: added to the fp32 output, one rounding (docs/DENSE_MODEL.md).
    Tensor sum32 = Tensor::empty({T, C}, DType::F32, dev);
    kernels::add(h32, req.position_f32, sum32);
    h32 = sum32;
  }
  Tensor h = bf16_empty({T, C}, dev);
  kernels::cast(h32, h);
  h32 = Tensor();
  if (c.pe_mode != "ape" || req.position_f32.defined()) return h;
  Tensor pe32 = Tensor::empty({T, C}, DType::F32, dev);
  kernels::ape_embedding(req.coords, pe32);
  Tensor pe = bf16_empty({T, C}, dev);
  kernels::cast(pe32, pe);
  Tensor sum = bf16_empty({T, C}, dev);
  kernels::add(h, pe, sum);
  return sum;
}

Tensor Transformer::output_layer(const ops::OpPlan& plan, const Tensor& h) const {
  const ModelConfig& c = config();
  const int64_t T = h.size(0), C = c.model_channels;
  const Device dev = device_;
  Tensor o32 = Tensor::empty({T, C}, DType::F32, dev);
  kernels::cast(h, o32);
  Tensor on = Tensor::empty({T, C}, DType::F32, dev);
  kernels::layer_norm(o32, nullptr, nullptr, kOutNormEps, on);
  Tensor v = Tensor::empty({T, c.out_channels}, DType::F32, dev);
  ops::linear(plan, on, weights_.out_layer, v);
  return v;
}

Modulation Transformer::modulation(const ops::OpPlan& plan, const Tensor& t1000) const {
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
  ops::linear(plan, freq, weights_.t_embedder_fc1, a);
  Tensor a_act = Tensor::empty({B, C}, DType::F32, dev);
  kernels::silu(a, a_act);
  Tensor t_emb = Tensor::empty({B, C}, DType::F32, dev);
  ops::linear(plan, a_act, weights_.t_embedder_fc2, t_emb);

  Tensor mod_shared, t_emb_bf16;
  if (c.share_mod) {
    Tensor s = Tensor::empty({B, C}, DType::F32, dev);
    kernels::silu(t_emb, s);
    Tensor m32 = Tensor::empty({B, 6 * C}, DType::F32, dev);
    ops::linear(plan, s, weights_.adaLN_modulation, m32);
    mod_shared = Tensor::empty({B, 6 * C}, DType::BF16, dev);
    kernels::cast(m32, mod_shared);
  } else {
    t_emb_bf16 = Tensor::empty({B, C}, DType::BF16, dev);
    kernels::cast(t_emb, t_emb_bf16);
  }

  Modulation out;
  for (const BlockWeights& bw : weights_.blocks) {
    // mod = (block.modulation + m).to(bf16), or the block's own adaLN on SiLU(t_emb).
    Tensor mod = bf16({B, 6 * C});
    if (c.share_mod) {
      Tensor sum32 = Tensor::empty({B, 6 * C}, DType::F32, dev);
      kernels::add(mod_shared, bw.modulation, sum32);
      kernels::cast(sum32, mod);
    } else {
      Tensor s = bf16({B, C});
      kernels::silu(t_emb_bf16, s);
      ops::linear(plan, s, bw.adaLN_modulation, mod);
    }
    out.blocks.push_back(std::move(mod));
  }
  return out;
}

ModulationTable Transformer::modulation_table(const ops::OpPlan& plan,
                                              const Tensor& t1000) const {
  S3D_CHECK(t1000.defined() && t1000.ndim() == 2 && t1000.dtype() == DType::F32 &&
                t1000.size(0) >= 1 && t1000.size(1) >= 1,
            "modulation table: t must be f32 [steps, rows], got ", t1000.describe());
  const int64_t S = t1000.size(0), R = t1000.size(1);
  const ModelConfig& c = config();
  // One call over every step's rows: each block's modulation [S * R, 6C], step-major.
  const Modulation all = modulation(plan, t1000.reshape({S * R}));
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

// Memory: every intermediate is released right after its last reader is queued (a released
// block is reused by later work on the same stream, in stream order), so a block holds at
// most its input, the packed QKV and one [T, C] output at once, or with the MLP its input,
// the hidden and one output. Nothing here changes a value.
Tensor Transformer::block(int i, const Request& req, Tensor x, const Tensor& mod,
                          const Condition& cond, const NullPath* null) const {
  const BlockWeights& w = weights_.blocks[static_cast<size_t>(i)];
  Tensor h = self_attention(w, req, x, mod);
  x = Tensor();
  h = cross_attention(i, req, h, cond, null);  // no modulation, no gate
  return mlp(i, w, req, h, mod);
}

Tensor Transformer::self_attention(const BlockWeights& w, const Request& req, const Tensor& x,
                                   const Tensor& mod) const {
  const ModelConfig& c = config();
  const int64_t T = req.tokens, C = c.model_channels;
  const int H = c.num_heads, D = c.head_dim();
  Tensor attn_in = attention_input(w, req, x, mod);
  Tensor attn = bf16_empty({T, C}, device_);
  ops::sdpa(req.ops, RowView{attn_in, 0, T, C, 3 * C}, req.tokens_layout,
                         RowView{attn_in, C, T, C, 3 * C}, RowView{attn_in, 2 * C, T, C, 3 * C},
                         req.tokens_layout, H, D, attention_scale(), attn);
  attn_in = Tensor();
  return attention_output(w, req, x, std::move(attn), mod);
}

float Transformer::attention_scale() const {
  return static_cast<float>(1.0 / std::sqrt(static_cast<double>(config().head_dim())));
}

Tensor Transformer::attention_input(const BlockWeights& w, const Request& req, const Tensor& x,
                                    const Tensor& mod) const {
  const ModelConfig& c = config();
  const int64_t T = req.tokens, C = c.model_channels;
  const int H = c.num_heads, D = c.head_dim();
  Tensor hm = bf16_empty({T, C}, device_);
  ops::modulated_layernorm(req.ops, x, chunk(mod, kShiftMsa, C), chunk(mod, kScaleMsa, C),
                           req.batch_index, kBlockNormEps, hm);
  Tensor qkv = project(req.ops, hm, w.self_attn.to_qkv);
  hm = Tensor();
  const bool rope = c.pe_mode == "rope";
  const Tensor* q_gamma = c.qk_rms_norm ? &w.self_attn.q_rms_gamma : nullptr;
  const Tensor* k_gamma = c.qk_rms_norm ? &w.self_attn.k_rms_gamma : nullptr;
  // The attention reads q, k, v from one [T, 3C] tensor: qkv itself (fused, in place) or the
  // reference chain's restack.
  const Tensor* cos = rope ? &req.rope_cos : nullptr;
  const Tensor* sin = rope ? &req.rope_sin : nullptr;
  return ops::qk_rmsnorm_rope(req.ops, qkv, H, D, q_gamma, k_gamma, cos, sin);
}

Tensor Transformer::attention_output(const BlockWeights& w, const Request& req, const Tensor& x,
                                     Tensor attn, const Tensor& mod) const {
  const int64_t T = req.tokens, C = config().model_channels;
  Tensor sa = project(req.ops, attn, w.self_attn.to_out);
  attn = Tensor();
  Tensor out = bf16_empty({T, C}, device_);
  ops::gated_residual_add(req.ops, x, sa, chunk(mod, kGateMsa, C), req.batch_index, out);
  return out;
}

Tensor Transformer::mlp(int i, const BlockWeights& w, const Request& req, const Tensor& x,
                        const Tensor& mod) const {
  const int64_t T = req.tokens;
  Tensor out = bf16_empty({T, config().model_channels}, device_);
  S3D_CHECK(req.mlp_chunk_tokens >= 1, "mlp: mlp_chunk_tokens must be >= 1, got ",
            req.mlp_chunk_tokens);
  const bool chunked = req.flags.on(sparse3d::Flag::chunked_mlp) && T > req.mlp_chunk_tokens;
  S3D_CHECK(!(chunked && req.mlp_probe), "mlp: the per-layer probe needs the whole MLP input; "
            "run it without chunked_mlp");
  // chunked_mlp: the same ops over row ranges; every op of the MLP is row-wise, so only the
  // GEMMs' M changes (another algorithm may sum in another order: a tolerance flag).
  const int64_t step = chunked ? req.mlp_chunk_tokens : std::max<int64_t>(T, 1);
  for (int64_t r0 = 0; r0 < T; r0 += step) {
    const int64_t r1 = std::min(T, r0 + step);
    Tensor out_rows = chunked ? out.rows(r0, r1) : out;
    mlp_rows(i, w, req, chunked ? x.rows(r0, r1) : x,
             chunked ? req.batch_index.rows(r0, r1) : req.batch_index, mod, out_rows);
  }
  return out;
}

void Transformer::mlp_rows(int i, const BlockWeights& w, const Request& req, const Tensor& x,
                           const Tensor& batch_index, const Tensor& mod, Tensor& out) const {
  const ModelConfig& c = config();
  const int64_t T = x.size(0), C = c.model_channels;
  Tensor hm = bf16_empty({T, C}, device_);
  ops::modulated_layernorm(req.ops, x, chunk(mod, kShiftMlp, C), chunk(mod, kScaleMlp, C),
                           batch_index, kBlockNormEps, hm);
  if (req.mlp_probe) req.mlp_probe(i, hm);
  Tensor ug = bf16_empty({T, c.mlp_hidden()}, device_);
  ops::linear_gelu(req.ops, hm, w.mlp.fc1, ug);
  hm = Tensor();
  Tensor mo = project(req.ops, ug, w.mlp.fc2);
  ug = Tensor();
  ops::gated_residual_add(req.ops, x, mo, chunk(mod, kGateMlp, C), batch_index, out);
}

size_t Transformer::weight_bytes() const {
  size_t n = 0;
  for (const auto& [name, t] : ck_.tensors) n += t.nbytes();
  return n;
}

void Transformer::check_resident() const {
  S3D_CHECK(resident_, "model: the weights of ", ck_.path, " are offloaded to host "
            "memory; reload them before a request (Engine::reload)");
}

void Transformer::bind(std::map<std::string, Tensor> tensors) {
  TrunkWeights bound = bind_weights(ck_.config, tensors, ck_.weight_format());
  ck_.tensors = std::move(tensors);
  weights_ = std::move(bound);
}

size_t Transformer::offload_weights() {
  if (!resident_) return 0;
  size_t copied = 0;
  if (!host_copy_) {
    host_copy_.emplace(ck_.tensors, device_ == Device::CUDA);
    copied = weight_bytes();
  }
  bind(host_copy_->host_views());
  // The last owner of the device buffer (the tensors were views into it): back to the
  // allocator. On the CPU backend the tensors owned their memory, freed by bind().
  ck_.arena = Tensor();
  // Weights borrowed in place now have a copy of the engine's own: the caller's go.
  ck_.keep_alive.reset();
  ck_.borrowed_in_place = false;
  ck_.borrowed = false;
  resident_ = false;
  return copied;
}

size_t Transformer::reload_weights() {
  if (resident_) return 0;
  auto [arena, tensors] = host_copy_->upload(device_);
  bind(std::move(tensors));
  ck_.arena = std::move(arena);
  resident_ = true;
  return host_copy_->bytes();
}

size_t Transformer::activation_bytes(int64_t tokens, int batch, int cond_tokens,
                                     const sparse3d::FlagSet& flags) const {
  using sparse3d::Flag;
  const ModelConfig& c = config();
  const auto T = static_cast<size_t>(tokens);
  const auto C = static_cast<size_t>(c.model_channels);
  const auto hidden = static_cast<size_t>(c.mlp_hidden());
  const size_t BL = static_cast<size_t>(batch) * static_cast<size_t>(cond_tokens);
  // bf16 [T, C]-sized tensors alive at a block's worst point (block() releases every
  // intermediate after its last reader). Self-attention: the input, the packed QKV (3) and
  // the attention output; the reference q/k chain adds its normalised and rotated q and k
  // copies and the restack (6). MLP: the input, the modulated input and the hidden, or with
  // chunked_mlp the input, the output and one chunk's rows. Cross-attention and the
  // reference modulation chain hold at most 5.
  const bool inplace_qk =
      flags.on(Flag::qk_rmsnorm_rope_inplace) || flags.on(Flag::fast_qk_rmsnorm_rope);
  const size_t attention_units = inplace_qk ? 5 : 11;
  const bool chunked = flags.on(Flag::chunked_mlp) && tokens > kDefaultMlpChunkTokens;
  const size_t mlp_units = chunked ? 3 : 2 + hidden / C;
  size_t per_token = 2 * C * std::max<size_t>({attention_units, mlp_units, 5});
  // Around the blocks: the fp32 input/output layers, the RoPE tables and the sampler's fp32
  // states; they are not alive at a block's worst point all at once, but close.
  per_token += 4 * (2 * static_cast<size_t>(c.in_channels) + 4 * c.out_channels) +
               4 * static_cast<size_t>(c.head_dim());
  size_t bytes = T * per_token;
  // One chunk's modulated input, hidden and fc2 output.
  if (chunked) bytes += static_cast<size_t>(kDefaultMlpChunkTokens) * 2 * (2 * C + hidden);
  // The condition and one block's K/V projection (plus its normalised K).
  bytes += BL * (2 * static_cast<size_t>(c.cond_channels) + 2 * 3 * C);
  // Allocator rounding and blocks reused at larger sizes: a quarter more, and 64 MiB.
  return bytes + bytes / 4 + (64u << 20);
}

size_t Transformer::reference_activation_bytes(int64_t tokens, int batch,
                                               int cond_tokens) const {
  const ModelConfig& c = config();
  const auto T = static_cast<size_t>(tokens);
  const auto C = static_cast<size_t>(c.model_channels);
  const size_t BL = static_cast<size_t>(batch) * static_cast<size_t>(cond_tokens);
  return T * 15 * 2 * C + BL * (2 * static_cast<size_t>(c.cond_channels) + 2 * 2 * C) +
         (64u << 20);
}

}  // namespace s3d::model
