// The structured-latent family: TRELLIS.2's SLatFlowModel (docs/MODEL.md), the shape and
// texture flow models of every cascade stage. Its assets are the active voxels a caller names
// (coords [T, 4]); RoPE phases come from those coordinates with the config's rope_freq, on the
// model's device, per request; "ape" adds the trunk's embedding of the coordinates after the
// input layer's bf16 rounding; texture models take the shape latent as concat_cond.
#pragma once

#include "model/family.h"

namespace s3d::model {

class SLatFamily : public Family {
 public:
  std::string name() const override { return "SLatFlowModel"; }
  std::vector<std::pair<std::string, ModelConfig>> presets() const override;
  std::unique_ptr<Positions> positions(const ModelConfig& c, Device device) const override;
};

}  // namespace s3d::model
