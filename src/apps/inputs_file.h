// `sparse3d run --inputs FILE.safetensors`: one request's inputs from a user's own file
// instead of the synthetic payload manifest (docs/CLI.md, "Inputs file"). Tensors by name:
//   coords       i32 [N, 4]: (batch, x, y, z) rows, as TRELLIS.2's SparseTensor coords
//                (SLatFlowModel only; a SparseStructureFlowModel's tokens are its whole grid)
//   cond         f32 or bf16 [L, C] or [B, L, C]: the image condition
//   concat_cond  f32 or bf16 [N, Cc]: texture models' shape latent (only for them)
//   noise        f32 or bf16, optional: [N, out] (SLat) or [B, out, R, R, R] (dense);
//                absent: drawn from the seed as the engine draws it
// The same names and layouts as SampleRequest (include/sparse3d/engine.h) takes them.
#pragma once

#include <cstdint>
#include <string>

#include "core/tensor.h"
#include "sparse3d/engine.h"

namespace s3d::apps {

// The most bytes one tensor of an inputs file may hold: 2 GiB, some 60 released conditions
// in f32. A larger one is refused from the header, before anything is allocated or read.
inline constexpr uint64_t kMaxInputsTensorBytes = uint64_t{2} << 30;

struct InputsFile {
  std::string path;    // as given
  std::string name;    // the file name without its extension: the output's name
  Tensor coords;       // i32 [N, 4], host; undefined for the dense model
  Tensor cond;         // f32 or bf16 [B, L, C], host (a stored [L, C] is [1, L, C])
  Tensor concat_cond;  // f32 [N, Cc], host, or undefined
  Tensor noise;        // f32, host, as stored; undefined: drawn from the seed
  int batch = 1;       // B: cond's first dimension
};

// Reads FILE and checks what does not depend on the model: only known tensor names, each
// tensor's dtype and rank, shapes that agree with each other (N, B), finite values, and the
// coordinates' batch layout (rows of one asset contiguous, assets 0..B-1 in order,
// non-negative). Every error is one s3d::Error naming the file and the tensor.
InputsFile read_inputs(const std::string& path);

// The checks against the loaded model: coords present exactly for a SLatFlowModel, the
// condition's channels, concat_cond exactly for a model with in > out channels, the noise's
// shape.
void check_inputs(const InputsFile& in, const sparse3d::ModelInfo& model);

}  // namespace s3d::apps
