// Checkpoints in the released TRELLIS.2 format: NAME.json (config) + NAME.safetensors.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "model/config.h"

namespace s3d::model {

struct Checkpoint {
  ModelConfig config;
  std::map<std::string, Tensor> tensors;  // by checkpoint name, run-time dtype, on `device`
  std::string path;                       // the .json it was read from
  uint64_t version = 0;  // content hash of the tensors read (a reload of other weights changes it)
  // On a GPU: one allocation holding every tensor (`tensors` are views into it).
  Tensor arena;
};

// NAME.json -> NAME.safetensors beside it. Keys are checked strictly against param_specs:
// one error lists every missing, unexpected and mis-shaped tensor. bf16, f16 and f32
// files load; each tensor is converted to its run-time dtype and moved to `device`.
Checkpoint load_checkpoint(const std::string& json_path, Device device);
// The two halves of load_checkpoint: everything on the host (config, strict check, read,
// convert, hash), then the upload. An engine overlaps the first with CUDA's start-up.
Checkpoint read_checkpoint(const std::string& json_path);
Checkpoint to_device(Checkpoint host, Device device);

// A tensor handed over in memory (a PyTorch module's state dict): host bytes stored as a
// file dtype ("BF16", "F16" or "F32").
struct TensorBytes {
  std::string name;
  std::string dtype;
  Shape shape;
  const void* data = nullptr;
};
// read_checkpoint for a checkpoint held in memory: `config_json` is the NAME.json text; the
// same strict check, conversion and content hash (a file and its state dict hash alike).
// `what` names it in messages.
Checkpoint checkpoint_from_memory(const std::string& config_json, const std::string& what,
                                  const std::vector<TensorBytes>& tensors);

// Writes OUT.json and OUT.safetensors with deterministic synthetic weights (trunk/weights.h),
// stored as `dtype` (bf16 like the released files, or f32).
void make_checkpoint(const ModelConfig& config, uint64_t seed, const std::string& out_prefix,
                     DType dtype);

}  // namespace s3d::model
