// Checkpoints in the released TRELLIS.2 format: NAME.json (config) + NAME.safetensors.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "model/config.h"
#include "ops/weight_format.h"

namespace s3d::model {

struct Checkpoint {
  ModelConfig config;
  std::map<std::string, Tensor> tensors;  // by checkpoint name, run-time dtype, on `device`
  std::string path;                       // the .json it was read from
  uint64_t version = 0;  // content hash of the tensors read (a reload of other weights changes it)
  // On a GPU: one allocation holding every tensor (`tensors` are views into it).
  Tensor arena;
  // Borrowed weights (checkpoint_borrowed): the caller's memory, kept alive by `keep_alive`.
  // On the host, `home` holds views of them: what an engine on a GPU uploads from and an
  // offload returns to, nothing copied; on the engine's GPU, `tensors` are the caller's own
  // (in place) and `home` is empty.
  std::shared_ptr<void> keep_alive;
  std::map<std::string, Tensor> home;
  bool borrowed = false;           // checkpoint_borrowed made it: the tensors are the caller's
  bool borrowed_in_place = false;
  // The weight format of its linear layers (apply_weight_format; null: plain, the
  // checkpoint's tensors as read).
  const ops::WeightFormat* format = nullptr;
  const ops::WeightFormat& weight_format() const {
    return format != nullptr ? *format : ops::plain_format();
  }
};

// NAME.json -> NAME.safetensors beside it. Keys are checked strictly against param_specs:
// one error lists every missing, unexpected and mis-shaped tensor. bf16, f16 and f32
// files load; each tensor is converted to its run-time dtype and moved to `device`.
Checkpoint load_checkpoint(const std::string& json_path, Device device);
// Puts the linear layers that `format` takes into it (ops/weight_format.h): on the host,
// before the upload, each layer's checkpoint tensors are replaced by the format's run-time
// tensors, and the version changes with the format's name (so nothing qualified for one
// format's weights is taken for another's). Plain changes nothing. Not for a borrowed
// checkpoint (its tensors are the caller's, not converted copies).
void apply_weight_format(Checkpoint& ck, const ops::WeightFormat& format);

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

// A checkpoint over the caller's tensors without a copy of them (InMemoryCheckpoint::borrow,
// include/sparse3d/engine.h): `tensors` are views (Tensor::borrow) of host or device memory
// that `keep_alive` holds, every one already in its run-time dtype. The same strict check,
// finite check and content hash as checkpoint_from_memory (device tensors are read through a
// bounded host buffer for it); the result's tensors are those views.
struct BorrowedTensor {
  std::string name;
  Tensor view;
};
Checkpoint checkpoint_borrowed(const std::string& config_json, const std::string& what,
                               const std::vector<BorrowedTensor>& tensors,
                               std::shared_ptr<void> keep_alive);
// Empty when `tensors` can be borrowed as the weights of `config`; else why not (a tensor in
// another dtype than its run-time one, which needs a conversion, hence a copy).
std::string borrow_refusal(const ModelConfig& config, const std::vector<BorrowedTensor>& tensors);

// Writes OUT.json and OUT.safetensors with deterministic synthetic weights (trunk/weights.h),
// stored as `dtype` (bf16 like the released files, or f32).
void make_checkpoint(const ModelConfig& config, uint64_t seed, const std::string& out_prefix,
                     DType dtype);

}  // namespace s3d::model
