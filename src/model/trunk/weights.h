// The weights of the trunk (every family shares them) as typed fields, and the one place that knows their
// checkpoint names (the released TRELLIS.2 state-dict keys), shapes, run-time dtypes and
// synthetic initialisation. param_specs (what the loader checks a checkpoint against and what
// make-checkpoint writes) and bind_weights (the model's fields, bound once at load) walk the
// same list, so every name is written once.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "model/config.h"
#include "ops/weight_format.h"

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

// y = x W^T + b: a linear layer's run-time tensors in its weight format (ops/weight_format.h;
// plain: weight [out, in], bias [out]), applied by ops::linear(plan, x, layer, y).
using Linear = ops::LinearWeights;

// A linear layer of the checkpoint: NAME.weight [out, in] and NAME.bias [out], both `dtype`
// at run time.
struct LinearSpec {
  std::string name;
  int64_t out = 0, in = 0;
  DType dtype = DType::F32;
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

struct TrunkWeights {
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

// Every linear layer of a checkpoint for `config`, in the checkpoint's order.
std::vector<LinearSpec> linear_specs(const ModelConfig& config);

// The typed weights of `config` from a loaded checkpoint's tensors (by name, shared, not
// copied), each linear layer by the layout of its format (format_for(format, its dtype)).
// Throws naming the first tensor that is missing or has another shape or dtype.
TrunkWeights bind_weights(const ModelConfig& config, const std::map<std::string, Tensor>& tensors,
                          const ops::WeightFormat& format = ops::plain_format());

// A host copy of a model's tensors in one buffer, for the engine's offload and reload
// (docs/API.md, "Residency"). Pinned (page-locked) when the tensors live on a GPU, so that
// each move is a copy at the bus's speed; ordinary host memory on the CPU backend, where the
// same moves run between host buffers. Every tensor sits at a 256-byte aligned offset, as
// the upload lays a checkpoint out (model/checkpoint.cpp): a weight keeps its alignment, and
// with it the cuBLASLt plans chosen for it, wherever it moves. The weights never change, so
// one copy serves every later reload.
class HostWeights {
 public:
  // Copies every tensor (on the host, or on the current context's device) into a new buffer;
  // synchronous. Throws on a failed allocation or copy, having changed nothing.
  HostWeights(const std::map<std::string, Tensor>& tensors, bool pinned);
  // The caller's host tensors as the copy, nothing copied (a borrowed checkpoint's home,
  // model/checkpoint.h): `keep_alive` holds them. With `gpu`, each tensor of 1 MiB or more
  // that is not page-locked already is registered with CUDA in place (cudaHostRegister) while
  // this object lives, so that an upload runs at the bus's speed; one that cannot be is
  // copied through the driver's staging instead (slower, same bytes).
  static HostWeights borrowed(const std::map<std::string, Tensor>& tensors,
                              std::shared_ptr<void> keep_alive, bool gpu);
  bool is_borrowed() const { return borrowed_; }

  size_t bytes() const { return bytes_; }  // the buffer: the tensors and their alignment gaps
  // The tensors as views into the host copy (valid while this object lives).
  std::map<std::string, Tensor> host_views() const;
  // A new buffer of bytes() on `device` (the current context's allocator on a GPU), filled
  // from the host copy in one synchronous copy, and the tensors as views into it.
  std::pair<Tensor, std::map<std::string, Tensor>> upload(Device device) const;

 private:
  struct Slot {
    size_t offset = 0;
    Shape shape;
    DType dtype = DType::F32;
  };
  std::map<std::string, Tensor> views_at(char* base, Device device) const;

  HostWeights() = default;

  std::map<std::string, Slot> slots_;
  size_t bytes_ = 0;
  std::shared_ptr<void> buffer_;  // freed by cudaFreeHost or host_release
  // Borrowed: each tensor's own host memory (the caller's), and what keeps it alive and
  // undoes the in-place registrations.
  bool borrowed_ = false;
  std::map<std::string, const void*> sources_;
  std::shared_ptr<void> keep_alive_;
};

}  // namespace s3d::model
