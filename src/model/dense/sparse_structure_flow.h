// SparseStructureFlowModel: TRELLIS.2's dense sparse-structure flow transformer
// (docs/DENSE_MODEL.md), the first stage of its image-to-3D pipeline. Its blocks, weights and
// checkpoint names are the structured-latent model's, so it is that model run over every
// voxel of an R^3 grid, with what differs kept here:
//   - the layout: the tokens of one asset are the whole grid in raster order
//     n = i R^2 + j R + k (prepare checks that), and the public API converts the volume
//     [B, C, R, R, R] to and from those tokens (kernels/volume_layout.h);
//   - the position tables: computed once, at construction, on the host with the C library's
//     single-precision cos/sin (the original builds them on the CPU in its constructor), and
//     tiled per asset; RoPE always uses f0 = 1 and theta = 10000; APE is added in fp32 before
//     the input layer's one bf16 rounding;
//   - the sampler's guidance rescale divides by N - 1 (DenoiserSummary::unbiased_rescale_std).
// Every execution path of the structured-latent model (fusions, batched CFG, null context,
// condition K/V cache, step tables, CUDA graphs) runs it unchanged.
#pragma once

#include <cstdint>

#include "model/slat_flow.h"

namespace s3d::model {

class SparseStructureFlowModel : public SLatFlowModel {
 public:
  explicit SparseStructureFlowModel(Checkpoint checkpoint);

  DenoiserSummary summary() const override;
  // coords: the full grid of each of `batch` assets in raster order, i32 [B R^3, 4] on the
  // host (grid_coords); anything else is an error naming the first row that differs.
  // (prepare() runs these checks through check_request.)
  void check_request(const Tensor& coords, int batch, int cond_tokens,
                     const Tensor& concat_cond = Tensor()) const override;

  // i32 [B R^3, 4] on the host: rows (b, n / R^2, (n / R) mod R, n mod R).
  static Tensor grid_coords(int batch, int resolution);
  // The host-computed tables of one asset (R^3 rows), on the model's device: RoPE cos and
  // sin f32 [R^3, D / 2] (pe_mode "rope") or the APE f32 [R^3, C] ("ape"); undefined if not
  // used.
  const Tensor& rope_cos_table() const { return rope_cos_; }
  const Tensor& rope_sin_table() const { return rope_sin_; }
  const Tensor& ape_table() const { return ape_; }

 protected:
  void position_tables(Request& r) const override;

 private:
  Tensor rope_cos_, rope_sin_, ape_;
};

}  // namespace s3d::model
