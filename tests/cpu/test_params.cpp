#include <gtest/gtest.h>

#include <set>

#include "model/config.h"
#include "model/params.h"

namespace s3d::model {
namespace {

// MODEL_SPEC.md: the released shape model has 1,292,253,728 parameters in 640 tensors.
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

}  // namespace
}  // namespace s3d::model
