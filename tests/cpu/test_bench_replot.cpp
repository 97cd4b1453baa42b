// `sparse3d bench --replot` (the markdown report from a saved JSON alone) and bench's and
// profile's default path. The figure is no longer drawn here: tools/bench_figure.py draws it
// from the JSON (tests/python/test_bench_figure.py).
#include <gtest/gtest.h>

#include <filesystem>

#include "bench/report.h"
#include "bench/runner.h"
#include "bench_test_util.h"
#include "cli_test_util.h"
#include "io_test_util.h"
#include "sparse3d/flags.h"

namespace s3d::bench {
namespace {

namespace fs = std::filesystem;

BenchResult small_result() {
  BenchResult r;
  r.date = "2026-11-30T17:49:58Z";
  r.fingerprint = {{"gpu_name", "NVIDIA H200"}, {"has_gpu", true}};
  r.settings = {{"checkpoint", "/tmp/s3d/shape.json"}, {"steps", 15}, {"protocol", "repeated"}};
  r.assets = {{"a00-sphere-3664", 3664, "default"}, {"a09-torus-30227", 30227, "default"}};
  r.paths = {"pure_eager", "fast"};
  for (size_t p = 0; p < 2; ++p)
    for (size_t a = 0; a < 2; ++a)
      r.cells.push_back(timed_cell(r.paths[p], r.assets[a].name, {1.0 + p + 10 * a}));
  return r;
}

int run_cli(const std::string& args, std::string& output) {
  s3d::test::CliResult r = s3d::test::run_cli(args);
  output = r.output;
  return r.code;
}

// The markdown from the JSON alone, beside it or where --md says; the JSON untouched; the
// figure's command named; usage errors exit 2; --svg is gone.
TEST(BenchReplot, RendersTheMarkdownFromTheJsonAlone) {
  test::TempDir tmp;
  const BenchResult r = small_result();
  write_report_files(r, tmp.dir(), "mem");
  const std::string json = test::read_bytes(tmp.file("mem.json"));
  test::write_bytes(tmp.file("mem.md"), "stale");
  std::string out;
  ASSERT_EQ(run_cli("bench --replot " + tmp.file("mem.json"), out), 0) << out;
  EXPECT_EQ(test::read_bytes(tmp.file("mem.md")), to_markdown(r));
  EXPECT_EQ(test::read_bytes(tmp.file("mem.json")), json);
  EXPECT_NE(out.find("python3 tools/bench_figure.py " + tmp.file("mem.json")), std::string::npos)
      << out;
  EXPECT_FALSE(fs::exists(tmp.file("mem.svg")));
  ASSERT_EQ(run_cli("bench --replot " + tmp.file("mem.json") + " --md " + tmp.file("b.md"), out),
            0)
      << out;
  EXPECT_EQ(test::read_bytes(tmp.file("b.md")), to_markdown(r));
  EXPECT_NE(out.find("wrote " + tmp.file("b.md")), std::string::npos) << out;

  EXPECT_EQ(run_cli("bench --replot " + tmp.file("missing.json"), out), 1) << out;
  EXPECT_NE(out.find("missing.json"), std::string::npos) << out;
  EXPECT_EQ(run_cli("bench --replot " + tmp.file("mem.json") + " --svg x.svg", out), 2) << out;
  EXPECT_EQ(run_cli("bench --md " + tmp.file("c.md"), out), 2) << out;
  EXPECT_EQ(run_cli("bench --manifest m.json", out), 2) << out;
  EXPECT_NE(out.find("--checkpoint"), std::string::npos) << out;
  EXPECT_EQ(run_cli("bench --checkpoint c.json", out), 2) << out;
  EXPECT_NE(out.find("--manifest"), std::string::npos) << out;
}

// bench's and profile's default path is the library's (that of `sparse3d run`).
TEST(BenchReplot, DefaultPathIsTheLibraryDefault) {
  EXPECT_EQ(BenchOptions{}.paths, std::vector<std::string>{std::string(sparse3d::default_path())});
  std::string out;
  ASSERT_EQ(run_cli("bench --help", out), 0) << out;
  const std::string def = std::string(sparse3d::default_path());
  EXPECT_NE(out.find("--paths TEXT=[" + def + "]"), std::string::npos) << out;
  ASSERT_EQ(run_cli("profile --help", out), 0) << out;
  EXPECT_NE(out.find("--path TEXT=" + def + " "), std::string::npos) << out;
  EXPECT_EQ(out.find("=pure_eager"), std::string::npos) << out;
}

}  // namespace
}  // namespace s3d::bench
