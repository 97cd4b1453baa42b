#include "model/slat/slat_family.h"

namespace s3d::model {
namespace {

// RoPE from each request's coordinates; nothing for "ape" (the trunk embeds the coordinates).
class CoordinateRope : public Positions {
 public:
  explicit CoordinateRope(const ModelConfig& c) : c_(c) {}
  void apply(Request& r) const override {
    if (c_.pe_mode != "rope") return;
    RopeTables t = rope_tables(r.coords, c_.head_dim(), static_cast<float>(c_.rope_freq0),
                               static_cast<float>(c_.rope_theta));
    r.rope_cos = std::move(t.cos);
    r.rope_sin = std::move(t.sin);
  }

 private:
  ModelConfig c_;
};

}  // namespace

std::vector<std::pair<std::string, ModelConfig>> SLatFamily::presets() const {
  ModelConfig shape;  // ModelConfig's defaults are TRELLIS.2's 1024 shape model
  shape.family = name();
  ModelConfig texture = shape;
  texture.in_channels = 64;  // noisy latent 32 + shape latent 32
  ModelConfig tiny = shape;
  tiny.model_channels = 128;
  tiny.num_blocks = 2;
  tiny.num_heads = 2;
  tiny.mlp_ratio = 4.0;
  tiny.cond_channels = 64;
  return {{"trellis2-shape-1024", shape}, {"trellis2-tex-1024", texture}, {"tiny", tiny}};
}

std::unique_ptr<Positions> SLatFamily::positions(const ModelConfig& c, Device) const {
  return std::make_unique<CoordinateRope>(c);
}

}  // namespace s3d::model
