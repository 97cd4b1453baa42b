// The bench report on a small synthetic result whose figures are computed by hand below:
// JSON round trip, markdown rows, "-" for what was not measured, the files.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "bench/figures.h"
#include "bench/kernel_bandwidth.h"
#include "bench/report.h"
#include "ops/bandwidth.h"
#include "bench_test_util.h"
#include "io_test_util.h"

namespace s3d::bench {
namespace {

constexpr double kGiB = 1024.0 * 1024 * 1024;
// The two flags of the synthetic leave-one-out ("qk" and "gelu" below).
constexpr sparse3d::Flag kQk = sparse3d::Flag::qk_rmsnorm_rope_inplace;
constexpr sparse3d::Flag kGelu = sparse3d::Flag::gelu_tanh;

// Two default assets and one long-tail asset. Medians (s):
//            a1     a2    t1
// pure_eager 0.10   0.20  0.50     reference
// fused      0.05   0.15  -        no long-tail cell
// beyond     0.04   0.10  0.30     instrumented on a1 only
// torch_eager 0.20  0.40  -        baseline; torch_compile did not run
// beyond-no-qk   0.05  0.11  -     leave-one-out variants of beyond
// beyond-no-gelu 0.039 0.098 0.30
BenchResult synthetic() {
  BenchResult r;
  r.date = "2026-12-01T10:00:00Z";
  r.fingerprint = {{"gpu_name", "NVIDIA H200"}, {"cudnn", "9.10.0"}};
  r.settings = {{"steps", 15}, {"repeats", 3}};
  r.assets = {{"a1", 1000, "default"}, {"a2", 3000, "default"}, {"t1", 5000, "long-tail"}};
  r.paths = {"pure_eager", "fused", "beyond", "beyond-no-qk", "beyond-no-gelu", "torch_eager"};
  r.cells = {timed_cell("pure_eager", "a1", {0.11, 0.09, 0.10}),
             timed_cell("pure_eager", "a2", {0.20}),
             timed_cell("pure_eager", "t1", {0.5}),
             timed_cell("fused", "a1", {0.05}),
             timed_cell("fused", "a2", {0.15}),
             timed_cell("beyond", "a1", {0.04}),
             timed_cell("beyond", "a2", {0.10}),
             timed_cell("beyond", "t1", {0.3}),
             timed_cell("torch_eager", "a1", {0.2}),
             timed_cell("torch_eager", "a2", {0.4}),
             timed_cell("beyond-no-qk", "a1", {0.05}),
             timed_cell("beyond-no-qk", "a2", {0.11}),
             timed_cell("beyond-no-gelu", "a1", {0.039}),
             timed_cell("beyond-no-gelu", "a2", {0.098}),
             timed_cell("beyond-no-gelu", "t1", {0.3})};
  Cell& b1 = r.cells[5];
  b1.launches = 1000;
  b1.launches_by_op = {{"attention", 120}, {"gemm", 880}};
  b1.peak_bytes = static_cast<size_t>(2 * kGiB);
  b1.attention_seconds = 0.01;
  b1.gemm_seconds = 0.02;
  b1.attention_flops = 5e12;  // 0.01 s at 500 TFLOPS
  b1.gemm_flops = 10e12;      // 0.01 s at 1000 TFLOPS
  Cell& b2 = r.cells[6];
  b2.launches = 1200;
  b2.peak_bytes = static_cast<size_t>(3 * kGiB);
  r.peaks = {500, 1000, "d128 h12", "M x 1536 x 6144"};
  r.ablation.reference_path = "beyond";
  r.ablation.flags = {kGelu, kQk};
  r.ablation.calls_per_iteration = {{kQk, 60}};
  r.ablation.variant_path = {{kQk, "beyond-no-qk"}, {kGelu, "beyond-no-gelu"}};
  r.baselines = {{"torch_eager", true, ""}, {"torch_compile", false, "inductor | failed"}};
  return r;
}

bool has_line(const std::string& text, const std::string& line) {
  return text.find("\n" + line + "\n") != std::string::npos;
}

TEST(BenchReport, JsonRoundTripCarriesRawAndDerivedNumbers) {
  const BenchResult r = synthetic();
  const io::Json j = io::parse_json(to_json(r).dump(2), "report");
  EXPECT_EQ(j["date"], r.date);
  EXPECT_EQ(j["fingerprint"]["gpu_name"], "NVIDIA H200");
  EXPECT_EQ(j["settings"]["repeats"], 3);
  ASSERT_EQ(j["cells"].size(), r.cells.size());
  EXPECT_EQ(j["cells"][0]["loop_seconds"], io::Json({0.11, 0.09, 0.10}));
  EXPECT_EQ(j["cells"][5]["launches_by_op"]["gemm"], 880);
  EXPECT_EQ(j["peaks"]["attention_tflops"], 500);
  EXPECT_EQ(j["baselines"][1]["reason"], "inductor | failed");
  EXPECT_EQ(j["ablation"]["variant_path"]["qk_rmsnorm_rope_inplace"], "beyond-no-qk");
  EXPECT_EQ(j["ablation"]["flags"], io::Json({"gelu_tanh", "qk_rmsnorm_rope_inplace"}));

  const io::Json& d = j["derived"];
  EXPECT_EQ(d["reference_path"], "pure_eager");
  EXPECT_EQ(d["comparators"], io::Json({"pure_eager", "torch_eager"}));
  EXPECT_EQ(d["sets"], io::Json({"default", "long-tail"}));
  const io::Json& pe = d["paths"]["pure_eager"]["assets"]["a1"];
  EXPECT_DOUBLE_EQ(pe["median_s"].get<double>(), 0.10);
  EXPECT_DOUBLE_EQ(pe["min_s"].get<double>(), 0.09);
  EXPECT_DOUBLE_EQ(pe["max_s"].get<double>(), 0.11);
  EXPECT_EQ(pe["repeats"], 3);
  EXPECT_TRUE(pe["launches"].is_null());  // not counted: null, not 0

  // fused vs pure_eager: reductions 0.5 and 0.25.
  const io::Json& fused = d["paths"]["fused"]["sets"]["default"]["vs"]["pure_eager"];
  EXPECT_NEAR(fused["macro_reduction"].get<double>(), 0.375, 1e-12);
  EXPECT_NEAR(fused["geomean_speedup"].get<double>(), std::sqrt(8.0 / 3.0), 1e-12);
  EXPECT_EQ(fused["n_assets"], 2);
  EXPECT_TRUE(
      d["paths"]["fused"]["sets"]["long-tail"]["vs"]["pure_eager"]["macro_reduction"].is_null());

  // beyond: reductions 0.6 and 0.5, speedups 2.5 and 2 (vs torch 5 and 4).
  const io::Json& beyond = d["paths"]["beyond"];
  const io::Json& bd = beyond["sets"]["default"];
  EXPECT_NEAR(bd["vs"]["pure_eager"]["macro_reduction"].get<double>(), 0.55, 1e-12);
  EXPECT_NEAR(bd["vs"]["pure_eager"]["geomean_speedup"].get<double>(), std::sqrt(5.0), 1e-12);
  EXPECT_NEAR(bd["vs"]["torch_eager"]["geomean_speedup"].get<double>(), std::sqrt(20.0), 1e-12);
  EXPECT_NEAR(beyond["sets"]["long-tail"]["vs"]["pure_eager"]["macro_reduction"].get<double>(), 0.4,
              1e-12);
  EXPECT_EQ(bd["peak_bytes"], static_cast<size_t>(3 * kGiB));
  EXPECT_EQ(bd["launches_min"], 1000);
  EXPECT_EQ(bd["launches_max"], 1200);
  EXPECT_NEAR(bd["latency_s"]["mean"].get<double>(), 0.07, 1e-12);
  EXPECT_NEAR(bd["other_s"]["mean"].get<double>(), 0.01, 1e-12);
  EXPECT_EQ(bd["other_s"]["n_assets"], 1);
  EXPECT_NEAR(bd["attention_share"]["mean"].get<double>(), 0.25, 1e-12);
  const io::Json& b1 = beyond["assets"]["a1"];
  EXPECT_NEAR(b1["ideal_s"].get<double>(), 0.02, 1e-15);
  EXPECT_NEAR(b1["wall_over_ideal"].get<double>(), 2.0, 1e-12);
  EXPECT_NEAR(b1["gemm_share"].get<double>(), 0.5, 1e-12);
  EXPECT_TRUE(beyond["assets"]["a2"]["ideal_s"].is_null());
  EXPECT_TRUE(d["paths"]["torch_eager"]["assets"]["t1"]["median_s"].is_null());
  EXPECT_TRUE(d["paths"]["beyond-no-qk"]["ablation_variant"].get<bool>());
  EXPECT_FALSE(d["paths"]["beyond"]["ablation_variant"].get<bool>());

  // Leave-one-out, default set: qk +10 ms on both (+25%, +10%); gelu -1 and -2 ms
  // (-2.5%, -2%). Sorted by average delta: qk first.
  const io::Json& loo = d["leave_one_out"]["default"];
  EXPECT_EQ(loo["largest_asset"], "a2");
  EXPECT_EQ(loo["n_assets"], 2);
  ASSERT_EQ(loo["rows"].size(), 2u);
  const io::Json& qk = loo["rows"][0];
  EXPECT_EQ(qk["flag"], "qk_rmsnorm_rope_inplace");
  EXPECT_EQ(qk["calls_per_iteration"], 60);
  EXPECT_NEAR(qk["avg_delta_ms"].get<double>(), 10.0, 1e-9);
  EXPECT_NEAR(qk["avg_delta_pct"].get<double>(), 17.5, 1e-9);
  EXPECT_NEAR(qk["largest_delta_pct"].get<double>(), 10.0, 1e-9);
  const io::Json& gelu = loo["rows"][1];
  EXPECT_TRUE(gelu["calls_per_iteration"].is_null());
  EXPECT_NEAR(gelu["avg_delta_ms"].get<double>(), -1.5, 1e-9);
  EXPECT_NEAR(gelu["avg_delta_pct"].get<double>(), -2.25, 1e-9);
  EXPECT_NEAR(gelu["largest_delta_ms"].get<double>(), -2.0, 1e-9);
  // Long-tail: the qk variant did not time t1, so its row has no numbers.
  const io::Json& tail = d["leave_one_out"]["long-tail"];
  EXPECT_EQ(tail["rows"][0]["flag"], "gelu_tanh");
  EXPECT_NEAR(tail["rows"][0]["avg_delta_ms"].get<double>(), 0.0, 1e-9);
  EXPECT_TRUE(tail["rows"][1]["avg_delta_ms"].is_null());
  EXPECT_EQ(tail["rows"][1]["n_assets"], 0);
}

TEST(BenchReport, MarkdownHasTheExpectedRows) {
  const std::string md = to_markdown(synthetic());
  EXPECT_EQ(md.rfind("# sparse3d bench, 2026-12-01T10:00:00Z\n", 0), 0u);
  EXPECT_TRUE(has_line(md, "- GPU: NVIDIA H200")) << md;
  EXPECT_TRUE(has_line(md, "- Settings: repeats: 3, steps: 15")) << md;
  // Per-asset latency: variants only in the leave-one-out table; "-" where not timed.
  EXPECT_TRUE(has_line(md, "| asset | set | tokens | pure_eager | fused | beyond | torch_eager |"))
      << md;
  EXPECT_TRUE(has_line(md,
                       "| a1 | default | 1,000 | 100.0 (90.0-110.0) | 50.0 (50.0-50.0) | "
                       "40.0 (40.0-40.0) | 200.0 (200.0-200.0) |"))
      << md;
  EXPECT_TRUE(has_line(
      md, "| t1 | long-tail | 5,000 | 500.0 (500.0-500.0) | - | 300.0 (300.0-300.0) | - |"))
      << md;
  // Summary per set.
  EXPECT_TRUE(has_line(md, "## Summary: default set (2 assets)")) << md;
  EXPECT_TRUE(has_line(
      md,
      "| path | reduction vs pure_eager | speedup vs pure_eager | speedup vs torch_eager | "
      "peak GiB | launches/loop | attention ms (%) | GEMM ms (%) | other ms (%) | "
      "ideal ms | wall/ideal |"))
      << md;
  EXPECT_TRUE(has_line(md, "| pure_eager | 0.00% | 1.00x | 2.00x | - | - | - | - | - | - | - |"))
      << md;
  EXPECT_TRUE(has_line(md, "| fused | 37.50% | 1.63x | 3.27x | - | - | - | - | - | - | - |")) << md;
  EXPECT_TRUE(has_line(md,
                       "| beyond | 55.00% | 2.24x | 4.47x | 3.00 | 1,000-1,200 | "
                       "10.0 (25.0%) (1/2 assets) | 20.0 (50.0%) (1/2 assets) | "
                       "10.0 (25.0%) (1/2 assets) | 20.0 (1/2 assets) | 2.00x (1/2 assets) |"))
      << md;
  EXPECT_TRUE(
      has_line(md, "| torch_eager | -100.00% | 0.50x | 1.00x | - | - | - | - | - | - | - |"))
      << md;
  EXPECT_TRUE(has_line(md, "| fused | - | - | - | - | - | - | - | - | - | - |"))
      << md;  // long-tail
  EXPECT_EQ(md.find("| beyond-no-qk |"), std::string::npos);
  // Leave-one-out in the article's format.
  EXPECT_TRUE(
      has_line(md, "| Candidate | Calls/iter | avg delta ms (%) | largest-asset delta ms (%) |"))
      << md;
  EXPECT_TRUE(has_line(md, "| qk_rmsnorm_rope_inplace | 60 | +10.0 (+17.50%) | +10.0 (+10.00%) |"))
      << md;
  EXPECT_TRUE(has_line(md, "| gelu_tanh | - | -1.5 (-2.25%) | -2.0 (-2.00%) |")) << md;
  EXPECT_TRUE(has_line(md, "| qk_rmsnorm_rope_inplace | 60 | - (0/1 assets) | - (0/1 assets) |"))
      << md;
  EXPECT_LT(md.find("| qk_rmsnorm_rope_inplace | 60 | +10.0"), md.find("| gelu_tanh | - | -1.5"));
  // Baselines that did not run, and the method.
  EXPECT_TRUE(has_line(md, "- torch_compile: inductor | failed")) << md;
  EXPECT_NE(md.find("## How measured"), std::string::npos);
  EXPECT_NE(md.find("500.0 TFLOPS at d128 h12"), std::string::npos);
}

// --also-compare: reduction and speedup against a second engine path, per asset pairs it
// timed: beyond vs fused on the default set: 1 - 0.04/0.05 = 20%, 1 - 0.10/0.15 = 33.3%,
// mean 26.67%; speedup sqrt(1.25 * 1.5) = 1.37x.
TEST(BenchReport, AlsoComparedPathGetsReductionAndSpeedupColumns) {
  BenchResult r = synthetic();
  r.settings["also_compare"] = {"fused"};
  const std::string md = to_markdown(r);
  EXPECT_TRUE(has_line(
      md,
      "| path | reduction vs pure_eager | speedup vs pure_eager | reduction vs fused | "
      "speedup vs fused | speedup vs torch_eager | peak GiB | launches/loop | attention ms (%) | "
      "GEMM ms (%) | other ms (%) | ideal ms | wall/ideal |"))
      << md;
  EXPECT_NE(md.find("| beyond | 55.00% | 2.24x | 26.67% | 1.37x | 4.47x |"), std::string::npos)
      << md;
  EXPECT_NE(md.find("| fused | 37.50% | 1.63x | 0.00% | 1.00x | 3.27x |"), std::string::npos) << md;
  r.settings["also_compare"] = {"ghost"};
  EXPECT_ERROR(to_markdown(r), "also_compare names 'ghost'");
}

TEST(BenchReport, MarkdownOfAnEmptyResultSaysDash) {
  const std::string md = to_markdown(BenchResult{});
  EXPECT_EQ(md.rfind("# sparse3d bench, -\n", 0), 0u);
  EXPECT_TRUE(has_line(md, "- Reference path: -"));
  EXPECT_EQ(md.find("## Leave-one-out"), std::string::npos);
  EXPECT_EQ(md.find("did not run"), std::string::npos);
  EXPECT_EQ(md.find("nan"), std::string::npos);
}

TEST(BenchReport, InconsistentResultsAreErrors) {
  BenchResult r = synthetic();
  r.cells.push_back(timed_cell("fused", "a1", {0.06}));
  EXPECT_ERROR(to_json(r), "two cells for (fused, a1)");
  r = synthetic();
  r.cells.push_back(timed_cell("fused", "ghost", {0.06}));
  EXPECT_ERROR(to_markdown(r), "cell (fused, ghost)", "not in the manifest");
  r = synthetic();
  r.assets.push_back(r.assets[0]);
  EXPECT_ERROR(derive(r), "asset 'a1' listed twice");
}

TEST(BenchReport, WritesTheJsonAndTheMarkdown) {
  test::TempDir tmp;
  const BenchResult r = synthetic();
  const std::string dir = tmp.file("out/nested");
  write_report_files(r, dir, "bench-2026-12-01");
  const io::Json j = io::read_json_file(dir + "/bench-2026-12-01.json");
  EXPECT_EQ(j["derived"]["reference_path"], "pure_eager");
  EXPECT_EQ(test::read_bytes(dir + "/bench-2026-12-01.md"), to_markdown(r));
  // The figure is tools/bench_figure.py's (matplotlib), drawn from the JSON: no SVG here.
  EXPECT_FALSE(std::filesystem::exists(dir + "/bench-2026-12-01.svg"));
  test::write_bytes(tmp.file("file"), "x");
  EXPECT_ERROR(write_report_files(r, tmp.file("file"), "s"), "cannot create folder");
}

// bench-kernels states the tolerance rows' target with them, and a refused candidate as
// refused (the rows come from ops::measure_bandwidth on a GPU).
TEST(BenchReport, BenchKernelsReportNamesTheToleranceTarget) {
  bench::KernelBandwidthReport r;
  r.date = "2026-11-30T00:00:00Z";
  auto m = std::make_shared<ops::KernelBandwidth>();
  r.measured = m;
  m->copy_bytes = 2e9;
  m->copy_seconds = 5e-4;
  m->rows.push_back(
      {"modulated_layernorm", "modulated_layernorm", "bitwise", 30227, 1.9e8, 1.7e-4, ""});
  EXPECT_EQ(bench::to_markdown(r).find("Role \"tolerance\""), std::string::npos);
  m->rows.push_back(
      {"modulated_layernorm", "fast_modulated_layernorm", "tolerance", 30227, 1.9e8, 5e-5, ""});
  m->rows.push_back({"qk_rmsnorm_rope", "fast_qk_rmsnorm_rope", "tolerance", 30227, 1.9e8, 0,
                     "head_dim 264 exceeds 256"});
  const std::string md = bench::to_markdown(r);
  EXPECT_NE(md.find("| modulated_layernorm | fast_modulated_layernorm | tolerance | 30,227 |"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("target >= 80% of the copy bandwidth at 30,227 tokens"), std::string::npos);
  EXPECT_NE(md.find("refused: head_dim 264 exceeds 256"), std::string::npos) << md;
  const io::Json j = bench::to_json(r);
  EXPECT_EQ(j["rows"][2]["skipped"], "head_dim 264 exceeds 256");
  EXPECT_EQ(j["rows"][1]["candidate"], "fast_modulated_layernorm");
}

}  // namespace
}  // namespace s3d::bench
