#include <gtest/gtest.h>

#include <map>
#include <set>

#include "model/config.h"
#include "model/trunk/weights.h"
#include "../test_numerics.h"

namespace s3d::model {
namespace {

// docs/MODEL.md: the released shape model has 1,292,253,728 parameters in 640 tensors.
TEST(Params, Shape1024MatchesTheReleasedCheckpoint) {
  ModelConfig c = preset("trellis2-shape-1024");
  auto specs = param_specs(c);
  EXPECT_EQ(specs.size(), 640u);
  EXPECT_EQ(parameter_count(c), 1292253728);
  EXPECT_EQ(c.mlp_hidden(), 8192);
  EXPECT_EQ(c.head_dim(), 128);
}

TEST(Params, NamesAreUniqueAndDtypesFollowTheOriginal) {
  ModelConfig c = preset("trellis2-shape-1024");
  std::set<std::string> names;
  for (const auto& s : param_specs(c)) {
    EXPECT_TRUE(names.insert(s.name).second) << "duplicate " << s.name;
    const bool in_block = s.name.rfind("blocks.", 0) == 0;
    const bool block_linear = in_block && (s.name.find(".weight") != std::string::npos ||
                                           s.name.find(".bias") != std::string::npos) &&
                              s.name.find("norm2") == std::string::npos;
    EXPECT_EQ(s.runtime_dtype, block_linear ? DType::BF16 : DType::F32) << s.name;
    EXPECT_GT(s.init.std, 0.0f) << s.name << ": synthetic weights must not be constant";
  }
  EXPECT_TRUE(names.count("blocks.29.cross_attn.to_kv.weight"));
  EXPECT_TRUE(names.count("blocks.0.mlp.mlp.2.bias"));
}

TEST(Params, TextureModelTakesSixtyFourInputChannels) {
  auto specs = param_specs(preset("trellis2-tex-1024"));
  bool found = false;
  for (const auto& s : specs)
    if (s.name == "input_layer.weight") {
      EXPECT_EQ(s.shape, (Shape{1536, 64}));
      found = true;
    }
  EXPECT_TRUE(found);
}

TEST(Params, PerBlockModulationWhenNotShared) {
  ModelConfig c = preset("tiny");
  c.share_mod = false;
  c.qk_rms_norm = false;
  std::set<std::string> names;
  for (const auto& s : param_specs(c)) names.insert(s.name);
  EXPECT_FALSE(names.count("adaLN_modulation.1.weight"));
  EXPECT_TRUE(names.count("blocks.1.adaLN_modulation.1.weight"));
  EXPECT_FALSE(names.count("blocks.0.modulation"));
  EXPECT_FALSE(names.count("blocks.0.self_attn.q_rms_norm.gamma"));
  EXPECT_TRUE(names.count("blocks.0.cross_attn.q_rms_norm.gamma"));
}

// A checkpoint's tensors for `c`, each a distinct host tensor of its spec.
std::map<std::string, Tensor> tensors_for(const ModelConfig& c) {
  std::map<std::string, Tensor> t;
  for (const auto& s : param_specs(c)) t[s.name] = Tensor::zeros(s.shape, s.runtime_dtype, Device::CPU);
  return t;
}

TEST(Params, BindWeightsPutsEachCheckpointTensorInItsField) {
  ModelConfig c = preset("tiny");
  const auto t = tensors_for(c);
  const TrunkWeights w = bind_weights(c, t);
  ASSERT_EQ(w.blocks.size(), static_cast<size_t>(c.num_blocks));
  // The fields share the checkpoint's storage (bound, not copied), each under its own name.
  auto same = [&](const Tensor& field, const std::string& name) {
    return field.data() == t.at(name).data();
  };
  EXPECT_TRUE(same(w.input_layer.weight, "input_layer.weight"));
  EXPECT_TRUE(same(w.t_embedder_fc2.bias, "t_embedder.mlp.2.bias"));
  EXPECT_TRUE(same(w.adaLN_modulation.weight, "adaLN_modulation.1.weight"));
  EXPECT_TRUE(same(w.out_layer.bias, "out_layer.bias"));
  const BlockWeights& b1 = w.blocks[1];
  EXPECT_TRUE(same(b1.modulation, "blocks.1.modulation"));
  EXPECT_FALSE(b1.adaLN_modulation.weight.defined());
  EXPECT_TRUE(same(b1.self_attn.to_qkv.weight, "blocks.1.self_attn.to_qkv.weight"));
  EXPECT_TRUE(same(b1.self_attn.k_rms_gamma, "blocks.1.self_attn.k_rms_norm.gamma"));
  EXPECT_TRUE(same(b1.norm2.bias, "blocks.1.norm2.bias"));
  EXPECT_TRUE(same(b1.cross_attn.to_kv.bias, "blocks.1.cross_attn.to_kv.bias"));
  EXPECT_TRUE(same(b1.cross_attn.q_rms_gamma, "blocks.1.cross_attn.q_rms_norm.gamma"));
  EXPECT_TRUE(same(b1.cross_attn.to_out.weight, "blocks.1.cross_attn.to_out.weight"));
  EXPECT_TRUE(same(b1.mlp.fc1.bias, "blocks.1.mlp.mlp.0.bias"));
  EXPECT_TRUE(same(b1.mlp.fc2.weight, "blocks.1.mlp.mlp.2.weight"));
  EXPECT_EQ(b1.mlp.fc2.bias_or_null(), &b1.mlp.fc2.bias);
}

TEST(Params, BindWeightsRefusesAMissingOrMisShapedTensor) {
  ModelConfig c = preset("tiny");
  auto missing = tensors_for(c);
  missing.erase("blocks.0.norm2.weight");
  EXPECT_NE(testing::error_of([&] { bind_weights(c, missing); })
                .find("parameter blocks.0.norm2.weight is not loaded"),
            std::string::npos);
  auto wrong = tensors_for(c);
  wrong["out_layer.bias"] = Tensor::zeros({3}, DType::F32, Device::CPU);
  EXPECT_NE(testing::error_of([&] { bind_weights(c, wrong); }).find("out_layer.bias"),
            std::string::npos);
}

}  // namespace
}  // namespace s3d::model
