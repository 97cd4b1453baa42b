// Multi-asset batching: sampler::pack, packed sampling on the CPU backend,
// and the bench report's throughput table.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "bench/report.h"
#include "bench/result_io.h"
#include "model/checkpoint.h"
#include "sampler/sampler.h"
#include "io_test_util.h"
#include "../model_inputs.h"
#include "../null_context_checks.h"
#include "../test_numerics.h"

namespace s3d {
namespace {

TEST(MultiAsset, PackRenumbersAssetsAndStacksRows) {
  const auto a = testing::synthetic_inputs({5}, 3, 8, 4, 1);
  const auto b = testing::synthetic_inputs({3, 4}, 3, 8, 4, 2);
  const sampler::Inputs p = sampler::pack({a, b});
  ASSERT_EQ(p.batch, 3);
  ASSERT_EQ(p.coords.size(0), 12);
  EXPECT_EQ(sampler::pack_offsets({a, b}), (std::vector<int64_t>{0, 5, 12}));
  const int32_t* c = p.coords.data_as<int32_t>();
  const int32_t* bc = b.coords.data_as<int32_t>();
  for (int64_t t = 0; t < 12; ++t) {
    const int want = t < 5 ? 0 : t < 8 ? 1 : 2;
    EXPECT_EQ(c[4 * t], want) << "token " << t;
    if (t >= 5) {
      for (int k = 1; k < 4; ++k) EXPECT_EQ(c[4 * t + k], bc[4 * (t - 5) + k]);
    }
  }
  EXPECT_EQ(p.noise.rows(5, 12).to_floats(), b.noise.to_floats());
  EXPECT_EQ(p.noise.rows(0, 5).to_floats(), a.noise.to_floats());
  EXPECT_EQ(p.cond.rows(1, 3).to_floats(), b.cond.to_floats());
  EXPECT_EQ(p.cond.rows(0, 1).to_floats(), a.cond.to_floats());
}

TEST(MultiAsset, PackRefusesMismatchedRequests) {
  const auto a = testing::synthetic_inputs({5}, 3, 8, 4, 1);
  EXPECT_ERROR(sampler::pack({}), "no request to pack");
  EXPECT_ERROR(sampler::pack({a, testing::synthetic_inputs({5}, 4, 8, 4, 1)}),
               "every condition must be [B, 3, 8]");
  EXPECT_ERROR(sampler::pack({a, testing::synthetic_inputs({5}, 3, 8, 6, 1)}), "noise must be [T, 4]");
  sampler::Inputs bad = a;
  bad.coords = a.coords.to(Device::CPU);
  Tensor coords = Tensor::empty(a.coords.shape(), DType::I32, Device::CPU);
  coords.copy_from(a.coords);
  coords.data_as<int32_t>()[0] = 1;  // batch index 1 in a one-asset request
  bad.coords = coords;
  EXPECT_ERROR(sampler::pack({a, bad}), "batch index 1 of token 0 is outside [0, 1)");
}

// On the CPU backend every op is row- or sequence-local, so an asset packed with others gets
// the latent it gets alone, bit for bit (on the GPU, GEMMs see another M: tolerance there).
TEST(MultiAsset, PackedSamplingGivesEachAssetItsOwnLatent) {
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("sparse3d_multi_" + std::to_string(getpid()))).string();
  model::make_checkpoint(model::preset("tiny"), 7, dir + "/tiny", DType::BF16);
  model::Transformer m(model::load_checkpoint(dir + "/tiny.json", Device::CPU));
  const auto& c = m.config();
  const auto a = testing::synthetic_inputs({37}, 13, c.cond_channels, c.out_channels, 3);
  const auto b = testing::synthetic_inputs({61}, 13, c.cond_channels, c.out_channels, 4);
  for (const char* spec : {"pure_eager", "pure_eager+batched_cfg"}) {
    SCOPED_TRACE(spec);
    sampler::SamplerOptions o;
    o.steps = 3;
    o.apply(sparse3d::ExecutionPlan::parse(spec));
    const auto alone_a = sampler::sample(m, a, o).latent;
    const auto alone_b = sampler::sample(m, b, o).latent;
    const auto packed = sampler::sample(m, sampler::pack({a, b}), o).latent;
    EXPECT_TRUE(testing::same_bits(packed.rows(0, 37), alone_a, "asset a"));
    EXPECT_TRUE(testing::same_bits(packed.rows(37, 98), alone_b, "asset b"));
  }
  std::filesystem::remove_all(dir);
}

bench::BenchResult with_throughput() {
  bench::BenchResult r;
  r.date = "2026-12-01T10:00:00Z";
  r.assets = {{"a1", 1000, "default"}};
  r.paths = {"pure_eager"};
  bench::Cell c;
  c.path = "pure_eager";
  c.asset = "a1";
  c.loop_seconds = {1.0, 1.2};  // median 1.1 s: 3273 assets/hour
  r.cells = {c};
  r.throughput = {{"pure_eager", "a1", 4, {2.0, 2.2, 2.4}, size_t(3) << 30}};  // 6545/hour
  return r;
}

TEST(MultiAsset, ReportHasTheThroughputTable) {
  const std::string md = bench::to_markdown(with_throughput());
  EXPECT_NE(md.find("## Throughput: multi-asset batching"), std::string::npos) << md;
  EXPECT_NE(md.find("| a1 | 1,000 | pure_eager | 1 | 1100.0 (1000.0-1200.0) | 1100.0 | 3273 | 1.00x | - |"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("| a1 | 1,000 | pure_eager | 4 | 2200.0 (2000.0-2400.0) | 2200.0 | 6545 | 2.00x | 3.00 |"),
            std::string::npos)
      << md;
  EXPECT_EQ(bench::to_markdown(bench::BenchResult{}).find("Throughput"), std::string::npos);
}

TEST(MultiAsset, ThroughputSurvivesTheJsonRoundTrip) {
  const bench::BenchResult r = with_throughput();
  const bench::BenchResult back = bench::result_from_json(bench::to_json(r), "test");
  ASSERT_EQ(back.throughput.size(), 1u);
  EXPECT_EQ(back.throughput[0].batch, 4);
  EXPECT_EQ(back.throughput[0].loop_seconds, r.throughput[0].loop_seconds);
  EXPECT_EQ(back.throughput[0].peak_bytes, r.throughput[0].peak_bytes);
  io::Json j = bench::to_json(r);
  j["throughput"][0]["batch"] = 0;
  EXPECT_ERROR(bench::result_from_json(j, "bad.json"), "K < 1");
}

}  // namespace
}  // namespace s3d
