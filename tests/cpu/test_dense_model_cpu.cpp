// The dense family (SparseStructureFlowModel, docs/DENSE_MODEL.md) on the CPU backend: its
// config, its layout checks, its host position tables, its forward against the structured-
// latent one, and the public API's volume layout against the token layout. The family's
// kernels (the volume <-> token transposes, the unbiased std) run on both backends in
// tests/device/test_dense_model.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>

#include "core/error.h"
#include "core/rng.h"
#include "io/json.h"
#include "kernels/volume_layout.h"
#include "model/checkpoint.h"
#include "model/config.h"
#include "model/family.h"
#include "model/trunk/transformer.h"
#include "sparse3d/engine.h"
#include "../test_numerics.h"
#include "io_test_util.h"

namespace s3d::model {
namespace {

using testing::error_of;
using testing::random_tensor;

io::Json dense_json(const std::string& extra_key = "", io::Json extra = nullptr) {
  io::Json j = config_to_json(preset("tiny-ss"));
  if (!extra_key.empty()) j["args"][extra_key] = extra;
  return j;
}

TEST(DenseConfig, ParsesTheFamilyAndIgnoresRopeFreq) {
  ModelConfig c = config_from_json(dense_json("rope_freq", {2.0, 500.0}), "test");
  EXPECT_EQ(c.family, "SparseStructureFlowModel");
  EXPECT_EQ(find_family(c.family).layout(), AssetLayout::Grid);
  EXPECT_EQ(c.resolution, 8);
  EXPECT_EQ(c.grid_tokens(), 512);
  // The dense model builds its RoPE table with (1, 10000) whatever rope_freq says.
  EXPECT_EQ(c.rope_freq0, 1.0);
  EXPECT_EQ(c.rope_theta, 10000.0);
  EXPECT_EQ(config_to_json(c)["name"].get<std::string>(), "SparseStructureFlowModel");
  EXPECT_FALSE(config_to_json(c)["args"].contains("rope_freq"));
  EXPECT_EQ(config_from_json(config_to_json(preset("tiny")), "t").family, "SLatFlowModel");
}

TEST(DenseConfig, RefusesWhatCannotRun) {
  EXPECT_NE(error_of([] { config_from_json(dense_json("in_channels", 16), "cfg"); })
                .find("in_channels (16) must equal out_channels (8)"),
            std::string::npos);
  EXPECT_NE(error_of([] { config_from_json(dense_json("resolution", 65), "cfg"); })
                .find("274625 tokens per asset"),
            std::string::npos);
  EXPECT_NE(error_of([] { config_from_json(dense_json("patch_size", 1), "cfg"); })
                .find("patch_size"),
            std::string::npos);
  io::Json j = dense_json();
  j["name"] = "SparseStructureFlowModelX";
  EXPECT_NE(error_of([&] { config_from_json(j, "cfg"); }).find("SparseStructureFlowModelX"),
            std::string::npos);
}

struct DenseFixture : ::testing::Test {
  static void SetUpTestSuite() {
    tmp = std::make_unique<test::TempDir>();
    dir = tmp->dir();
    make_checkpoint(preset("tiny-ss"), 5, dir + "/ss", DType::BF16);
  }
  static void TearDownTestSuite() { tmp.reset(); }
  static std::unique_ptr<test::TempDir> tmp;
  static std::string dir;
};
std::unique_ptr<test::TempDir> DenseFixture::tmp;
std::string DenseFixture::dir;

TEST_F(DenseFixture, HostRopeTableHasTheGridPhases) {
  auto m = std::make_unique<Transformer>(load_checkpoint(dir + "/ss.json", Device::CPU));
  EXPECT_TRUE(m->summary().unbiased_rescale_std);
  EXPECT_EQ(m->summary().family, "SparseStructureFlowModel");
  const Request one = m->prepare(grid_coords(1, 8), 1, 5);
  const Tensor& cs = one.rope_cos;
  const Tensor& sn = one.rope_sin;
  ASSERT_EQ(cs.shape(), Shape({512, 32}));  // R^3 x D / 2, D = 64
  // D = 64: freq_dim 10, pairs 0..29 rotate, 30 and 31 are padding (1, 0).
  const int fd = 10;
  for (int64_t n : {0, 1, 77, 300, 511}) {
    const int coord[3] = {static_cast<int>(n / 64), static_cast<int>((n / 8) % 8),
                          static_cast<int>(n % 8)};
    for (int p = 0; p < 32; ++p) {
      float want_c = 1.0f, want_s = 0.0f;
      if (p < 3 * fd) {
        const float omega = 1.0f / powf(10000.0f, static_cast<float>(p % fd) / fd);
        const float phi = static_cast<float>(coord[p / fd]) * omega;
        want_c = cosf(phi);
        want_s = sinf(phi);
      }
      EXPECT_EQ(cs.data_as<float>()[n * 32 + p], want_c) << n << " " << p;
      EXPECT_EQ(sn.data_as<float>()[n * 32 + p], want_s) << n << " " << p;
    }
  }
}

TEST_F(DenseFixture, PrepareTakesOnlyWholeGridsInRasterOrder) {
  auto m = std::make_unique<Transformer>(load_checkpoint(dir + "/ss.json", Device::CPU));
  Tensor good = grid_coords(2, 8);
  Request r = m->prepare(good, 2, 5);
  EXPECT_EQ(r.tokens, 1024);
  EXPECT_EQ(r.rope_cos.shape(), Shape({1024, 32}));
  EXPECT_TRUE(testing::bitwise_equal(r.rope_cos.rows(512, 1024),
                                     m->prepare(grid_coords(1, 8), 1, 5).rope_cos));
  Tensor swapped = good.to(Device::CPU);
  swapped.data_as<int32_t>()[4 * 9 + 3] = 0;  // row 9 should be (0, 0, 1, 1)
  EXPECT_NE(error_of([&] { m->prepare(swapped, 2, 5); }).find("row 9 is (0, 0, 1, 0)"),
            std::string::npos);
  EXPECT_NE(error_of([&] { m->prepare(good.rows(0, 1000), 2, 5); }).find("1024 rows; got 1000"),
            std::string::npos);
}

TEST_F(DenseFixture, ForwardIsTheBlocksOverTheGrid) {
  // With RoPE the dense forward is the structured-latent forward over the grid's coordinates
  // (on the CPU both evaluate the phases with the same libm): same bits.
  Checkpoint dense = load_checkpoint(dir + "/ss.json", Device::CPU);
  Checkpoint slat = load_checkpoint(dir + "/ss.json", Device::CPU);
  slat.config.family = "SLatFlowModel";
  Transformer d(std::move(dense));
  Transformer s(std::move(slat));
  Tensor coords = grid_coords(2, 8);
  Tensor x = random_tensor({1024, 8}, DType::F32, 3);
  Tensor t = Tensor::from_floats({1000.0f, 437.5f}, {2}, DType::F32);
  Tensor cond = random_tensor({2, 5, 64}, DType::BF16, 4);
  Tensor vd = d.forward(d.prepare(coords, 2, 5), x, t, cond);
  Tensor vs = s.forward(s.prepare(coords, 2, 5), x, t, cond);
  EXPECT_TRUE(testing::bitwise_equal(vd, vs));
  EXPECT_GT(testing::rel_l2(vd.to_floats(), x.to_floats()), 0.0);
}

TEST_F(DenseFixture, ApeIsAddedBeforeTheInputRounding) {
  // An APE config: the dense forward differs from the structured-latent one (which rounds
  // the input layer and the APE separately) but stays within bf16 noise of it.
  ModelConfig c = preset("tiny-ss");
  c.pe_mode = "ape";
  make_checkpoint(c, 9, dir + "/ape", DType::BF16);
  Checkpoint slat = load_checkpoint(dir + "/ape.json", Device::CPU);
  slat.config.family = "SLatFlowModel";
  Transformer d(load_checkpoint(dir + "/ape.json", Device::CPU));
  Transformer s(std::move(slat));
  Tensor coords = grid_coords(1, 8);
  ASSERT_EQ(d.prepare(coords, 1, 5).position_f32.shape(), Shape({512, 128}));
  Tensor x = random_tensor({512, 8}, DType::F32, 13);
  Tensor t = Tensor::from_floats({800.0f}, {1}, DType::F32);
  Tensor cond = random_tensor({1, 5, 64}, DType::BF16, 14);
  Tensor vd = d.forward(d.prepare(coords, 1, 5), x, t, cond);
  Tensor vs = s.forward(s.prepare(coords, 1, 5), x, t, cond);
  EXPECT_FALSE(testing::bitwise_equal(vd, vs));
  EXPECT_LT(testing::rel_l2(vd.to_floats(), vs.to_floats()), 2e-2);
}

sparse3d::TensorView view_of(Tensor& t) {
  return sparse3d::TensorView{t.data(), t.dtype(), t.device(), 0, t.shape()};
}

TEST_F(DenseFixture, EngineVolumeLayoutIsTheTokenLayoutTransposed) {
  sparse3d::EngineOptions o;
  o.device = sparse3d::DeviceChoice::CPU;
  o.persist_qualification = false;
  sparse3d::Engine e(dir + "/ss.json", o);
  EXPECT_EQ(e.model().family, "SparseStructureFlowModel");
  const int B = 2;
  Tensor cond = random_tensor({B, 5, 64}, DType::F32, 21);
  Tensor coords = grid_coords(B, 8);
  sparse3d::SamplerSettings s = sparse3d::SamplerSettings::released();
  s.steps = 3;
  s.guidance_rescale = 0.7;
  s.interval_lo = 0.0;

  // Seeded noise: the stream fills the volume [B, 8, 8, 8, 8] in order, in both layouts.
  sparse3d::SampleRequest vol;
  vol.batch = B;
  vol.cond = view_of(cond);
  vol.seed = 77;
  vol.sampler = s;
  int callbacks = 0;
  vol.on_step = [&](const sparse3d::StepInfo& st) {
    ++callbacks;
    EXPECT_EQ(st.latent.shape, std::vector<int64_t>({B, 8, 8, 8, 8}));
  };
  sparse3d::SampleResult rv = e.sample(vol);
  EXPECT_EQ(callbacks, 3);
  ASSERT_EQ(rv.latent.view.shape, std::vector<int64_t>({B, 8, 8, 8, 8}));

  sparse3d::SampleRequest tok = vol;
  tok.on_step = nullptr;
  tok.coords = view_of(coords);
  sparse3d::SampleResult rt = e.sample(tok);
  ASSERT_EQ(rt.latent.view.shape, std::vector<int64_t>({B * 512, 8}));
  Tensor lv = Tensor::borrow(rv.latent.view.data, {B, 8, 8, 8, 8}, DType::F32, Device::CPU);
  Tensor lt = Tensor::borrow(rt.latent.view.data, {B * 512, 8}, DType::F32, Device::CPU);
  Tensor lt_as_volume = Tensor::empty({B, 8, 8, 8, 8}, DType::F32, Device::CPU);
  kernels::tokens_to_volume(lt, lt_as_volume);
  EXPECT_TRUE(testing::bitwise_equal(lv, lt_as_volume));

  // The seed's volume as explicit noise gives the same latent.
  sparse3d::Array noise = sparse3d::draw_noise(77, B * 8, 512);
  sparse3d::SampleRequest explicit_noise = vol;
  explicit_noise.on_step = nullptr;
  explicit_noise.seed = 0;
  explicit_noise.noise = noise.view;
  explicit_noise.noise.shape = {B, 8, 8, 8, 8};
  sparse3d::SampleResult rn = e.sample(explicit_noise);
  EXPECT_TRUE(testing::bitwise_equal(
      Tensor::borrow(rn.latent.view.data, {B, 8, 8, 8, 8}, DType::F32, Device::CPU), lv));

  // One forward: volume in, volume out, the token forward transposed.
  Tensor xv = random_tensor({B, 8, 8, 8, 8}, DType::F32, 31);
  Tensor xt = Tensor::empty({B * 512, 8}, DType::F32, Device::CPU);
  kernels::volume_to_tokens(xv, xt);
  Tensor t = Tensor::from_floats({1000.0f, 250.0f}, {B}, DType::F32);
  sparse3d::ForwardRequest fv;
  fv.x = view_of(xv);
  fv.t = view_of(t);
  fv.batch = B;
  fv.cond = view_of(cond);
  sparse3d::Array v_vol = e.forward(fv);
  sparse3d::ForwardRequest ft = fv;
  ft.x = view_of(xt);
  ft.coords = view_of(coords);
  sparse3d::Array v_tok = e.forward(ft);
  Tensor v_tok_volume = Tensor::empty({B, 8, 8, 8, 8}, DType::F32, Device::CPU);
  kernels::tokens_to_volume(
      Tensor::borrow(v_tok.view.data, {B * 512, 8}, DType::F32, Device::CPU), v_tok_volume);
  EXPECT_TRUE(testing::bitwise_equal(
      Tensor::borrow(v_vol.view.data, {B, 8, 8, 8, 8}, DType::F32, Device::CPU), v_tok_volume));

  // Wrong shapes name what was expected.
  sparse3d::ForwardRequest bad = fv;
  bad.x.shape = {B, 8, 512};
  EXPECT_NE(error_of([&] { e.forward(bad); }).find("[2, 8, 8, 8, 8]"), std::string::npos);
}

TEST(DenseEngine, ASLatEngineStillNeedsCoords) {
  test::TempDir tmp;
  const std::string dir = tmp.dir();
  make_checkpoint(preset("tiny"), 2, dir + "/tiny", DType::BF16);
  sparse3d::EngineOptions o;
  o.device = sparse3d::DeviceChoice::CPU;
  o.persist_qualification = false;
  sparse3d::Engine e(dir + "/tiny.json", o);
  Tensor cond = random_tensor({1, 5, 64}, DType::F32, 2);
  sparse3d::SampleRequest r;
  r.cond = view_of(cond);
  r.seed = 1;
  EXPECT_NE(error_of([&] { e.sample(r); }).find("coords are required"), std::string::npos);
}

}  // namespace
}  // namespace s3d::model
