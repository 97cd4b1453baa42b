// SLatFlowModel configuration: the "args" of a TRELLIS.2 checkpoint's NAME.json, and the
// built-in presets. Unknown keys and values of the wrong type or range are errors.
#pragma once

#include <string>
#include <vector>

#include "io/json.h"

namespace s3d::model {

struct ModelConfig {
  int resolution = 64;
  int in_channels = 32;
  int model_channels = 1536;
  int cond_channels = 1024;
  int out_channels = 32;
  int num_blocks = 30;
  int num_heads = 12;
  double mlp_ratio = 5.3334;
  std::string pe_mode = "rope";  // "rope" or "ape"
  double rope_freq0 = 1.0;
  double rope_theta = 10000.0;
  bool share_mod = true;
  bool qk_rms_norm = true;
  bool qk_rms_norm_cross = true;
  std::string initialization = "scaled";
  std::string dtype = "bfloat16";  // run-time dtype of the blocks' Linear layers

  int head_dim() const { return model_channels / num_heads; }
  int mlp_hidden() const { return static_cast<int>(model_channels * mlp_ratio); }
  // Throws if the combination cannot run (heads not dividing channels, odd head dim, ...).
  void validate() const;
};

// "trellis2-shape-1024", "trellis2-tex-1024", "tiny". Throws naming the known presets.
ModelConfig preset(const std::string& name);
std::vector<std::string> preset_names();

// {"name": "SLatFlowModel", "args": {...}} as in the released NAME.json files.
ModelConfig config_from_json(const io::Json& j, const std::string& what);
io::Json config_to_json(const ModelConfig& c);
ModelConfig read_config_file(const std::string& path);

}  // namespace s3d::model
