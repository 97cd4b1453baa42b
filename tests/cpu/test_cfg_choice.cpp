// Serial or batched CFG per asset by measured latency (issue 6 item 2): the choice rule, the
// timings taken from a bench result, and `run --cfg-choice` end to end on the CPU backend.
#include <gtest/gtest.h>
#include <unistd.h>
#include <sys/wait.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "bench/report.h"
#include "bench/result_io.h"
#include "model/checkpoint.h"
#include "payload/generate.h"
#include "payload/payload.h"
#include "sampler/cfg_choice.h"
#include "io_test_util.h"

namespace s3d {
namespace {

namespace fs = std::filesystem;
using sampler::CfgTimingPoint;
using sampler::choose_cfg_mode;

// Ratios batched / serial: 0.9 at 1,000 tokens, 1.1 at 100,000 (log-midpoint 10,000: 1.0).
const std::vector<CfgTimingPoint> kPoints = {{100000, 10.0, 11.0}, {1000, 1.0, 0.9}};

TEST(CfgChoice, InterpolatesTheRatioInLogTokens) {
  auto c = choose_cfg_mode(kPoints, 1000);
  EXPECT_TRUE(c.batched);
  EXPECT_DOUBLE_EQ(c.predicted_ratio, 0.9);
  c = choose_cfg_mode(kPoints, 3162);  // 10^3.5: a quarter of the way: 0.95
  EXPECT_TRUE(c.batched);
  EXPECT_NEAR(c.predicted_ratio, 0.95, 1e-4);
  EXPECT_NE(c.reason.find("interpolated between 1000 and 100000 tokens"), std::string::npos)
      << c.reason;
  c = choose_cfg_mode(kPoints, 31623);  // 10^4.5: 1.05
  EXPECT_FALSE(c.batched);
  EXPECT_NEAR(c.predicted_ratio, 1.05, 1e-4);
  EXPECT_EQ(c.reason.rfind("serial CFG", 0), 0u) << c.reason;
}

TEST(CfgChoice, OutsideTheMeasuredRangeTakesTheNearestRatio) {
  auto c = choose_cfg_mode(kPoints, 7);
  EXPECT_TRUE(c.batched);
  EXPECT_DOUBLE_EQ(c.predicted_ratio, 0.9);
  EXPECT_NE(c.reason.find("the smallest measured"), std::string::npos);
  c = choose_cfg_mode(kPoints, 1000000);
  EXPECT_FALSE(c.batched);
  EXPECT_NE(c.reason.find("the largest measured"), std::string::npos);
}

TEST(CfgChoice, NoPointsMeansSerialAndBadPointsAreErrors) {
  auto c = choose_cfg_mode({}, 500);
  EXPECT_FALSE(c.batched);
  EXPECT_NE(c.reason.find("no measured timings"), std::string::npos);
  EXPECT_ERROR(choose_cfg_mode(kPoints, 0), "token count must be > 0");
  EXPECT_ERROR(choose_cfg_mode({{100, 1.0, NAN}}, 50), "finite times > 0");
  EXPECT_ERROR(choose_cfg_mode({{100, 1.0, 1.0}, {100, 2.0, 1.0}}, 50), "two timing points at 100");
}

bench::Cell timed(const std::string& path, const std::string& asset, std::vector<double> s) {
  bench::Cell c;
  c.path = path;
  c.asset = asset;
  c.loop_seconds = std::move(s);
  return c;
}

bench::BenchResult two_modes(int64_t small_tokens) {
  bench::BenchResult r;
  r.date = "2026-12-01T10:00:00Z";
  r.assets = {{"small", small_tokens, "default"}, {"large", 100000, "default"}, {"alone", 500, "default"}};
  r.paths = {"pure_eager", "pure_eager+batched_cfg"};
  r.cells = {timed("pure_eager", "small", {1.0, 1.2, 1.0}),  // median 1.0
             timed("pure_eager+batched_cfg", "small", {0.9}),
             timed("pure_eager", "large", {10.0}),
             timed("pure_eager+batched_cfg", "large", {11.0}),
             timed("pure_eager", "alone", {0.5})};  // no batched cell: not a point
  return r;
}

TEST(CfgChoice, TimingsComeFromAssetsTimedBothWays) {
  const auto points =
      bench::cfg_timing_points(two_modes(1000), "pure_eager", "pure_eager+batched_cfg", "r.json");
  ASSERT_EQ(points.size(), 2u);
  EXPECT_EQ(points[0].tokens, 1000);
  EXPECT_DOUBLE_EQ(points[0].serial_s, 1.0);
  EXPECT_DOUBLE_EQ(points[0].batched_s, 0.9);
  EXPECT_EQ(points[1].tokens, 100000);
  EXPECT_ERROR(bench::cfg_timing_points(two_modes(1000), "kernel_fusion",
                                        "kernel_fusion+batched_cfg", "r.json"),
               "r.json: no asset was timed both as kernel_fusion and as kernel_fusion+batched_cfg");
}

std::string run_cli(const std::string& args, int* code) {
  const fs::path log = fs::temp_directory_path() / ("sparse3d_cfgchoice_" + std::to_string(getpid()) + ".log");
  const int status =
      std::system((std::string(SPARSE3D_CLI) + " " + args + " > " + log.string() + " 2>&1").c_str());
  *code = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
  std::ifstream f(log);
  std::stringstream ss;
  ss << f.rdbuf();
  fs::remove(log);
  return ss.str();
}

TEST(CfgChoice, RunPicksTheModePerAssetFromABenchResult) {
  const std::string dir =
      (fs::temp_directory_path() / ("sparse3d_cfgchoice_" + std::to_string(getpid()))).string();
  model::make_checkpoint(model::preset("tiny"), 3, dir + "/tiny", DType::BF16);
  payload::GenerateOptions g = payload::GenerateOptions::small();
  g.default_tokens = {40};
  payload::generate_payloads(dir + "/pl", g);
  const payload::Manifest man = payload::read_manifest(dir + "/pl/manifest.json");
  const std::string asset = man.assets[0].name;
  const std::string common = "run --device cpu --steps 2 --checkpoint " + dir +
                             "/tiny.json --manifest " + dir + "/pl/manifest.json --asset " +
                             asset + " --out " + dir + "/out --cfg-choice " + dir + "/b.json";
  int code = 0;
  // Measured faster batched at 20 tokens and slower at 100,000: batched at 40 tokens.
  std::ofstream(dir + "/b.json") << bench::to_json(two_modes(20)).dump();
  std::string out = run_cli(common, &code);
  ASSERT_EQ(code, 0) << out;
  EXPECT_NE(out.find("[" + asset + "] batched CFG: batched / serial = "), std::string::npos) << out;
  // Only slower batched: serial.
  bench::BenchResult slow = two_modes(20);
  slow.cells[1].loop_seconds = {1.5};
  std::ofstream(dir + "/b.json") << bench::to_json(slow).dump();
  out = run_cli(common, &code);
  ASSERT_EQ(code, 0) << out;
  EXPECT_NE(out.find("[" + asset + "] serial CFG: batched / serial = "), std::string::npos) << out;
  // A result that never timed this path both ways: a clean error.
  out = run_cli(common + " --path kernel_fusion", &code);
  EXPECT_EQ(code, 1) << out;
  EXPECT_NE(out.find("sparse3d: error: "), std::string::npos) << out;
  EXPECT_NE(out.find("no asset was timed both as kernel_fusion"), std::string::npos) << out;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace s3d
