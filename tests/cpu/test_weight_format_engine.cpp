// A weight format through the public Engine on the CPU backend (EngineOptions::weight_format,
// ops/weight_format.h): the test format row_scaled loads, reports itself, counts its scales in
// the weights' bytes, moves to the host and back with the generic residency code, gives a
// latent near the plain model's (never the same bits: its roundings differ), refuses to
// borrow (a conversion is a copy) and an unknown name is an error that names the known ones.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "../model_inputs.h"
#include "../test_numerics.h"
#include "engine_test_util.h"
#include "model/checkpoint.h"
#include "model/config.h"
#include "model/trunk/weights.h"
#include "sparse3d/sparse3d.h"

namespace {

namespace fs = std::filesystem;
using s3d::test::kTinyCheckpoint;

struct WeightFormatEngine : ::testing::Test {
  void SetUp() override {
    cache = (fs::temp_directory_path() /
             ("sparse3d_weight_format_" + std::to_string(getpid()) + "_" +
              ::testing::UnitTest::GetInstance()->current_test_info()->name()))
                .string();
  }
  void TearDown() override { fs::remove_all(cache); }
  sparse3d::EngineOptions options(const std::string& format) const {
    sparse3d::EngineOptions o = s3d::test::cpu_options(cache);
    o.weight_format = format;
    return o;
  }
  // Two assets, CFG on every step.
  static s3d::sampler::Inputs inputs() { return s3d::testing::synthetic_inputs({37, 21}, 9, 64, 32, 4); }
  static sparse3d::SampleRequest request(s3d::sampler::Inputs& in) {
    sparse3d::SampleRequest r = s3d::testing::sample_request(in, 17, 3);
    r.sampler.interval_lo = 0.0;
    return r;
  }
  static std::vector<float> values(const sparse3d::Array& a) {
    const auto* p = static_cast<const float*>(a.view.data);
    return std::vector<float>(p, p + a.view.nbytes() / sizeof(float));
  }
  std::string cache;
};

// The bytes row_scaled adds: an f32 scale per output channel of every bf16 layer.
size_t scale_bytes(const std::string& checkpoint) {
  size_t n = 0;
  for (const auto& l : s3d::model::linear_specs(s3d::model::read_config_file(checkpoint)))
    if (l.dtype == s3d::DType::BF16) n += static_cast<size_t>(l.out) * sizeof(float);
  return n;
}

TEST_F(WeightFormatEngine, RowScaledLoadsReportsItselfAndCountsItsScales) {
  sparse3d::Engine plain(kTinyCheckpoint, options(""));
  sparse3d::Engine scaled(kTinyCheckpoint, options("row_scaled"));
  EXPECT_EQ(plain.model().weight_format, "plain");
  EXPECT_EQ(scaled.model().weight_format, "row_scaled");
  // Another version of the weights: nothing qualified for one is taken for the other.
  EXPECT_NE(plain.model().content_hash, scaled.model().content_hash);
  ASSERT_GT(scale_bytes(kTinyCheckpoint), 0u);
  EXPECT_EQ(scaled.residency().weight_bytes,
            plain.residency().weight_bytes + scale_bytes(kTinyCheckpoint));
}

TEST_F(WeightFormatEngine, RowScaledGivesALatentNearThePlainOneAndKeepsItsBitsThroughOffload) {
  sparse3d::Engine plain(kTinyCheckpoint, options(""));
  sparse3d::Engine scaled(kTinyCheckpoint, options("row_scaled"));
  auto in = inputs();
  const sparse3d::SampleRequest r = request(in);
  const std::vector<float> want = values(plain.sample(r).latent);
  const std::vector<float> got = values(scaled.sample(r).latent);
  const double err = s3d::testing::rel_l2(got, want);
  std::cout << "[ format   ] row_scaled latent against plain's, 3 steps: rel L2 " << err << "\n";
  EXPECT_GT(err, 0.0) << "the format's roundings left no trace: did it run?";
  EXPECT_LT(err, 2e-2);
  scaled.offload();
  scaled.reload();
  const std::vector<float> again = values(scaled.sample(r).latent);
  ASSERT_EQ(again.size(), got.size());
  EXPECT_EQ(std::memcmp(again.data(), got.data(), got.size() * sizeof(float)), 0);
}

TEST_F(WeightFormatEngine, ABorrowedCheckpointIsCopiedAndSaysWhy) {
  s3d::model::Checkpoint ck = s3d::model::read_checkpoint(kTinyCheckpoint);
  sparse3d::InMemoryCheckpoint m;
  m.config_json = s3d::model::config_to_json(ck.config).dump();
  m.name = "caller's tensors";
  for (auto& [name, t] : ck.tensors)
    m.tensors.emplace_back(name, sparse3d::TensorView{t.data(), t.dtype(), sparse3d::Device::CPU,
                                                      0, t.shape()});
  m.borrow = true;
  std::vector<std::string> log;
  sparse3d::EngineOptions o = options("row_scaled");
  o.log = [&log](const std::string& line) { log.push_back(line); };
  sparse3d::Engine e(m, o);
  EXPECT_EQ(e.model().weight_format, "row_scaled");
  EXPECT_STRNE(e.residency().weights_source.c_str(), "borrowed in place");
  bool said = false;
  for (const auto& line : log)
    said = said || line.find("weight format row_scaled converts the weights") != std::string::npos;
  EXPECT_TRUE(said);
}

TEST_F(WeightFormatEngine, AnUnknownFormatIsAnErrorNamingTheKnownOnes) {
  const std::string e = s3d::testing::error_of(
      [&] { sparse3d::Engine bad(kTinyCheckpoint, options("fp8_e4m3")); });
  EXPECT_NE(e.find("unknown weight format 'fp8_e4m3' (known: plain, row_scaled"),
            std::string::npos)
      << e;
}

}  // namespace
