#include "model/params.h"

#include <cmath>

namespace s3d::model {
namespace {

// Synthetic weights follow the "scaled" initialisation of the original, except that the
// layers it zero-initialises (adaLN, out_layer, every bias) get small random values: with
// zeros every test would pass trivially, and the null-context row b_V W_O + b_O would vanish.
constexpr float kBiasStd = 0.02f;
constexpr float kGammaStd = 0.1f;  // RMSNorm gammas and norm2 weight: 1 + N(0, 0.1)

}  // namespace

std::vector<ParamSpec> param_specs(const ModelConfig& c) {
  c.validate();
  const int64_t C = c.model_channels, H = c.num_heads, D = c.head_dim();
  const int64_t hidden = c.mlp_hidden(), Cc = c.cond_channels;
  const float linear_std = static_cast<float>(std::sqrt(2.0 / (5.0 * C)));
  const float out_proj_std = static_cast<float>(1.0 / std::sqrt(5.0 * c.num_blocks * C));
  const float small_std = static_cast<float>(0.5 / std::sqrt(static_cast<double>(C)));
  const DType f32 = DType::F32, bf16 = DType::BF16;

  std::vector<ParamSpec> p;
  auto add = [&](std::string name, Shape shape, DType dt, float mean, float std) {
    p.push_back(ParamSpec{std::move(name), std::move(shape), dt, Init{mean, std}});
  };
  auto linear = [&](const std::string& name, int64_t out, int64_t in, DType dt, float std) {
    add(name + ".weight", {out, in}, dt, 0.0f, std);
    add(name + ".bias", {out}, dt, 0.0f, kBiasStd);
  };

  linear("t_embedder.mlp.0", C, 256, f32, 0.02f);
  linear("t_embedder.mlp.2", C, C, f32, 0.02f);
  if (c.share_mod) linear("adaLN_modulation.1", 6 * C, C, f32, small_std);
  linear("input_layer", C, c.in_channels, f32,
         static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.in_channels))));
  for (int i = 0; i < c.num_blocks; ++i) {
    const std::string b = "blocks." + std::to_string(i);
    if (c.share_mod) {
      add(b + ".modulation", {6 * C}, f32, 0.0f, static_cast<float>(1.0 / std::sqrt(double(C))));
    } else {
      linear(b + ".adaLN_modulation.1", 6 * C, C, bf16, small_std);
    }
    linear(b + ".self_attn.to_qkv", 3 * C, C, bf16, linear_std);
    if (c.qk_rms_norm) {
      add(b + ".self_attn.q_rms_norm.gamma", {H, D}, f32, 1.0f, kGammaStd);
      add(b + ".self_attn.k_rms_norm.gamma", {H, D}, f32, 1.0f, kGammaStd);
    }
    linear(b + ".self_attn.to_out", C, C, bf16, out_proj_std);
    add(b + ".norm2.weight", {C}, f32, 1.0f, kGammaStd);
    add(b + ".norm2.bias", {C}, f32, 0.0f, kBiasStd);
    linear(b + ".cross_attn.to_q", C, C, bf16, linear_std);
    linear(b + ".cross_attn.to_kv", 2 * C, Cc, bf16, linear_std);
    if (c.qk_rms_norm_cross) {
      add(b + ".cross_attn.q_rms_norm.gamma", {H, D}, f32, 1.0f, kGammaStd);
      add(b + ".cross_attn.k_rms_norm.gamma", {H, D}, f32, 1.0f, kGammaStd);
    }
    linear(b + ".cross_attn.to_out", C, C, bf16, out_proj_std);
    linear(b + ".mlp.mlp.0", hidden, C, bf16, linear_std);
    linear(b + ".mlp.mlp.2", C, hidden, bf16, out_proj_std);
  }
  linear("out_layer", c.out_channels, C, f32, small_std);
  return p;
}

int64_t parameter_count(const ModelConfig& config) {
  int64_t n = 0;
  for (const auto& s : param_specs(config)) n += shape_numel(s.shape);
  return n;
}

}  // namespace s3d::model
