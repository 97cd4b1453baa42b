// The dense family: TRELLIS.2's SparseStructureFlowModel (docs/DENSE_MODEL.md), the first stage
// of its image-to-3D pipeline. Its blocks, weights and checkpoint names are the trunk's; what
// differs is kept here:
//   - the layout: an asset is the whole R^3 grid in raster order (AssetLayout::Grid), so the
//     public API takes volumes [B, C, R, R, R] without coords, and coords, when given, must be
//     the grid's;
//   - the position tables: computed once per model on the host with the C library's
//     single-precision cos/sin (the original builds them on the CPU in its constructor) and
//     tiled per asset; RoPE always uses f0 = 1 and theta = 10000 (rope_freq is type-checked and
//     ignored); APE is added in fp32 before the input layer's one bf16 rounding;
//   - the sampler: guidance rescale divides by N - 1, and the default settings are TRELLIS.2's
//     sparse-structure sampler's;
//   - the config: at most a 64^3 grid, and no concat_cond.
// Every execution path of the trunk (fusions, batched CFG, null context, condition K/V cache,
// step tables, CUDA graphs) runs it unchanged.
#pragma once

#include "model/family.h"

namespace s3d::model {

class DenseFamily : public Family {
 public:
  std::string name() const override { return "SparseStructureFlowModel"; }
  std::vector<std::pair<std::string, ModelConfig>> presets() const override;
  AssetLayout layout() const override { return AssetLayout::Grid; }
  std::string sampler_preset() const override { return "released_sparse_structure"; }
  bool unbiased_rescale_std() const override { return true; }
  bool reads_rope_freq() const override { return false; }
  void check_config(const ModelConfig& c) const override;
  void check_coords(const ModelConfig& c, const Tensor& coords, int batch) const override;
  std::unique_ptr<Positions> positions(const ModelConfig& c, Device device) const override;
};

}  // namespace s3d::model
