// The weights of an SLatFlowModel as typed fields, and the one place that knows their
// checkpoint names (the released TRELLIS.2 state-dict keys), shapes, run-time dtypes and
// synthetic initialisation. param_specs (what the loader checks a checkpoint against and what
// make-checkpoint writes) and bind_weights (the model's fields, bound once at load) walk the
// same list, so every name is written once.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "model/config.h"

namespace s3d::model {

// How make-checkpoint fills a tensor: value = mean + std * N(0, 1).
struct Init {
  float mean = 0.0f;
  float std = 0.0f;
};

struct ParamSpec {
  std::string name;
  Shape shape;
  DType runtime_dtype;  // bf16 for the Linear layers inside blocks, f32 for everything else
  Init init;
};

// y = x W^T + b: weight [out, in], bias [out] (undefined: no bias).
struct Linear {
  Tensor weight;
  Tensor bias;
  const Tensor* bias_or_null() const { return bias.defined() ? &bias : nullptr; }
};

// Affine LayerNorm parameters, f32 [C] each.
struct LayerNormAffine {
  Tensor weight;
  Tensor bias;
};

struct SelfAttentionWeights {
  Linear to_qkv;       // bf16 [3C, C]
  Tensor q_rms_gamma;  // f32 [H, D] with qk_rms_norm, else undefined
  Tensor k_rms_gamma;
  Linear to_out;       // bf16 [C, C]
};

struct CrossAttentionWeights {
  Linear to_q;         // bf16 [C, C]
  Linear to_kv;        // bf16 [2C, cond_channels]: K rows first, then V
  Tensor q_rms_gamma;  // f32 [H, D] with qk_rms_norm_cross, else undefined
  Tensor k_rms_gamma;
  Linear to_out;       // bf16 [C, C]
};

struct MlpWeights {
  Linear fc1;  // bf16 [hidden, C], GELU-tanh after it
  Linear fc2;  // bf16 [C, hidden]
};

struct BlockWeights {
  Tensor modulation;        // share_mod: f32 [6C], added to the shared adaLN output
  Linear adaLN_modulation;  // otherwise: the block's own adaLN, bf16 [6C, C]
  SelfAttentionWeights self_attn;
  LayerNormAffine norm2;    // the cross-attention's input norm (the only affine one)
  CrossAttentionWeights cross_attn;
  MlpWeights mlp;
};

struct SLatFlowWeights {
  Linear t_embedder_fc1;    // f32 [C, 256] on the sinusoidal timestep features
  Linear t_embedder_fc2;    // f32 [C, C], SiLU between
  Linear adaLN_modulation;  // share_mod: the shared adaLN, f32 [6C, C]; else undefined
  Linear input_layer;       // f32 [C, in_channels]
  std::vector<BlockWeights> blocks;
  Linear out_layer;         // f32 [out_channels, C]
};

// Every tensor of a checkpoint for `config`, in the checkpoint's order (the order the loader
// hashes them in for weights_version and make-checkpoint writes them in).
std::vector<ParamSpec> param_specs(const ModelConfig& config);
int64_t parameter_count(const ModelConfig& config);

// The typed weights of `config` from a loaded checkpoint's tensors (by name, shared, not
// copied). Throws naming the first tensor that is missing or has another shape or dtype.
SLatFlowWeights bind_weights(const ModelConfig& config,
                             const std::map<std::string, Tensor>& tensors);

}  // namespace s3d::model
