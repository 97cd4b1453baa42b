// A model family added from outside the library, as a third family would be: one class
// implementing model::Family and one register_family() call, nothing else. The family here
// differs from SLatFlowModel only in its position embedding (RoPE over the coordinates with
// the axes reversed, z y x), and every execution path of the public Engine runs it.
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <string>

#include "core/tensor.h"
#include "model/checkpoint.h"
#include "model/config.h"
#include "model/family.h"
#include "engine_test_util.h"
#include "io_test_util.h"
#include "sparse3d/sparse3d.h"
#include "../model_inputs.h"
#include "../test_numerics.h"

namespace s3d::model {
namespace {

// RoPE of (b, z, y, x) instead of (b, x, y, z).
class ReversedAxesRope : public Positions {
 public:
  explicit ReversedAxesRope(const ModelConfig& c) : c_(c) {}
  void apply(Request& r) const override {
    Tensor host = r.coords.to(Device::CPU);
    int32_t* p = host.data_as<int32_t>();
    for (int64_t t = 0; t < host.size(0); ++t) std::swap(p[4 * t + 1], p[4 * t + 3]);
    RopeTables tables = rope_tables(host.to(r.coords.device()), c_.head_dim(),
                                    static_cast<float>(c_.rope_freq0),
                                    static_cast<float>(c_.rope_theta));
    r.rope_cos = std::move(tables.cos);
    r.rope_sin = std::move(tables.sin);
  }

 private:
  ModelConfig c_;
};

class ReversedAxesFamily : public Family {
 public:
  std::string name() const override { return "ReversedAxesFlowModel"; }
  std::unique_ptr<Positions> positions(const ModelConfig& c, Device) const override {
    return std::make_unique<ReversedAxesRope>(c);
  }
};

struct FamilyExtension : ::testing::Test {
  static void SetUpTestSuite() {
    static const bool registered = [] {
      register_family(std::make_unique<ReversedAxesFamily>());
      return true;
    }();
    (void)registered;
    tmp = std::make_unique<test::TempDir>();
    ModelConfig c = preset("tiny");
    c.family = "ReversedAxesFlowModel";
    make_checkpoint(c, 11, tmp->dir() + "/reversed", DType::BF16);
    c.family = "SLatFlowModel";  // the same weights under the structured-latent family
    make_checkpoint(c, 11, tmp->dir() + "/slat", DType::BF16);
  }
  static void TearDownTestSuite() { tmp.reset(); }

  // 3 steps with CFG on every step, two assets of odd sizes.
  static sparse3d::Array run(const std::string& checkpoint, const std::string& path,
                             std::string* family = nullptr) {
    sampler::Inputs in = testing::synthetic_inputs({37, 23}, 7, 64, 32, 5);
    sparse3d::Engine e(tmp->dir() + "/" + checkpoint + ".json",
                       test::cpu_options(tmp->dir() + "/cache-" + checkpoint + "-" + path, path));
    if (family) *family = e.model().family;
    sparse3d::SampleRequest r;
    r.coords = test::view(in.coords);
    r.batch = in.batch;
    r.cond = test::view(in.cond);
    r.seed = 3;
    r.sampler = sparse3d::SamplerSettings::protocol();
    r.sampler.steps = 3;
    return e.sample(r).latent;
  }
  static std::unique_ptr<test::TempDir> tmp;
};
std::unique_ptr<test::TempDir> FamilyExtension::tmp;

TEST_F(FamilyExtension, TheRegistryKnowsIt) {
  EXPECT_EQ(find_family("ReversedAxesFlowModel").name(), "ReversedAxesFlowModel");
  EXPECT_EQ(config_from_json(config_to_json(read_config_file(tmp->dir() + "/reversed.json")),
                             "round trip")
                .family,
            "ReversedAxesFlowModel");
  bool listed = false;
  for (const sparse3d::FamilyInfo& f : sparse3d::model_families())
    listed = listed || (f.name == "ReversedAxesFlowModel" && f.layout == "tokens");
  EXPECT_TRUE(listed);
  EXPECT_NE(testing::error_of([] { register_family(std::make_unique<ReversedAxesFamily>()); })
                .find("already registered"),
            std::string::npos);
}

TEST_F(FamilyExtension, ItsPositionsAreWhatDiffers) {
  std::string family;
  const sparse3d::Array reversed = run("reversed", "pure_eager", &family);
  EXPECT_EQ(family, "ReversedAxesFlowModel");
  const sparse3d::Array slat = run("slat", "pure_eager");
  // The same weights, another position embedding: another latent, of the same size.
  EXPECT_GT(testing::rel_l2(reversed.to_floats(), slat.to_floats()), 1e-3);
  EXPECT_LT(testing::rel_l2(reversed.to_floats(), slat.to_floats()), 1.0);
}

TEST_F(FamilyExtension, EveryPathRunsIt) {
  const std::vector<float> reference = run("reversed", "pure_eager").to_floats();
  for (const sparse3d::PathInfo& p : sparse3d::execution_paths()) {
    const std::string path(p.name);
    const std::vector<float> got = run("reversed", path).to_floats();
    ASSERT_EQ(got.size(), reference.size()) << path;
    // The structured-latent family's contract on the CPU backend: the bitwise paths give the
    // reference's bits, the tolerance kernels stay within bf16 noise of it.
    EXPECT_LT(testing::rel_l2(got, reference), 2e-2) << path;
  }
}

}  // namespace
}  // namespace s3d::model
