// Model configuration: a TRELLIS.2 checkpoint's NAME.json, {"name": family, "args": {...}}, and
// the built-in presets. "name" picks the model family (model/family.h: the registry decides
// which names exist); the args are the trunk's, shared by every family. Unknown keys and values
// of the wrong type or range are errors.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "io/json.h"

namespace s3d::model {

struct ModelConfig {
  std::string family = "SLatFlowModel";  // a registered family's name (model/family.h)
  int resolution = 64;
  int in_channels = 32;
  int model_channels = 1536;
  int cond_channels = 1024;
  int out_channels = 32;
  int num_blocks = 30;
  int num_heads = 12;
  double mlp_ratio = 5.3334;
  std::string pe_mode = "rope";  // "rope" or "ape"
  // A family that does not read rope_freq (Family::reads_rope_freq) has 1 and 10000 here,
  // whatever the file says.
  double rope_freq0 = 1.0;
  double rope_theta = 10000.0;
  bool share_mod = true;
  bool qk_rms_norm = true;
  bool qk_rms_norm_cross = true;
  std::string initialization = "scaled";
  std::string dtype = "bfloat16";  // run-time dtype of the blocks' Linear layers

  // Cells of the resolution^3 grid: the tokens of one asset of a grid-layout family.
  int64_t grid_tokens() const { return int64_t(resolution) * resolution * resolution; }
  int head_dim() const { return model_channels / num_heads; }
  int mlp_hidden() const { return static_cast<int>(model_channels * mlp_ratio); }
  // Throws if the combination cannot run (heads not dividing channels, odd head dim, ...) or
  // the family is unknown or refuses it (Family::check_config).
  void validate() const;
};

// A preset of any registered family (Family::presets): "trellis2-shape-1024",
// "trellis2-tex-1024", "tiny" (SLatFlowModel); "trellis2-ss-16", "tiny-ss"
// (SparseStructureFlowModel). Throws naming the known presets.
ModelConfig preset(const std::string& name);
std::vector<std::string> preset_names();

// {"name": family, "args": {...}} as in the released NAME.json files.
ModelConfig config_from_json(const io::Json& j, const std::string& what);
io::Json config_to_json(const ModelConfig& c);
ModelConfig read_config_file(const std::string& path);

}  // namespace s3d::model
