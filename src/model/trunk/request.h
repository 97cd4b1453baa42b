// The types one evaluation of the trunk (model/trunk/transformer.h) takes: the request, the
// condition, the null-context path and the modulation. They are family-neutral: every family
// of TRELLIS.2 is an adaLN-modulated transformer with cross-attention to the condition tokens
// (model/family.h says what differs).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "attention/attention.h"
#include "core/tensor.h"
#include "ops/op.h"
#include "sparse3d/flags.h"

namespace s3d::model {

// Everything about a batch of assets that does not change across denoise steps, computed
// once per request (never per layer or per step).
// Rows per MLP chunk with chunked_mlp unless a Request says otherwise.
inline constexpr int64_t kDefaultMlpChunkTokens = 8192;

struct Request {
  int batch = 0;                 // B assets
  int64_t tokens = 0;            // T, all assets packed
  Tensor coords;                 // i32 [T, 4] on the model's device
  Tensor batch_index;            // i32 [T]
  Tensor token_offsets;          // i32 [B + 1]
  attention::SeqLayout tokens_layout;  // the B assets' token ranges
  attention::SeqLayout cond_layout;    // B ranges of cond_tokens condition rows
  int cond_tokens = 0;           // L
  Tensor rope_cos, rope_sin;     // f32 [T, D/2] (pe_mode "rope")
  // f32 [T, C]: a position embedding added to the input layer's fp32 output before its one
  // bf16 rounding (a family's Positions may set it: the dense family's APE); undefined
  // otherwise.
  Tensor position_f32;
  Tensor concat_cond;            // f32 [T, in - out] (texture models) or undefined
  // Symbolic null condition (null-context paths): the last `null_assets` assets of this
  // request have the null condition. The layouts of the conditional part, the first
  // B - null_assets assets, are made here once (only when 0 < null_assets < B).
  int null_assets = 0;
  int64_t cond_part_tokens = 0;                 // tokens of the conditional part
  attention::SeqLayout cond_part_tokens_layout;
  attention::SeqLayout cond_part_cond_layout;
  // The optimization flags of this request (none on = pure_eager) and the op plan resolved
  // from them once (ops/op.h): which candidates each op of the forward may try. Set both
  // with use_flags() after prepare (the sampler passes SamplerOptions::flags); the forward
  // refuses a request whose plan was resolved from other flags.
  sparse3d::FlagSet flags;
  ops::OpPlan ops;
  // `store`: where the searched GEMM and attention plans are kept (the engine's qualification
  // cache; null: nowhere but this process).
  void use_flags(const sparse3d::FlagSet& f, plan_search::Store* store = nullptr) {
    flags = f;
    ops = ops::OpPlan::resolve(f, store);
  }
  // Rows per MLP chunk with chunked_mlp: the hidden [rows, 4C] of one chunk is 72 MiB at
  // C = 1536, and fc1/fc2 at M = 8192 still run near the GEMM peak. Tests set it small.
  int64_t mlp_chunk_tokens = kDefaultMlpChunkTokens;
  // Diagnostics only (the per-layer gemm_gelu_epilogue check): called with each block's MLP
  // input (bf16 [T, C], the modulated LayerNorm output) before fc1. Empty in production.
  std::function<void(int block, const Tensor& mlp_in)> mlp_probe;
};

// The condition of one forward. pure_eager passes real tokens for every asset, the
// unconditional branch's zero tensor included, as the original does. The null-context paths
// mark the unconditional assets instead: the last `null_assets` assets have the null
// (all-zero) condition, and no tensor is made, projected or attended to for them.
struct CondKV;
struct Condition {
  Tensor tokens;                // bf16 [B - null_assets, L, cond_channels]; undefined if all null
  int null_assets = 0;
  const CondKV* kv = nullptr;   // cond_kv_cache: to_kv (and K RMSNorm) of `tokens`, precomputed
};

// Step-invariant condition-side K/V (flag cond_kv_cache), per block: to_kv's output
// [BL, 2C] (K in the first C columns, V in the second); with qk_rms_norm_cross the
// RMS-normalised K [BL, H, D] and only the V half of to_kv's output, copied to its own
// [BL, C] (the raw K half is never read again, so it is not kept). The attention then reads V
// at row stride C instead of the reference's 2C: same values, same graph otherwise; the GPU
// tests hold the flag to bitwise equality with the reference.
// Memory: blocks x BL x 2C bf16: for the full preset (30 blocks, C = 1536) and one asset with
// L = 4101, 756 MB (1.13 GB before the raw K half was dropped).
struct CondKV {
  std::vector<Tensor> kv;        // bf16 [BL, 2C] per block; [BL, C] (V only) with k_normed
  std::vector<Tensor> k_normed;  // bf16 [BL, H, D] per block, or empty
  size_t bytes() const;
};

// How a forward runs the cross-attention of the null-condition assets.
//   Exact: not run; its output rows are v0 (value_rows), projected by to_out at the
//          reference shape ([T, C] including the conditional rows in batched CFG).
//   Cache: not run and not projected; x += c (cached_rows), broadcast over the rows.
enum class NullContextMode { Reference, Exact, Cache };
struct NullPath {
  NullContextMode mode = NullContextMode::Reference;
  std::vector<Tensor> rows;  // per block, bf16 [1, C]: v0_i (Exact) or c_i (Cache)
};

// Everything of a forward that depends on the timestep alone: each block's modulation,
// bf16 [B, 6C] (shift, scale, gate of the attention and the MLP branch). The forward
// computes it from t unless given one (flag step_tables: the sampler computes every step's
// once per request, at the forward's own shapes, so the bits are the forward's).
struct Modulation {
  std::vector<Tensor> blocks;
  // Views of one buffer bf16 [num_blocks * rows, 6C] laid out block by block, `rows` rows
  // each: block i is rows [i * rows, i * rows + used) (used <= rows: serial CFG's forwards
  // read the first B of a step's 2B rows).
  static Modulation view(const Tensor& buffer, int num_blocks, int rows, int used);
};

// Every step's modulation (flag step_tables), computed before the loop in one call of the
// t-side ops over all steps' rows at once (the three t-side GEMMs see M = steps x rows), then
// laid out step by step so that one step's whole modulation is one contiguous buffer: a
// CUDA graph reads it from a fixed buffer that one copy per replay refills.
struct ModulationTable {
  Tensor storage;  // bf16 [steps, num_blocks * rows * 6C]
  int num_blocks = 0, rows = 0;
  int64_t width = 0;  // 6C

  int steps() const { return storage.defined() ? static_cast<int>(storage.size(0)) : 0; }
  // Step k's buffer, bf16 [num_blocks * rows, 6C] (a view of storage).
  Tensor step_buffer(int k) const;
  Modulation step(int k, int used) const {
    return Modulation::view(step_buffer(k), num_blocks, rows, used);
  }
};

// What a sampler needs to know of a model without knowing its family.
struct ModelSummary {
  std::string family;     // the checkpoint config's "name" (model/family.h)
  int in_channels = 0;    // x's channels plus concat_cond's
  int out_channels = 0;   // x's and the velocity's channels
  int cond_channels = 0;  // channels of a condition token
  // Guidance rescale's per-asset standard deviation: unbiased (N - 1) or population (N), the
  // family's rule (Family::unbiased_rescale_std).
  bool unbiased_rescale_std = false;
};

}  // namespace s3d::model
