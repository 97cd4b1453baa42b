// SLatFlowModel: the TRELLIS.2 structured-latent flow transformer (docs/MODEL.md), run as
// the pure_eager path: one op per launch, in the order and at the rounding points of the
// PyTorch original, with the fused kernels behind each op family's entry point
// (kernels/fused_*.h, gemm/linear_gelu.h). The same code runs on the CPU backend (tensors on
// the host) and on the GPU; only the device of the tensors differs.
//
// Files: slat_flow.cpp (request, forward, modulation, the self-attention and MLP branches),
// cross_attention.cpp (the cross-attention branch, reference and null-context forms, and the
// condition's K/V), slat_flow_weights.{h,cpp} (the weights and their checkpoint names).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/tensor.h"
#include "model/checkpoint.h"
#include "model/config.h"
#include "model/denoiser.h"
#include "model/slat_flow_weights.h"

namespace s3d::model {

class SLatFlowModel : public Denoiser {
 public:
  // Binds the checkpoint's tensors to the model's weight fields once (slat_flow_weights.h).
  explicit SLatFlowModel(Checkpoint checkpoint);

  const ModelConfig& config() const { return ck_.config; }
  const SLatFlowWeights& weights() const { return weights_; }

  // Denoiser (denoiser.h). prepare validates coordinates against the config's resolution;
  // concat_cond is the texture models' shape latent.
  DenoiserSummary summary() const override;
  Device device() const override { return device_; }
  uint64_t weights_version() const override { return ck_.version; }
  Request prepare(const Tensor& coords, int batch, int cond_tokens,
                  const Tensor& concat_cond = Tensor(), int null_assets = 0) const override;
  void check_request(const Tensor& coords, int batch, int cond_tokens,
                     const Tensor& concat_cond = Tensor()) const override;
  using Denoiser::forward;
  Tensor forward(const Request& req, const Tensor& x, const Tensor& t1000, const Condition& cond,
                 const NullPath* null = nullptr, const Modulation* mod = nullptr) const override;

  // The t-only part of a forward over B = t1000.numel() assets: timestep embedding, the
  // t_embedder MLP, the shared adaLN (or each block's) and every block's modulation, with the
  // forward's ops and shapes.
  Modulation modulation(const Tensor& t1000) const;
  // The same for a whole schedule, t1000 f32 [steps, rows], in one call (see ModulationTable).
  ModulationTable modulation_table(const Tensor& t1000) const;

  // The condition-side transform of block `block` on cond2d bf16 [BL, cond_channels]: to_kv
  // ([BL, 2C], V in columns C..2C) and, with qk_rms_norm_cross, K's RMSNorm ([BL, H, D];
  // undefined otherwise). The reference forward, cond_kv_cache and the null-context probe
  // all call this.
  struct CrossKV {
    Tensor kv, k_normed;
  };
  CrossKV condition_kv(int block, const Tensor& cond2d) const;
  // cond_kv_cache: condition_kv of every block for tokens bf16 [B, L, cond_channels].
  CondKV precompute_cond_kv(const Tensor& tokens) const;

  // Bytes of device memory one forward over `tokens` tokens and `batch` assets needs beyond
  // the weights with these flags (an estimate from the shapes the block holds at its worst
  // point, a quarter more for the allocator; docs/CONTRACTS.md, "Memory").
  size_t activation_bytes(int64_t tokens, int batch, int cond_tokens,
                          const sparse3d::FlagSet& flags = {}) const;
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
  size_t host_copy_bytes() const { return host_copy_ ? host_copy_->bytes() : 0; }

 protected:
  // The request's position tables from its coordinates (prepare's last step): the RoPE
  // cos/sin on the model's device (pe_mode "rope"; nothing for "ape", which the input layer
  // computes). The dense family overrides it with tables computed once on the host.
  virtual void position_tables(Request& r) const;

 private:
  // Throws unless the forward's operands fit the request, the config and each other.
  void check_forward_operands(const Request& req, const Tensor& x, const Tensor& t1000,
                              const Condition& cond, const NullPath* null,
                              const Modulation* mod) const;
  // Input layer (fp32, cast to bf16), plus the absolute position embedding in ape mode.
  Tensor embed_input(const Request& req, const Tensor& x) const;
  // Final LayerNorm (fp32, no affine) and the fp32 out_layer.
  Tensor output_layer(const Tensor& h) const;

  // Block i: x + self-attention, + cross-attention, + MLP; mod is its bf16 [B, 6C].
  Tensor block(int i, const Request& req, Tensor x, const Tensor& mod,
               const Condition& cond, const NullPath* null) const;
  // x + gate_msa[b] * to_out(SDPA(q, k, v of to_qkv(modulated LayerNorm(x)))).
  Tensor self_attention(const BlockWeights& w, const Request& req, const Tensor& x,
                        const Tensor& mod) const;
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

  Checkpoint ck_;
  SLatFlowWeights weights_;
  Device device_;
  std::optional<HostWeights> host_copy_;
  bool resident_ = true;
};

}  // namespace s3d::model
