// SLatFlowModel: the TRELLIS.2 structured-latent flow transformer (MODEL_SPEC.md), run as
// the pure_eager path: one op per launch, in the order and at the rounding points of the
// PyTorch original. The same code runs on the CPU backend (tensors on the host) and on the
// GPU; only the device of the tensors differs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "attention/attention.h"
#include "core/tensor.h"
#include "model/checkpoint.h"
#include "model/config.h"

namespace s3d::model {

// Everything about a batch of assets that does not change across denoise steps, computed
// once per request (never per layer or per step).
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
  Tensor concat_cond;            // f32 [T, in - out] (texture models) or undefined
};

class SLatFlowModel {
 public:
  explicit SLatFlowModel(Checkpoint checkpoint);

  const ModelConfig& config() const { return ck_.config; }
  Device device() const { return device_; }
  uint64_t weights_version() const { return ck_.version; }

  // coords: i32 [T, 4] on the host, assets packed in batch order (validated here: batch
  // indices contiguous 0..B-1, coordinates in [0, resolution)). concat_cond: host f32
  // [T, in - out] for texture models, else undefined.
  Request prepare(const Tensor& coords, int batch, int cond_tokens,
                  const Tensor& concat_cond = Tensor()) const;

  // One denoiser evaluation. x: f32 [T, out] noisy latent; t1000: f32 [B] (1000 * t);
  // cond: bf16 [B, L, cond_channels]. All on the model's device. Returns f32 [T, out].
  Tensor forward(const Request& req, const Tensor& x, const Tensor& t1000,
                 const Tensor& cond) const;

  // Bytes of device memory one forward over `tokens` tokens and `batch` assets needs beyond
  // the weights (an upper bound from the shapes of the eager path).
  size_t activation_bytes(int64_t tokens, int batch, int cond_tokens) const;
  size_t weight_bytes() const;

 private:
  Tensor block(int i, const Request& req, const Tensor& x, const Tensor& mod_shared,
               const Tensor& t_emb_bf16, const Tensor& cond2d) const;
  const Tensor& w(const std::string& name) const;

  Checkpoint ck_;
  Device device_;
};

}  // namespace s3d::model
