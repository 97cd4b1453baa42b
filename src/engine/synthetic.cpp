// Synthetic checkpoints (include/sparse3d/synthetic.h) over the model layer's writer.
#include "sparse3d/synthetic.h"

#include <filesystem>

#include "core/error.h"
#include "model/checkpoint.h"
#include "model/config.h"
#include "model/trunk/weights.h"

namespace sparse3d {

std::vector<std::string> synthetic_presets() { return s3d::model::preset_names(); }

SyntheticCheckpoint make_synthetic_checkpoint(const std::string& preset, uint64_t seed,
                                              const std::string& out_prefix, DType dtype) {
  S3D_CHECK(!out_prefix.empty(), "make_synthetic_checkpoint: the output prefix is empty");
  // "DIR/" would write DIR/.json and DIR/.safetensors: hidden files, not a checkpoint.
  const std::string name = std::filesystem::path(out_prefix).filename().string();
  S3D_CHECK(!name.empty() && name != "." && name != "..", "make_synthetic_checkpoint: ",
            out_prefix, " names a folder; give a prefix DIR/NAME (NAME.json and "
            "NAME.safetensors are written)");
  S3D_CHECK(dtype == DType::BF16 || dtype == DType::F32,
            "make_synthetic_checkpoint: dtype must be bf16 or f32, got ", s3d::dtype_name(dtype));
  const s3d::model::ModelConfig config = s3d::model::preset(preset);
  s3d::model::make_checkpoint(config, seed, out_prefix, dtype);
  SyntheticCheckpoint out;
  out.json_path = out_prefix + ".json";
  out.safetensors_path = out_prefix + ".safetensors";
  out.family = config.family;
  out.parameters = s3d::model::parameter_count(config);
  return out;
}

int64_t synthetic_parameter_count(const std::string& preset) {
  return s3d::model::parameter_count(s3d::model::preset(preset));
}

}  // namespace sparse3d
