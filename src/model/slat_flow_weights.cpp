#include "model/slat_flow_weights.h"

#include <cmath>
#include <functional>

#include "core/error.h"

namespace s3d::model {
namespace {

// Synthetic weights follow the "scaled" initialisation of the original, except that the
// layers it zero-initialises (adaLN, out_layer, every bias) get small random values: with
// zeros every test would pass trivially, and the null-context row b_V W_O + b_O would vanish.
constexpr float kBiasStd = 0.02f;
constexpr float kGammaStd = 0.1f;  // RMSNorm gammas and norm2 weight: 1 + N(0, 0.1)

// Called once per parameter with its spec and the field it binds to.
using Visit = std::function<void(const ParamSpec&, Tensor& field)>;

struct Walk {
  const Visit& visit;

  void tensor(Tensor& field, std::string name, Shape shape, DType dt, float mean, float std) {
    visit(ParamSpec{std::move(name), std::move(shape), dt, Init{mean, std}}, field);
  }
  void linear(Linear& field, const std::string& name, int64_t out, int64_t in, DType dt,
              float std) {
    tensor(field.weight, name + ".weight", {out, in}, dt, 0.0f, std);
    tensor(field.bias, name + ".bias", {out}, dt, 0.0f, kBiasStd);
  }
};

// Block i's parameters, named "blocks.<i>.<...>" as in the released state dict.
void walk_block(const ModelConfig& c, int i, BlockWeights& w, Walk& walk) {
  const int64_t C = c.model_channels, H = c.num_heads, D = c.head_dim();
  const int64_t hidden = c.mlp_hidden(), Cc = c.cond_channels;
  const float linear_std = static_cast<float>(std::sqrt(2.0 / (5.0 * C)));
  const float out_proj_std = static_cast<float>(1.0 / std::sqrt(5.0 * c.num_blocks * C));
  const float small_std = static_cast<float>(0.5 / std::sqrt(static_cast<double>(C)));
  const DType f32 = DType::F32, bf16 = DType::BF16;
  const std::string b = "blocks." + std::to_string(i);
  if (c.share_mod) {
    walk.tensor(w.modulation, b + ".modulation", {6 * C}, f32, 0.0f,
                static_cast<float>(1.0 / std::sqrt(double(C))));
  } else {
    walk.linear(w.adaLN_modulation, b + ".adaLN_modulation.1", 6 * C, C, bf16, small_std);
  }
  walk.linear(w.self_attn.to_qkv, b + ".self_attn.to_qkv", 3 * C, C, bf16, linear_std);
  if (c.qk_rms_norm) {
    walk.tensor(w.self_attn.q_rms_gamma, b + ".self_attn.q_rms_norm.gamma", {H, D}, f32, 1.0f,
                kGammaStd);
    walk.tensor(w.self_attn.k_rms_gamma, b + ".self_attn.k_rms_norm.gamma", {H, D}, f32, 1.0f,
                kGammaStd);
  }
  walk.linear(w.self_attn.to_out, b + ".self_attn.to_out", C, C, bf16, out_proj_std);
  walk.tensor(w.norm2.weight, b + ".norm2.weight", {C}, f32, 1.0f, kGammaStd);
  walk.tensor(w.norm2.bias, b + ".norm2.bias", {C}, f32, 0.0f, kBiasStd);
  walk.linear(w.cross_attn.to_q, b + ".cross_attn.to_q", C, C, bf16, linear_std);
  walk.linear(w.cross_attn.to_kv, b + ".cross_attn.to_kv", 2 * C, Cc, bf16, linear_std);
  if (c.qk_rms_norm_cross) {
    walk.tensor(w.cross_attn.q_rms_gamma, b + ".cross_attn.q_rms_norm.gamma", {H, D}, f32, 1.0f,
                kGammaStd);
    walk.tensor(w.cross_attn.k_rms_gamma, b + ".cross_attn.k_rms_norm.gamma", {H, D}, f32, 1.0f,
                kGammaStd);
  }
  walk.linear(w.cross_attn.to_out, b + ".cross_attn.to_out", C, C, bf16, out_proj_std);
  walk.linear(w.mlp.fc1, b + ".mlp.mlp.0", hidden, C, bf16, linear_std);
  walk.linear(w.mlp.fc2, b + ".mlp.mlp.2", C, hidden, bf16, out_proj_std);
}

// Every parameter of `c` in the checkpoint's order, each with the field of `w` it binds to
// (w.blocks is sized here).
void walk_parameters(const ModelConfig& c, SLatFlowWeights& w, const Visit& visit) {
  c.validate();
  const int64_t C = c.model_channels;
  const float small_std = static_cast<float>(0.5 / std::sqrt(static_cast<double>(C)));
  const DType f32 = DType::F32;
  Walk walk{visit};
  walk.linear(w.t_embedder_fc1, "t_embedder.mlp.0", C, 256, f32, 0.02f);
  walk.linear(w.t_embedder_fc2, "t_embedder.mlp.2", C, C, f32, 0.02f);
  if (c.share_mod) walk.linear(w.adaLN_modulation, "adaLN_modulation.1", 6 * C, C, f32, small_std);
  walk.linear(w.input_layer, "input_layer", C, c.in_channels, f32,
              static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.in_channels))));
  w.blocks.assign(static_cast<size_t>(c.num_blocks), BlockWeights{});
  for (int i = 0; i < c.num_blocks; ++i) walk_block(c, i, w.blocks[static_cast<size_t>(i)], walk);
  walk.linear(w.out_layer, "out_layer", c.out_channels, C, f32, small_std);
}

}  // namespace

std::vector<ParamSpec> param_specs(const ModelConfig& config) {
  std::vector<ParamSpec> specs;
  SLatFlowWeights unused;
  walk_parameters(config, unused, [&](const ParamSpec& s, Tensor&) { specs.push_back(s); });
  return specs;
}

int64_t parameter_count(const ModelConfig& config) {
  int64_t n = 0;
  for (const auto& s : param_specs(config)) n += shape_numel(s.shape);
  return n;
}

SLatFlowWeights bind_weights(const ModelConfig& config,
                             const std::map<std::string, Tensor>& tensors) {
  SLatFlowWeights w;
  walk_parameters(config, w, [&](const ParamSpec& s, Tensor& field) {
    auto it = tensors.find(s.name);
    S3D_CHECK(it != tensors.end(), "SLatFlowModel: parameter ", s.name, " is not loaded");
    const Tensor& t = it->second;
    S3D_CHECK(t.shape() == s.shape && t.dtype() == s.runtime_dtype, "SLatFlowModel: parameter ",
              s.name, " is ", t.describe(), ", the config needs ", dtype_name(s.runtime_dtype),
              " ", shape_str(s.shape));
    field = t;
  });
  return w;
}

}  // namespace s3d::model
