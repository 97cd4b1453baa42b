// The report's figure: its title from the result's own fields ("not recorded" where an older
// result lacks one), a panel for each kind of figure the result has (peak memory, first
// requests, throughput, leave-one-out), bars for few token counts, `bench --replot`, the
// committed figures re-rendered from their JSON, and bench's and profile's default path.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "bench/figures.h"
#include "bench/report.h"
#include "bench/result_io.h"
#include "bench/runner.h"
#include "bench_test_util.h"
#include "io_test_util.h"
#include "sparse3d/flags.h"
#include "svg_test_util.h"
#include "cli_test_util.h"

namespace s3d::bench {
namespace {

namespace fs = std::filesystem;
using svgtest::count;
using svgtest::layout_problem;
using svgtest::xml_problem;

constexpr double kGiB = 1024.0 * 1024 * 1024;

io::Json full_settings() {
  return {{"checkpoint", "/tmp/s3d/shape.json"},
          {"model_parameters", 1292253728},
          {"model",
           {{"family", "SLatFlowModel"},
            {"num_blocks", 30},
            {"model_channels", 1536},
            {"num_heads", 12},
            {"parameters", 1292253728}}},
          {"protocol", "both"},
          {"steps", 15},
          {"guidance", 7.5},
          {"guidance_interval", {0.0, 1.0}},
          {"guidance_rescale", 0.0}};
}

// The memory report's shape: three paths at two token counts, every cell with its peak.
BenchResult memory_result() {
  BenchResult r;
  r.date = "2026-11-30T17:49:58Z";
  r.fingerprint = {{"gpu_name", "NVIDIA H200"}, {"has_gpu", true}};
  r.settings = full_settings();
  r.settings["protocol"] = "repeated";
  r.assets = {{"a00-sphere-3664", 3664, "default"}, {"a09-torus-30227", 30227, "default"}};
  r.paths = {"pure_eager", "beyond", "fast"};
  const double peaks[3][2] = {{2.73, 3.77}, {3.59, 5.11}, {3.59, 5.11}};
  for (size_t p = 0; p < 3; ++p)
    for (size_t a = 0; a < 2; ++a) {
      Cell c = timed_cell(r.paths[p], r.assets[a].name, {1.0 + p + 10 * a});
      c.peak_bytes = static_cast<size_t>(peaks[p][a] * kGiB);
      r.cells.push_back(c);
    }
  return r;
}

std::string joined(const std::vector<std::string>& lines) {
  std::string s;
  for (const auto& l : lines) s += l + "\n";
  return s;
}

TEST(BenchFigure, TitleNamesModelProtocolStepsCfgGpuAndDate) {
  BenchResult r = memory_result();
  r.settings["protocol"] = "both";
  const std::vector<std::string> title = figure_title(r);
  ASSERT_EQ(title.size(), 2u);
  EXPECT_EQ(title[0],
            "sparse3d bench: model shape.json (SLatFlowModel, 30 blocks, C 1536, 12 heads), "
            "1.29B parameters");
  EXPECT_EQ(title[1],
            "service + repeated protocols, 15 steps, CFG 7.5 on t in [0, 1], NVIDIA H200, "
            "2026-11-30");
  const std::string svg = to_svg(r);
  for (const auto& part : {"shape.json", "1.29B parameters", "service + repeated protocols",
                           "15 steps", "CFG 7.5", "NVIDIA H200", "2026-11-30"})
    EXPECT_NE(svg.find(part), std::string::npos) << part;
  EXPECT_EQ(svg.find("sparse3d denoise latency"), std::string::npos);  // the old fixed title

  // The released sampler: an interval and guidance rescale; a repeated-only run.
  r.settings["protocol"] = "repeated";
  r.settings["steps"] = 12;
  r.settings["guidance_interval"] = {0.6, 1.0};
  r.settings["guidance_rescale"] = 0.7;
  EXPECT_EQ(figure_title(r)[1],
            "repeated protocol, 12 steps, CFG 7.5 on t in [0.6, 1], guidance rescale 0.7, "
            "NVIDIA H200, 2026-11-30");
  r.settings["guidance"] = 1.0;
  EXPECT_NE(figure_title(r)[1].find("no CFG"), std::string::npos);
  r.settings["device"] = "cpu";
  EXPECT_NE(figure_title(r)[1].find("CPU backend"), std::string::npos);
  EXPECT_EQ(figure_title(r)[1].find("H200"), std::string::npos);
}

// A result written before the protocol, the model's shape or the device were recorded (every
// committed result before 2026-12-01): what it has is shown, what it lacks says so.
TEST(BenchFigure, TitleSaysNotRecordedForWhatAnOlderResultLacks) {
  BenchResult r = memory_result();
  r.settings.erase("model");
  r.settings.erase("protocol");
  const std::vector<std::string> title = figure_title(r);
  EXPECT_EQ(title[0], "sparse3d bench: model shape.json, 1.29B parameters");
  EXPECT_EQ(title[1],
            "protocol not recorded, 15 steps, CFG 7.5 on t in [0, 1], NVIDIA H200, 2026-11-30");

  BenchResult bare = memory_result();
  bare.settings = io::Json::object();
  bare.fingerprint = io::Json::object();
  bare.date.clear();
  const std::string t = joined(figure_title(bare));
  for (const auto& part : {"model not recorded", "protocol not recorded", "steps not recorded",
                           "CFG not recorded", "GPU not recorded", "date not recorded"})
    EXPECT_NE(t.find(part), std::string::npos) << part << " in " << t;
  // Nothing made up: no step count, GPU or guidance that the result does not hold.
  EXPECT_EQ(t.find("H200"), std::string::npos);
  EXPECT_EQ(t.find("CFG 7.5"), std::string::npos);

  bare.settings = {{"checkpoint", "ck/shape.json"}, {"guidance", 7.5}};
  const std::string partial = joined(figure_title(bare));
  EXPECT_NE(partial.find("model shape.json, parameter count not recorded"), std::string::npos)
      << partial;
  EXPECT_NE(partial.find("CFG 7.5 (interval not recorded)"), std::string::npos) << partial;
  EXPECT_EQ(xml_problem(to_svg(bare)), "");
}

TEST(BenchFigure, MemoryPanelPlotsPeakPerPathAndTokenCount) {
  const BenchResult r = memory_result();
  const std::string svg = to_svg(r);
  EXPECT_EQ(xml_problem(svg), "");
  EXPECT_EQ(layout_problem(svg), "");
  EXPECT_NE(svg.find(">Peak device memory in use per request</text>"), std::string::npos);
  // Two token counts: bars, one per path and asset, each with its peak.
  EXPECT_EQ(count(svg, "<polyline"), 0u);
  EXPECT_EQ(count(svg, " GiB</title></rect>"), 6u);
  EXPECT_NE(svg.find("<title>pure_eager, a00-sphere-3664 (3,664 tokens): 2.73 GiB</title>"),
            std::string::npos);
  EXPECT_NE(svg.find("<title>fast, a09-torus-30227 (30,227 tokens): 5.11 GiB</title>"),
            std::string::npos);
  EXPECT_NE(svg.find("No PyTorch baseline in this result"), std::string::npos);

  // With the baseline's own peaks, it is a series of the memory panel.
  BenchResult with_torch = r;
  with_torch.paths.push_back("torch_eager");
  with_torch.baselines = {{"torch_eager", true, ""}};
  for (const auto& [asset, gib] : {std::pair<std::string, double>{"a00-sphere-3664", 2.67},
                                   {"a09-torus-30227", 3.76}}) {
    Cell c = timed_cell("torch_eager", asset, {2.0});
    c.peak_bytes = static_cast<size_t>(gib * kGiB);
    with_torch.cells.push_back(c);
  }
  const std::string t = to_svg(with_torch);
  EXPECT_EQ(layout_problem(t), "");
  EXPECT_NE(t.find("<title>torch_eager, a09-torus-30227 (30,227 tokens): 3.76 GiB</title>"),
            std::string::npos);
  EXPECT_EQ(t.find("No PyTorch"), std::string::npos);
  // A baseline that ran without peaks is named as lacking them.
  for (auto& c : with_torch.cells)
    if (c.path == "torch_eager") c.peak_bytes = 0;
  EXPECT_NE(to_svg(with_torch).find("No peak memory recorded for torch_eager."), std::string::npos);

  // Without any peak, no memory panel.
  BenchResult none = r;
  for (auto& c : none.cells) c.peak_bytes = 0;
  EXPECT_EQ(to_svg(none).find("Peak device memory"), std::string::npos);
}

// One token count (the 49,152-token report): a bar chart, the asset named, nothing clipped.
TEST(BenchFigure, SingleTokenCountIsABarChart) {
  BenchResult r = memory_result();
  r.assets = {{"a00-sphere-49152", 49152, "default"}};
  r.paths = {"fast", "low_memory"};
  r.cells = {timed_cell("fast", "a00-sphere-49152", {29.873}),
             timed_cell("low_memory", "a00-sphere-49152", {29.906})};
  r.cells[0].peak_bytes = static_cast<size_t>(6.07 * kGiB);
  r.cells[1].peak_bytes = static_cast<size_t>(3.42 * kGiB);
  const std::string svg = to_svg(r);
  EXPECT_EQ(xml_problem(svg), "");
  EXPECT_EQ(layout_problem(svg), "");
  EXPECT_EQ(count(svg, "<polyline"), 0u);
  EXPECT_EQ(count(svg, "<circle"), 0u);
  EXPECT_EQ(count(svg, "</title></rect>"), 4u);  // latency and memory, two paths each
  EXPECT_NE(svg.find(">29.873 s</text>"), std::string::npos);
  EXPECT_NE(svg.find(">29.906 s</text>"), std::string::npos);
  EXPECT_NE(svg.find(">3.42 GiB</text>"), std::string::npos);
  EXPECT_EQ(count(svg, ">a00-sphere-49152 (49,152 tokens)</text>"), 2u);
}

// Three or more token counts: lines over active tokens, one marker per timed cell.
TEST(BenchFigure, ManyTokenCountsAreLines) {
  BenchResult r = memory_result();
  r.assets.push_back({"a05-torus-11833", 11833, "default"});
  for (const auto& p : r.paths) {
    Cell c = timed_cell(p, "a05-torus-11833", {4.0});
    c.peak_bytes = static_cast<size_t>(4 * kGiB);
    r.cells.push_back(c);
  }
  const std::string svg = to_svg(r);
  EXPECT_EQ(layout_problem(svg), "");
  EXPECT_EQ(count(svg, "<polyline"), 6u);  // latency and memory, three paths each
  EXPECT_EQ(count(svg, "<circle"), 18u);
  EXPECT_EQ(count(svg, ">active tokens</text>"), 2u);
}

// The service protocol's first requests, leave-one-out and throughput get their panels.
TEST(BenchFigure, ServiceLeaveOneOutAndThroughputPanels) {
  BenchResult r = memory_result();
  r.settings["protocol"] = "both";
  r.settings["service_warmup"] = "the first 2,748 tokens of a09-torus-30227";
  for (auto& c : r.cells) c.first_request_seconds = c.loop_seconds[0] * 1.5;
  r.paths.push_back("fast-tuned_gemm");
  r.cells.push_back(timed_cell("fast-tuned_gemm", "a00-sphere-3664", {3.1}));
  r.cells.push_back(timed_cell("fast-tuned_gemm", "a09-torus-30227", {12.5}));
  r.ablation.reference_path = "fast";
  r.ablation.flags = {sparse3d::Flag::tuned_gemm};
  r.ablation.variant_path = {{sparse3d::Flag::tuned_gemm, "fast-tuned_gemm"}};
  r.throughput = {{"fast", "a00-sphere-3664", 2, {5.0}, 0},
                  {"fast", "a00-sphere-3664", 4, {9.0}, 0}};
  const std::string svg = to_svg(r);
  EXPECT_EQ(xml_problem(svg), "");
  EXPECT_EQ(layout_problem(svg), "");
  EXPECT_NE(svg.find(">First request on a fresh engine, whole call (service protocol)</text>"),
            std::string::npos);
  EXPECT_NE(svg.find("the first 2,748 tokens of a09-torus-30227"), std::string::npos);
  EXPECT_NE(svg.find("<title>fast, a00-sphere-3664 (3,664 tokens): 4.500 s</title>"),
            std::string::npos);  // its first request: 1.5 x 3.0 s
  // Leave-one-out: fast 3 s and 13 s, without tuned_gemm 3.1 and 12.5: mean of +3.33% and
  // -3.85%.
  EXPECT_NE(svg.find("Leave-one-out from fast"), std::string::npos);
  EXPECT_NE(svg.find(">tuned_gemm</text>"), std::string::npos);
  EXPECT_NE(svg.find(">-0.26%</text>"), std::string::npos);
  // The variant is left out of every other panel.
  EXPECT_EQ(svg.find("fast-tuned_gemm"), std::string::npos);
  // Throughput: K = 1 from the regular cell (3 s), K = 2 in 5 s (1.20x), K = 4 in 9 s (1.33x).
  EXPECT_NE(svg.find("Multi-asset batching"), std::string::npos);
  EXPECT_NE(svg.find("<title>fast, a00-sphere-3664: 4 copies, 1.33x</title>"), std::string::npos);
}

// `sparse3d bench --replot`: the figure from the JSON alone; the markdown on request; the
// JSON untouched; usage errors exit 2.
// The shared runner of the command's tests (cli_test_util.h), with the output returned
// through `output`; `dir` is kept for the call sites' sake (the runner uses its own folder).
int run_cli(const std::string& args, std::string& output, const fs::path& /*dir*/) {
  s3d::test::CliResult r = s3d::test::run_cli(args);
  output = r.output;
  return r.code;
}

TEST(BenchFigure, ReplotRendersTheFigureFromTheJsonAlone) {
  test::TempDir tmp;
  const fs::path dir = tmp.dir();
  BenchResult r = memory_result();
  write_report_files(r, tmp.dir(), "mem");
  const std::string json = test::read_bytes(tmp.file("mem.json"));
  test::write_bytes(tmp.file("mem.svg"), "stale");
  std::string out;
  ASSERT_EQ(run_cli("bench --replot " + tmp.file("mem.json"), out, dir), 0) << out;
  EXPECT_EQ(test::read_bytes(tmp.file("mem.svg")), to_svg(r));
  EXPECT_EQ(test::read_bytes(tmp.file("mem.json")), json);
  ASSERT_EQ(run_cli("bench --replot " + tmp.file("mem.json") + " --svg " + tmp.file("b.svg") +
                        " --md " + tmp.file("b.md"),
                    out, dir),
            0)
      << out;
  EXPECT_EQ(test::read_bytes(tmp.file("b.svg")), to_svg(r));
  EXPECT_EQ(test::read_bytes(tmp.file("b.md")), to_markdown(r));
  EXPECT_NE(out.find("wrote " + tmp.file("b.svg")), std::string::npos) << out;

  EXPECT_EQ(run_cli("bench --replot " + tmp.file("missing.json"), out, dir), 1) << out;
  EXPECT_NE(out.find("missing.json"), std::string::npos) << out;
  EXPECT_EQ(run_cli("bench --svg " + tmp.file("c.svg"), out, dir), 2) << out;
  EXPECT_EQ(run_cli("bench --manifest m.json", out, dir), 2) << out;
  EXPECT_NE(out.find("--checkpoint"), std::string::npos) << out;
  EXPECT_EQ(run_cli("bench --checkpoint c.json", out, dir), 2) << out;
  EXPECT_NE(out.find("--manifest"), std::string::npos) << out;
}

// Every committed bench result's figure is what this build renders from its JSON (so a
// change to the renderer comes with regenerated figures), lies on its canvas, and holds a
// panel for each kind of figure its JSON has.
TEST(BenchFigure, CommittedFiguresAreRenderedFromTheirJson) {
  const fs::path results = fs::path(SPARSE3D_TEST_DATA) / ".." / ".." / "bench" / "results";
  ASSERT_TRUE(fs::is_directory(results)) << results;
  int checked = 0;
  for (const auto& entry : fs::directory_iterator(results)) {
    if (entry.path().extension() != ".json") continue;
    const io::Json j = io::read_json_file(entry.path().string());
    if (!j.is_object() || j.value("schema", "") != "sparse3d-bench/1") continue;
    SCOPED_TRACE(entry.path().filename().string());
    const BenchResult r = result_from_json(j, entry.path().string());
    fs::path svg_path = entry.path();
    svg_path.replace_extension(".svg");
    ASSERT_TRUE(fs::exists(svg_path)) << "no figure beside it";
    const std::string svg = to_svg(r);
    EXPECT_TRUE(test::read_bytes(svg_path.string()) == svg)
        << "out of date: sparse3d bench --replot " << entry.path().string();
    EXPECT_EQ(xml_problem(svg), "");
    EXPECT_EQ(layout_problem(svg), "");
    // Every word of the title (a line wider than the figure wraps onto the next).
    for (const auto& line : figure_title(r)) {
      std::istringstream words(line);
      for (std::string w; words >> w;)
        EXPECT_NE(svg.find(xml_escape(w)), std::string::npos) << w << " of: " << line;
    }
    bool peaks = false, first = false;
    std::set<int64_t> tokens;
    for (const auto& a : r.assets) tokens.insert(a.tokens);
    for (const auto& c : r.cells) {
      peaks |= c.peak_bytes > 0;
      first |= c.first_request_seconds.has_value();
    }
    EXPECT_EQ(peaks,
              svg.find(">Peak device memory in use per request</text>") != std::string::npos);
    EXPECT_EQ(first, svg.find(">First request on a fresh engine") != std::string::npos);
    EXPECT_EQ(!r.ablation.flags.empty(), svg.find(">Leave-one-out from ") != std::string::npos);
    EXPECT_EQ(!r.throughput.empty(), svg.find(">Multi-asset batching") != std::string::npos);
    // Fewer than three token counts: bars (only the throughput panel's x is K).
    if (tokens.size() < 3 && r.throughput.empty()) {
      EXPECT_EQ(count(svg, "<polyline"), 0u);
    }
    ++checked;
  }
  EXPECT_GE(checked, 15);
}

// bench's and profile's default path is the library's (that of `sparse3d run`).
TEST(BenchFigure, DefaultPathIsTheLibraryDefault) {
  EXPECT_EQ(BenchOptions{}.paths, std::vector<std::string>{std::string(sparse3d::default_path())});
  test::TempDir tmp;
  std::string out;
  ASSERT_EQ(run_cli("bench --help", out, tmp.dir()), 0) << out;
  const std::string def = std::string(sparse3d::default_path());
  EXPECT_NE(out.find("--paths TEXT=[" + def + "]"), std::string::npos) << out;
  ASSERT_EQ(run_cli("profile --help", out, tmp.dir()), 0) << out;
  EXPECT_NE(out.find("--path TEXT=" + def + " "), std::string::npos) << out;
  EXPECT_EQ(out.find("=pure_eager"), std::string::npos) << out;
}

}  // namespace
}  // namespace s3d::bench
