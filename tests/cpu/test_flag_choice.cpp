// A flag per asset by measured latency (batched_cfg and cuda_graphs): the choice
// rule, the timings taken from a bench result, and `run --cfg-choice` / `run --graph-choice`
// end to end on the CPU backend.
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
#include "bench/flag_choice.h"
#include "cli_test_util.h"
#include "io_test_util.h"

namespace s3d {
namespace {

namespace fs = std::filesystem;
using bench::choose_flag;
using bench::FlagTimingPoint;
using sparse3d::Flag;

// Ratios on / off: 0.9 at 1,000 tokens, 1.1 at 100,000 (log-midpoint 10,000: 1.0).
const std::vector<FlagTimingPoint> kPoints = {{100000, 10.0, 11.0}, {1000, 1.0, 0.9}};

TEST(FlagChoice, InterpolatesTheRatioInLogTokens) {
  auto c = choose_flag(Flag::batched_cfg, kPoints, 1000);
  EXPECT_TRUE(c.on);
  EXPECT_DOUBLE_EQ(c.predicted_ratio, 0.9);
  c = choose_flag(Flag::batched_cfg, kPoints, 3162);  // 10^3.5: a quarter of the way: 0.95
  EXPECT_TRUE(c.on);
  EXPECT_NEAR(c.predicted_ratio, 0.95, 1e-4);
  EXPECT_NE(c.reason.find("interpolated between 1000 and 100000 tokens"), std::string::npos)
      << c.reason;
  c = choose_flag(Flag::cuda_graphs, kPoints, 31623);  // 10^4.5: 1.05
  EXPECT_FALSE(c.on);
  EXPECT_NEAR(c.predicted_ratio, 1.05, 1e-4);
  EXPECT_EQ(c.reason.rfind("cuda_graphs off", 0), 0u) << c.reason;
}

TEST(FlagChoice, OutsideTheMeasuredRangeTakesTheNearestRatio) {
  auto c = choose_flag(Flag::cuda_graphs, kPoints, 7);
  EXPECT_TRUE(c.on);
  EXPECT_DOUBLE_EQ(c.predicted_ratio, 0.9);
  EXPECT_NE(c.reason.find("the smallest measured"), std::string::npos);
  c = choose_flag(Flag::cuda_graphs, kPoints, 1000000);
  EXPECT_FALSE(c.on);
  EXPECT_NE(c.reason.find("the largest measured"), std::string::npos);
}

TEST(FlagChoice, NoPointsMeansOffAndBadPointsAreErrors) {
  auto c = choose_flag(Flag::batched_cfg, {}, 500);
  EXPECT_FALSE(c.on);
  EXPECT_NE(c.reason.find("no measured timings"), std::string::npos);
  EXPECT_ERROR(choose_flag(Flag::batched_cfg, kPoints, 0), "token count must be > 0");
  EXPECT_ERROR(choose_flag(Flag::batched_cfg, {{100, 1.0, NAN}}, 50), "finite times > 0");
  EXPECT_ERROR(choose_flag(Flag::cuda_graphs, {{100, 1.0, 1.0}, {100, 2.0, 1.0}}, 50),
               "cuda_graphs choice: two timing points at 100");
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

TEST(FlagChoice, TimingsComeFromAssetsTimedBothWays) {
  const auto points =
      bench::flag_timing_points(two_modes(1000), "pure_eager", "pure_eager+batched_cfg", "r.json");
  ASSERT_EQ(points.size(), 2u);
  EXPECT_EQ(points[0].tokens, 1000);
  EXPECT_DOUBLE_EQ(points[0].off_s, 1.0);
  EXPECT_DOUBLE_EQ(points[0].on_s, 0.9);
  EXPECT_EQ(points[1].tokens, 100000);
  EXPECT_ERROR(bench::flag_timing_points(two_modes(1000), "kernel_fusion",
                                         "kernel_fusion+batched_cfg", "r.json"),
               "r.json: no asset was timed both as kernel_fusion and as kernel_fusion+batched_cfg");
}

// The bench report's graph table: capture cost and net saving per asset against the same
// path without graphs, the decision, and the graph fields through the JSON round trip.
TEST(FlagChoice, TheReportWeighsCaptureCostAgainstTimeSaved) {
  bench::BenchResult r = two_modes(1000);
  r.paths = {"beyond", "beyond-cuda_graphs"};
  r.cells = {timed("beyond", "small", {0.70, 0.72}), timed("beyond-cuda_graphs", "small", {0.75}),
             timed("beyond", "large", {10.2}), timed("beyond-cuda_graphs", "large", {10.1})};
  for (auto* c : {&r.cells[0], &r.cells[2]}) {
    c->graphs_captured = 1;
    c->graph_nodes = 653;
    c->graph_capture_seconds = 0.0042;
    c->launches = 700;
    c->setup_seconds = {0.01, 0.02};
  }
  r.cells[1].launches = r.cells[3].launches = 9000;
  const bench::BenchResult back = bench::result_from_json(bench::to_json(r), "r.json");
  ASSERT_EQ(back.cells.size(), 4u);
  EXPECT_EQ(back.cells[0].graphs_captured, 1);
  EXPECT_EQ(back.cells[0].graph_nodes, 653u);
  EXPECT_DOUBLE_EQ(back.cells[0].graph_capture_seconds, 0.0042);
  EXPECT_EQ(back.cells[0].setup_seconds, (std::vector<double>{0.01, 0.02}));
  const std::string md = bench::to_markdown(back);
  ASSERT_NE(md.find("## CUDA graphs: capture cost vs time saved"), std::string::npos) << md;
  EXPECT_NE(md.find("`beyond` vs `beyond-cuda_graphs`"), std::string::npos) << md;
  // small: 750 -> 710 ms, saved 40 ms: capture. large: 10.1 -> 10.2 s: eager.
  EXPECT_NE(md.find("| 1 | 653 | 4.20 | 9,000 -> 700 | 750.0 | 710.0 | +40.0 | 5.33% | capture |"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("| 10100.0 | 10200.0 | -100.0 | -0.99% | eager |"), std::string::npos) << md;
  // And run --graph-choice reads the same cells: on at 1,000 tokens, off at 100,000.
  const auto points = bench::flag_timing_points(back, "beyond-cuda_graphs", "beyond", "r.json");
  EXPECT_TRUE(choose_flag(Flag::cuda_graphs, points, 1000).on);
  EXPECT_FALSE(choose_flag(Flag::cuda_graphs, points, 100000).on);
}

std::string run_cli(const std::string& args, int* code) {
  const fs::path log = fs::temp_directory_path() / ("sparse3d_flagchoice_" + std::to_string(getpid()) + ".log");
  const int status =
      std::system(("SPARSE3D_CACHE_DIR=" + log.string() + ".cache " + std::string(SPARSE3D_CLI) +
                   " " + args + " > " + log.string() + " 2>&1").c_str());
  *code = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
  std::ifstream f(log);
  std::stringstream ss;
  ss << f.rdbuf();
  fs::remove(log);
  fs::remove_all(log.string() + ".cache");
  return ss.str();
}

TEST(FlagChoice, RunPicksTheModePerAssetFromABenchResult) {
  const std::string dir =
      (fs::temp_directory_path() / ("sparse3d_flagchoice_" + std::to_string(getpid()))).string();
  test::make_tiny_model_and_payloads(dir, 40);
  const payload::Manifest man = payload::read_manifest(dir + "/pl/manifest.json");
  const std::string asset = man.assets[0].name;
  const std::string common = "run --device cpu --steps 2 --checkpoint " + dir +
                             "/tiny.json --manifest " + dir + "/pl/manifest.json --asset " +
                             asset + " --out " + dir + "/out --cfg-choice " + dir + "/b.json";
  // The bench results below timed pure_eager with and without the flag.
  const std::string pure = common + " --path pure_eager";
  int code = 0;
  // Measured faster batched at 20 tokens and slower at 100,000: batched at 40 tokens.
  std::ofstream(dir + "/b.json") << bench::to_json(two_modes(20)).dump();
  std::string out = run_cli(pure, &code);
  ASSERT_EQ(code, 0) << out;
  EXPECT_NE(out.find("[" + asset + "] batched_cfg on: on / off = "), std::string::npos) << out;
  // Only slower batched: serial.
  bench::BenchResult slow = two_modes(20);
  slow.cells[1].loop_seconds = {1.5};
  std::ofstream(dir + "/b.json") << bench::to_json(slow).dump();
  out = run_cli(pure, &code);
  ASSERT_EQ(code, 0) << out;
  EXPECT_NE(out.find("[" + asset + "] batched_cfg off: on / off = "), std::string::npos) << out;
  // A result that never timed this path both ways: a clean error.
  out = run_cli(common + " --path kernel_fusion", &code);
  EXPECT_EQ(code, 1) << out;
  EXPECT_NE(out.find("sparse3d: error: "), std::string::npos) << out;
  EXPECT_NE(out.find("no asset was timed both as kernel_fusion"), std::string::npos) << out;
  // --graph-choice: the same rule for cuda_graphs. Chosen here, it is then refused by the CPU
  // backend, and that refusal is counted and printed, not silent.
  bench::BenchResult graphs = two_modes(20);
  graphs.paths = {"pure_eager", "pure_eager+cuda_graphs"};
  for (auto& c : graphs.cells)
    if (c.path == "pure_eager+batched_cfg") c.path = "pure_eager+cuda_graphs";
  std::ofstream(dir + "/g.json") << bench::to_json(graphs).dump();
  out = run_cli(pure + " --graph-choice " + dir + "/g.json", &code);
  ASSERT_EQ(code, 0) << out;
  EXPECT_NE(out.find("[" + asset + "] cuda_graphs on: on / off = "), std::string::npos) << out;
  EXPECT_NE(out.find("cuda_graphs: the CPU backend has no CUDA graphs"), std::string::npos) << out;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace s3d
