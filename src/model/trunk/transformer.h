// Transformer: the trunk every model family runs (model/family.h), TRELLIS.2's flow
// transformer (docs/MODEL.md): input layer, adaLN-modulated blocks of self-attention,
// cross-attention to the condition and an MLP, output layer. It runs as the pure_eager path:
// one op per launch, in the order and at the rounding points of the PyTorch original, with the
// ops of the block that have faster candidates called through the op registry (ops/op.h).
// The same code runs on the CPU backend (tensors on the host) and on the GPU; only the device
// of the tensors differs. What a family changes (its layout, position tables, config and
// sampler rules) it says through its Family, which the trunk holds; the trunk has no branch on
// a family's name.
//
// Files: transformer.cpp (request, forward, modulation, the self-attention and MLP branches),
// cross_attention.cpp (the cross-attention branch, reference and null-context forms, and the
// condition's K/V), weights.{h,cpp} (the weights and their checkpoint names), request.{h,cpp}
// (the types one forward takes).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "core/tensor.h"
#include "model/checkpoint.h"
#include "model/config.h"
#include "model/family.h"
#include "model/trunk/request.h"
#include "model/trunk/weights.h"

namespace s3d::model {

class Transformer {
 public:
  // Binds the checkpoint's tensors to the model's weight fields once (weights.h) and builds
  // the family's position tables (the family is the checkpoint config's "name").
  explicit Transformer(Checkpoint checkpoint);

  const ModelConfig& config() const { return ck_.config; }
  const Family& family() const { return *family_; }
  const TrunkWeights& weights() const { return weights_; }

  ModelSummary summary() const;
  Device device() const { return device_; }
  // A content hash of the weights: results taken from them (null-context rows, qualification)
  // are valid only for the same version.
  uint64_t weights_version() const { return ck_.version; }
  // The weight format its linear layers are held in (ops/weight_format.h).
  const ops::WeightFormat& weight_format() const { return ck_.weight_format(); }

  // The step-invariant part of a request. coords: i32 [T, 4] on the host, assets packed in
  // batch order (validated: batch indices contiguous 0..B-1, coordinates in range, and the
  // family's own rule). concat_cond: host f32 [T, in - out] where the model takes one (the
  // texture models' shape latent), else undefined. null_assets: how many trailing assets the
  // null-context paths will mark as null (Condition::null_assets); 0 for pure_eager.
  Request prepare(const Tensor& coords, int batch, int cond_tokens,
                  const Tensor& concat_cond = Tensor(), int null_assets = 0) const;
  // prepare()'s checks alone: reads the coordinates and the shapes, allocates nothing and
  // needs no resident weights, so that a caller can refuse a request before any work on its
  // behalf (the engine runs it before the null-context probe and any allocation).
  void check_request(const Tensor& coords, int batch, int cond_tokens,
                     const Tensor& concat_cond = Tensor()) const;

  // One evaluation. x: f32 [T, out] noisy latent; t1000: f32 [B] (1000 * t); all on the
  // model's device. Returns the velocity, f32 [T, out]. Null assets need `null` (mode Exact or
  // Cache) and either all assets null or null_assets == req.null_assets; with none this is
  // pure_eager, except that cond.kv replaces the condition's K/V projection. mod: the blocks'
  // modulation for t1000, or null to compute it in the forward.
  Tensor forward(const Request& req, const Tensor& x, const Tensor& t1000, const Condition& cond,
                 const NullPath* null = nullptr, const Modulation* mod = nullptr) const;
  // The same with real condition tokens for every asset, bf16 [B, L, cond_channels] (the
  // unconditional branch's zero tensor included, as the original passes it).
  Tensor forward(const Request& req, const Tensor& x, const Tensor& t1000,
                 const Tensor& cond) const;

  // The t-only part of a forward over B = t1000.numel() assets: timestep embedding, the
  // t_embedder MLP, the shared adaLN (or each block's) and every block's modulation, with the
  // forward's ops and shapes.
  // `plan`: the request's op plan (its GEMMs are the `linear` op's).
  Modulation modulation(const ops::OpPlan& plan, const Tensor& t1000) const;
  // The same for a whole schedule, t1000 f32 [steps, rows], in one call (see ModulationTable).
  ModulationTable modulation_table(const ops::OpPlan& plan, const Tensor& t1000) const;

  // The condition-side transform of block `block` on cond2d bf16 [BL, cond_channels]: to_kv
  // ([BL, 2C], V in columns C..2C) and, with qk_rms_norm_cross, K's RMSNorm ([BL, H, D];
  // undefined otherwise). The reference forward, cond_kv_cache and the null-context probe
  // all call this.
  struct CrossKV {
    Tensor kv, k_normed;
  };
  CrossKV condition_kv(const ops::OpPlan& plan, int block, const Tensor& cond2d) const;
  // cond_kv_cache: condition_kv of every block for tokens bf16 [B, L, cond_channels].
  CondKV precompute_cond_kv(const ops::OpPlan& plan, const Tensor& tokens) const;

  // Bytes of device memory one forward over `tokens` tokens and `batch` assets needs beyond
  // the weights with these flags (an estimate from the shapes the block holds at its worst
  // point, a quarter more for the allocator; docs/CONTRACTS.md, "Memory").
  size_t activation_bytes(int64_t tokens, int batch, int cond_tokens,
                          const sparse3d::FlagSet& flags = {}) const;
  // What the original PyTorch module's eager forward allocates at its worst point for the
  // same request, one CFG branch at a time (TRELLIS.2's samplers call the model once per
  // branch): about fifteen bf16 [T, C]-sized tensors (the fp32 LayerNorm output counts two,
  // the MLP's hidden and its GELU four each), the condition and one block's K/V of it. The
  // per-token term is what PyTorch's allocated peak grew by per token in TRELLIS.2's pipeline
  // on the H200 (47 KB at C = 1536, 2026-12-01). EngineOptions::fit_to_reference holds the
  // plan's flags under it (docs/CONTRACTS.md, "Memory").
  size_t reference_activation_bytes(int64_t tokens, int batch, int cond_tokens) const;
  size_t weight_bytes() const;

  // Residency (the engine's offload and reload, docs/API.md "Residency"). offload_weights
  // copies the weights into a host copy (HostWeights: pinned on a GPU) the first time, binds
  // every weight tensor to it and frees the device buffer; reload_weights uploads the host
  // copy into a new device buffer in one copy and binds the weights to it. The values and
  // their alignment never change, and no tensor ever points at freed memory; the host copy
  // is kept after a reload, so a second offload frees the device buffer without copying.
  // Each returns the bytes it copied (0 when there was nothing to do). A forward needs the
  // weights resident: prepare() and forward() throw otherwise.
  size_t offload_weights();
  size_t reload_weights();
  bool weights_resident() const { return resident_; }
  // Whose memory the weights are (model/checkpoint.h, borrowed checkpoints): "own copy",
  // "borrowed in place" (the caller's device tensors; an offload makes an own host copy and
  // lets them go) or "borrowed host home" (uploaded from the caller's host tensors; an
  // offload frees the device buffer and copies nothing).
  const char* weights_source() const;
  // The engine's own host copy (none for a borrowed home, which is the caller's memory).
  size_t host_copy_bytes() const {
    return host_copy_ && !host_copy_->is_borrowed() ? host_copy_->bytes() : 0;
  }

 private:
  // Throws unless the forward's operands fit the request, the config and each other.
  void check_forward_operands(const Request& req, const Tensor& x, const Tensor& t1000,
                              const Condition& cond, const NullPath* null,
                              const Modulation* mod) const;
  // Its two parts: x, t and the modulation; the condition and the null-context
  // path.
  void check_step_operands(const Request& req, const Tensor& x, const Tensor& t1000,
                           const Modulation* mod) const;
  void check_condition_operands(const Request& req, const Condition& cond,
                                const NullPath* null) const;
  // Input layer (fp32, cast to bf16), plus the absolute position embedding in ape mode.
  Tensor embed_input(const Request& req, const Tensor& x) const;
  // Final LayerNorm (fp32, no affine) and the fp32 out_layer.
  Tensor output_layer(const ops::OpPlan& plan, const Tensor& h) const;

  // Block i: x + self-attention, + cross-attention, + MLP; mod is its bf16 [B, 6C].
  Tensor block(int i, const Request& req, Tensor x, const Tensor& mod,
               const Condition& cond, const NullPath* null) const;
  // x + gate_msa[b] * to_out(SDPA(q, k, v of to_qkv(modulated LayerNorm(x)))):
  // the two halves below around the attention (the sequence-parallel forward
  // runs them on each rank's rows, with the attention over all rows and a group
  // of heads between them).
  Tensor self_attention(const BlockWeights& w, const Request& req, const Tensor& x,
                        const Tensor& mod) const;
  // The attention's input: q | k | v, bf16 [T, 3C] (each [H, D] per row), after
  // the q/k RMSNorm and RoPE.
  Tensor attention_input(const BlockWeights& w, const Request& req, const Tensor& x,
                         const Tensor& mod) const;
  // x + gate_msa[b] * to_out(attn); attn: bf16 [T, C], released after to_out.
  Tensor attention_output(const BlockWeights& w, const Request& req, const Tensor& x, Tensor attn,
                          const Tensor& mod) const;
  // 1 / sqrt(head_dim), the self- and cross-attention's softmax scale.
  float attention_scale() const;
  // x + gate_mlp[b] * fc2(GELU(fc1(modulated LayerNorm(x)))); i for the request's mlp_probe.
  Tensor mlp(int i, const BlockWeights& w, const Request& req, const Tensor& x,
             const Tensor& mod) const;
  // The MLP over the rows of x (all of them, or one chunk with chunked_mlp), into `out`.
  void mlp_rows(int i, const BlockWeights& w, const Request& req, const Tensor& x,
                const Tensor& batch_index, const Tensor& mod, Tensor& out) const;
  // The cross-attention branch (cross_attention.cpp): returns x + CrossAttn(norm2(x)).
  Tensor cross_attention(int i, const Request& req, const Tensor& x, const Condition& cond,
                         const NullPath* null) const;
  Tensor cross_attention_null(int i, const Request& req, const Tensor& x, const Condition& cond,
                              const NullPath& null) const;
  // The conditional rows' attention output (before to_out) over the given layouts.
  void attend_condition(int i, const Request& req, const Tensor& x, const Condition& cond,
                        const attention::SeqLayout& q_layout,
                        const attention::SeqLayout& kv_layout, Tensor& attn) const;

  // Throws unless the weights are on the model's device (offload_weights moved them).
  void check_resident() const;
  // Binds the checkpoint's tensors and the typed weights to `tensors` (checked first: a
  // mismatch throws having changed nothing).
  void bind(std::map<std::string, Tensor> tensors);

  // The sequence-parallel forward (sequence_parallel.h) runs the stages above
  // on each rank.
  friend class SequenceParallel;

  Checkpoint ck_;
  const Family* family_;
  std::unique_ptr<Positions> positions_;
  TrunkWeights weights_;
  Device device_;
  std::optional<HostWeights> host_copy_;
  bool resident_ = true;
};

}  // namespace s3d::model
