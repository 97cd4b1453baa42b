// The bench's service protocol: the warm-up count, the figures on a result computed by hand,
// the JSON (new fields round trip; results written before them still read), the markdown
// headline, the baseline's first calls, and the whole protocol on the CPU backend (tiny
// models) through run_bench and through the command line.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "bench/figures.h"
#include "bench/report.h"
#include "bench_test_util.h"
#include "bench/result_io.h"
#include "bench/runner.h"
#include "core/error.h"
#include "io/json.h"
#include "model/checkpoint.h"
#include "model/config.h"
#include "payload/generate.h"
#include "cli_test_util.h"

namespace s3d::bench {
namespace {

namespace fs = std::filesystem;

TEST(BenchService, WarmupTokensAreOutsideTheAssetSet) {
  // The same cases as tools/torch_ref/service_selftest.py (run.py's copy of the rule).
  const int64_t cells = 64 * 64 * 64;
  EXPECT_EQ(service_warmup_tokens({3664, 30227}, 0, cells), 2748);
  EXPECT_EQ(service_warmup_tokens({1, 61, 250}, 0, cells), 2);   // 3/4 of 1 is 0: up, past 1
  EXPECT_EQ(service_warmup_tokens({3, 1, 2, 10}, 0, 1000), 4);   // up, past 1, 2, 3
  EXPECT_EQ(service_warmup_tokens({100, 200}, 150, 1000), 150);
  EXPECT_EQ(service_warmup_tokens({100, 200}, 250, 1000), 250);  // above the largest: raster
  for (int64_t bad : {100, 200, 1001, -1}) {
    try {
      service_warmup_tokens({100, 200}, bad, 1000);
      ADD_FAILURE() << bad << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("--warmup-tokens"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(service_warmup_tokens({1, 2}, 0, 2), Error);  // every count of the grid taken
  EXPECT_THROW(service_warmup_tokens({}, 0, cells), Error);
}

TEST(BenchService, ProtocolNames) {
  for (Protocol p : {Protocol::Repeated, Protocol::Service, Protocol::Both})
    EXPECT_EQ(parse_protocol(protocol_name(p)), p);
  EXPECT_THROW(parse_protocol("cold"), Error);
}

// Two assets. Seconds:
//                 first   repeats (whole call)     loop_seconds (engine's clock)
// beyond   a1     0.12    0.10 0.11 0.09           0.095 0.105 0.085
//          a2     0.33    0.30                     0.29
// torch    a1     0.50    -                        0.40 0.44 (its whole loop: no call times)
//          a2     0.90    0.95 0.85 (call times)   0.80 0.84
// pure_eager has no first request (not in the service figures); beyond-no-x is a
// leave-one-out variant with one (left out too).
BenchResult service_result() {
  BenchResult r;
  r.date = "2026-12-01T10:00:00Z";
  r.settings = {{"steps", 15}, {"protocol", "both"},
                {"service_warmup", "the first 2,748 tokens of a2"}};
  r.assets = {{"a1", 1000, "default"}, {"a2", 3000, "default"}};
  r.paths = {"pure_eager", "beyond", "beyond-cond_kv_cache", "torch_eager"};
  Cell b1 = timed_cell("beyond", "a1", {0.095, 0.105, 0.085});
  b1.first_request_seconds = 0.12;
  b1.first_request_setup_seconds = 0.01;
  b1.first_request_loop_seconds = 0.08;
  b1.first_request_counters = RequestCounters{2, 0, 1};
  b1.request_wall_seconds = {0.10, 0.11, 0.09};
  b1.repeat_counters = RequestCounters{0, 0, 0};
  Cell b2 = timed_cell("beyond", "a2", {0.29});
  b2.first_request_seconds = 0.33;
  b2.request_wall_seconds = {0.30};
  Cell t1 = timed_cell("torch_eager", "a1", {0.40, 0.44});
  t1.first_request_seconds = 0.50;
  Cell t2 = timed_cell("torch_eager", "a2", {0.80, 0.84});
  t2.first_request_seconds = 0.90;
  t2.request_wall_seconds = {0.95, 0.85};
  Cell v1 = timed_cell("beyond-cond_kv_cache", "a1", {0.2});
  v1.first_request_seconds = 0.3;
  r.cells = {timed_cell("pure_eager", "a1", {0.2}), timed_cell("pure_eager", "a2", {0.6}),
             b1, b2, t1, t2, v1};
  r.ablation.reference_path = "beyond";
  r.ablation.flags = {sparse3d::Flag::cond_kv_cache};
  r.ablation.variant_path = {{sparse3d::Flag::cond_kv_cache, "beyond-cond_kv_cache"}};
  r.baselines = {{"torch_eager", true, ""}};
  return r;
}

TEST(BenchService, FiguresComputedByHand) {
  const ServiceFigures f = derive(service_result()).service;
  ASSERT_EQ(f.paths.size(), 2u);  // pure_eager: no first request; the variant: left out
  const ServicePath& beyond = f.paths[0];
  const ServicePath& torch = f.paths[1];
  EXPECT_EQ(beyond.path, "beyond");
  EXPECT_FALSE(beyond.baseline);
  EXPECT_TRUE(torch.baseline);
  // beyond: first / median of the whole-call repeats: 0.12 / 0.10, 0.33 / 0.30.
  EXPECT_DOUBLE_EQ(*beyond.assets[0].repeat_median_s, 0.10);
  EXPECT_NEAR(*beyond.assets[0].first_over_median, 1.2, 1e-12);
  EXPECT_NEAR(*beyond.assets[1].first_over_median, 1.1, 1e-12);
  EXPECT_NEAR(*beyond.max_first_over_median, 1.2, 1e-12);
  EXPECT_EQ(beyond.max_first_over_median_asset, "a1");
  // torch: a1 has no call times, so its loop times (median 0.42); a2 its call times (0.90).
  EXPECT_NEAR(*torch.assets[0].repeat_median_s, 0.42, 1e-12);
  EXPECT_NEAR(*torch.assets[1].repeat_median_s, 0.90, 1e-12);
  EXPECT_TRUE(torch.vs.empty());
  ASSERT_EQ(beyond.vs.size(), 1u);
  const ServiceComparison& v = beyond.vs[0];
  EXPECT_EQ(v.against, "torch_eager");
  // Service speedups 0.50 / 0.12 and 0.90 / 0.33; repeated 0.42 / 0.10 and 0.90 / 0.30.
  EXPECT_NEAR(*v.service[0], 0.50 / 0.12, 1e-12);
  EXPECT_NEAR(*v.repeated[0], 4.2, 1e-12);
  EXPECT_NEAR(*v.ratio[0], (0.50 / 0.12) / 4.2, 1e-12);
  EXPECT_NEAR(*v.ratio[1], (0.90 / 0.33) / 3.0, 1e-12);
  EXPECT_EQ(v.min_ratio_asset, "a2");  // 0.909 < 0.992
  EXPECT_NEAR(*v.min_ratio, (0.90 / 0.33) / 3.0, 1e-12);
  EXPECT_NEAR(*v.geomean_service, std::sqrt((0.50 / 0.12) * (0.90 / 0.33)), 1e-12);
  EXPECT_NEAR(*v.geomean_repeated, std::sqrt(4.2 * 3.0), 1e-12);
  EXPECT_EQ(v.n, 2);
}

TEST(BenchService, NoFirstRequestsNoServiceFigures) {
  BenchResult r = service_result();
  for (auto& c : r.cells) c.first_request_seconds.reset();
  EXPECT_TRUE(derive(r).service.paths.empty());
  EXPECT_EQ(to_markdown(r).find("Service protocol"), std::string::npos);
  // A bad first time names its cell.
  r.cells[2].first_request_seconds = -1.0;
  try {
    derive(r);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("(beyond, a1)"), std::string::npos) << e.what();
  }
}

TEST(BenchService, JsonRoundTripKeepsTheServiceFields) {
  const BenchResult r = service_result();
  const io::Json j = to_json(r);
  const io::Json& c = j["cells"][2];
  EXPECT_DOUBLE_EQ(c["first_request_seconds"].get<double>(), 0.12);
  EXPECT_EQ(c["request_wall_seconds"], io::Json({0.10, 0.11, 0.09}));
  EXPECT_EQ(c["first_request_counters"]["qualifications_run"], 2);
  EXPECT_EQ(c["first_request_counters"]["fallbacks"], 1);
  EXPECT_EQ(c["repeat_counters"]["qualifications_run"], 0);
  EXPECT_TRUE(j["cells"][0]["first_request_seconds"].is_null());
  EXPECT_TRUE(j["cells"][0]["first_request_counters"].is_null());
  const io::Json& d = j["derived"]["service"]["paths"];
  EXPECT_FALSE(d.contains("pure_eager"));
  EXPECT_NEAR(d["beyond"]["assets"]["a1"]["first_over_median"].get<double>(), 1.2, 1e-12);
  EXPECT_NEAR(d["beyond"]["vs"]["torch_eager"]["assets"]["a1"]["repeated_speedup"].get<double>(),
              4.2, 1e-12);
  EXPECT_EQ(d["beyond"]["vs"]["torch_eager"]["min_ratio_asset"], "a2");
  EXPECT_TRUE(d["torch_eager"]["baseline"].get<bool>());

  const BenchResult back = result_from_json(io::parse_json(j.dump(), "r"), "r.json");
  EXPECT_EQ(to_json(back)["cells"], j["cells"]);
  EXPECT_EQ(back.cells[2].first_request_counters->qualifications_run, 2u);
  EXPECT_FALSE(back.cells[0].first_request_seconds.has_value());
  EXPECT_EQ(to_markdown(back), to_markdown(r));
}

TEST(BenchService, ResultsWrittenBeforeTheServiceProtocolStillRead) {
  // A committed result of 2026-11-30 (no service fields at all).
  const std::string old = std::string(SPARSE3D_TEST_DATA) +
                          "/../../bench/results/2026-11-30-h200-fast.json";
  const BenchResult r = result_from_json(io::read_json_file(old), old);
  ASSERT_FALSE(r.cells.empty());
  for (const auto& c : r.cells) {
    EXPECT_FALSE(c.first_request_seconds.has_value());
    EXPECT_TRUE(c.request_wall_seconds.empty());
    EXPECT_FALSE(c.repeat_counters.has_value());
  }
  const std::string md = to_markdown(r);
  EXPECT_EQ(md.find("Service protocol"), std::string::npos);
  EXPECT_EQ(md.find("## Repeated protocol"), std::string::npos);
  EXPECT_NE(md.find("## Denoise latency per asset"), std::string::npos);
  // The same with the service fields removed from a new result's cells.
  io::Json j = to_json(service_result());
  for (auto& c : j["cells"])
    for (const char* k : {"first_request_seconds", "first_request_setup_seconds",
                          "first_request_loop_seconds", "first_request_counters",
                          "request_wall_seconds", "repeat_counters"})
      c.erase(k);
  const BenchResult stripped = result_from_json(j, "stripped.json");
  EXPECT_TRUE(derive(stripped).service.paths.empty());
}

bool has_line(const std::string& text, const std::string& line) {
  return text.find("\n" + line + "\n") != std::string::npos;
}

TEST(BenchService, MarkdownHeadlineTables) {
  const std::string md = to_markdown(service_result());
  const size_t service = md.find("## Service protocol: each asset's first request");
  const size_t speedup = md.find("## Service protocol: speedup over torch_eager");
  const size_t inside = md.find("## Service protocol: inside the first requests");
  const size_t repeated = md.find("## Repeated protocol");
  const size_t latency = md.find("## Denoise latency per asset");
  ASSERT_NE(service, std::string::npos) << md;
  EXPECT_LT(service, speedup);
  EXPECT_LT(speedup, inside);
  EXPECT_LT(inside, repeated);
  EXPECT_LT(repeated, latency);
  EXPECT_NE(md.find("(the first 2,748 tokens of a2)"), std::string::npos);
  EXPECT_TRUE(has_line(md, "| asset | tokens | beyond | torch_eager |")) << md;
  EXPECT_TRUE(has_line(md, "| a1 | 1,000 | 120.0 / 100.0 (1.20x) | 500.0 / 420.0 (1.19x) |"))
      << md;
  EXPECT_TRUE(has_line(md, "| largest first / median |  | 1.20x (a1) | 1.19x (a1) |")) << md;
  EXPECT_TRUE(has_line(md, "| a1 | 1,000 | 4.17x / 4.20x (0.992) |")) << md;
  EXPECT_TRUE(has_line(md, "| a2 | 3,000 | 2.73x / 3.00x (0.909) |")) << md;
  EXPECT_TRUE(has_line(md, "| smallest service / repeated |  | 0.909 (a2) |")) << md;
  // a1: 120 ms = 30 outside the sampler's clock + 10 set-up + 80 loop.
  EXPECT_TRUE(has_line(md, "| a1 | 1,000 | 30.0 / 10.0 / 80.0; 2 qualified, 0 from cache, "
                           "1 fallbacks |"))
      << md;
}

TEST(BenchService, BaselineTimingCarriesFirstCalls) {
  BenchResult r;
  r.assets = {{"a", 100, "default"}, {"b", 300, "default"}};
  r.paths = {"pure_eager"};
  const io::Json timing = {
      {"protocol", "service"},
      {"assets",
       {{"a",
         {{"first_seconds", 2.5}, {"total_seconds", {2.0, 2.2}}, {"call_seconds", {2.1, 2.3}}}},
        {"b", {{"first_seconds", 3.5}, {"total_seconds", io::Json::array()}}}}}};
  add_baseline_timing(r, timing, "torch_eager", "t.json");
  ASSERT_EQ(r.cells.size(), 2u);
  EXPECT_DOUBLE_EQ(*r.cells[0].first_request_seconds, 2.5);
  EXPECT_EQ(r.cells[0].request_wall_seconds, (std::vector<double>{2.1, 2.3}));
  EXPECT_EQ(r.cells[0].loop_seconds, (std::vector<double>{2.0, 2.2}));
  EXPECT_TRUE(r.cells[1].loop_seconds.empty());  // a service-only run: first calls alone
  EXPECT_DOUBLE_EQ(*r.cells[1].first_request_seconds, 3.5);
  // Call times that do not match the repeats, and an asset with neither, are errors.
  BenchResult s;
  s.assets = {{"a", 100, "default"}};
  const io::Json mismatched = {
      {"assets", {{"a", {{"total_seconds", {2.0}}, {"call_seconds", {2.1, 2.2}}}}}}};
  EXPECT_THROW(add_baseline_timing(s, mismatched, "torch_eager", "t.json"), Error);
  EXPECT_THROW(add_baseline_timing(s, {{"assets", {{"a", {{"first_seconds", "x"}}}}}},
                                   "torch_eager", "t.json"),
               Error);
}

// Tiny models on the CPU backend, each in a folder of its own (ctest runs tests in parallel).
struct BenchServiceCpu : ::testing::Test {
  fs::path dir;
  void SetUp() override {
    dir = fs::temp_directory_path() /
          ("sparse3d_bench_service_" + std::to_string(getpid()) + "_" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir);
    fs::create_directories(dir / "work");
  }
  void TearDown() override { fs::remove_all(dir); }

  BenchOptions tiny_options() {
    model::make_checkpoint(model::preset("tiny"), 3, (dir / "tiny").string(), DType::BF16);
    payload::GenerateOptions g = payload::GenerateOptions::small();
    g.default_tokens = {40, 90};
    payload::generate_payloads((dir / "pl").string(), g);
    BenchOptions o;
    o.checkpoint = (dir / "tiny.json").string();
    o.manifest = (dir / "pl" / "manifest.json").string();
    o.paths = {"pure_eager", "beyond-cuda_graphs"};
    o.sampler = sparse3d::SamplerSettings::protocol();
    o.sampler.steps = 2;
    o.repeats = 2;
    o.device = sparse3d::DeviceChoice::CPU;
    o.measure_peaks = false;
    o.work_dir = (dir / "work").string();
    return o;
  }
  // What the log said, and that each engine's cache folder existed, empty, when it loaded.
  std::vector<std::string> lines;
  int empty_cache_folders = 0;
  Log logger() {
    return [this](const std::string& line) {
      lines.push_back(line);
      const std::string key = "qualification cache ";
      const size_t at = line.find(key);
      if (line.rfind("service protocol, path ", 0) == 0 && at != std::string::npos) {
        const size_t from = at + key.size();
        const std::string folder = line.substr(from, line.find(" (empty)") - from);
        if (fs::is_directory(folder) && fs::is_empty(folder)) ++empty_cache_folders;
      }
    };
  }
  size_t first_line(const std::string& prefix) const {
    for (size_t i = 0; i < lines.size(); ++i)
      if (lines[i].rfind(prefix, 0) == 0) return i;
    return lines.size();
  }
};

TEST_F(BenchServiceCpu, BothProtocolsOnFreshEnginesInOrder) {
  const BenchOptions o = tiny_options();
  const BenchResult r = run_bench(o, logger());
  EXPECT_EQ(empty_cache_folders, 2);  // one engine per path, each with an empty folder
  EXPECT_TRUE(fs::is_empty(dir / "work"));  // and the folders are gone
  EXPECT_EQ(r.settings["protocol"], "both");
  EXPECT_EQ(r.settings["service_warmup_tokens"], 30);  // 3/4 of 40
  EXPECT_NE(r.settings["service_warmup"].get<std::string>().find("the first 30 tokens of a01"),
            std::string::npos)
      << r.settings.dump();
  ASSERT_EQ(r.cells.size(), 4u);
  for (const Cell& c : r.cells) {
    SCOPED_TRACE(c.path + " " + c.asset);
    ASSERT_TRUE(c.first_request_seconds.has_value());
    EXPECT_GT(*c.first_request_seconds, 0);
    // The whole call holds the engine's own set-up and loop.
    EXPECT_GE(*c.first_request_seconds,
              c.first_request_setup_seconds + c.first_request_loop_seconds);
    EXPECT_EQ(c.loop_seconds.size(), 2u);
    ASSERT_EQ(c.request_wall_seconds.size(), 2u);
    for (size_t k = 0; k < 2; ++k) EXPECT_GE(c.request_wall_seconds[k], c.loop_seconds[k]);
    ASSERT_TRUE(c.first_request_counters && c.repeat_counters);
    // beyond qualifies the null context at each new token count on its first request, and
    // never again; pure_eager has nothing to qualify.
    const uint64_t expected = c.path == "pure_eager" ? 0 : 1;
    EXPECT_EQ(c.first_request_counters->qualifications_run, expected);
    EXPECT_EQ(c.repeat_counters->qualifications_run, 0u);
    EXPECT_EQ(c.first_request_counters->fallbacks, 0u);
  }
  // The order: each path's warm-up, then its first requests; then the repeats.
  const size_t warm = first_line("[warm-up]"), firsts = first_line("[first request]"),
               repeats = first_line("[repeat 1/2]");
  EXPECT_LT(warm, firsts);
  EXPECT_LT(firsts, repeats);
  EXPECT_LT(repeats, lines.size());
  EXPECT_NE(to_markdown(r).find("## Service protocol: each asset's first request"),
            std::string::npos);
}

TEST_F(BenchServiceCpu, ServiceOnlyAndRepeatedOnly) {
  BenchOptions o = tiny_options();
  o.paths = {"beyond-cuda_graphs"};
  o.protocol = Protocol::Service;
  o.warmup_tokens = 100;  // more than any asset has: the grid's first voxels
  const BenchResult s = run_bench(o, logger());
  EXPECT_EQ(s.settings["service_warmup_tokens"], 100);
  EXPECT_EQ(s.settings["service_warmup"], "the grid's first 100 voxels in raster order");
  ASSERT_EQ(s.cells.size(), 2u);
  for (const Cell& c : s.cells) {
    EXPECT_TRUE(c.first_request_seconds.has_value());
    EXPECT_TRUE(c.loop_seconds.empty());  // no repeats
  }
  EXPECT_EQ(first_line("[repeat"), lines.size());
  EXPECT_NE(to_markdown(s).find("| a00-sphere-40 | 40 | "), std::string::npos);

  lines.clear();
  o.protocol = Protocol::Repeated;
  const BenchResult r = run_bench(o, logger());
  EXPECT_EQ(first_line("[first request]"), lines.size());
  EXPECT_EQ(first_line("service protocol"), lines.size());
  EXPECT_FALSE(r.settings.contains("service_warmup"));
  for (const Cell& c : r.cells) {
    EXPECT_FALSE(c.first_request_seconds.has_value());
    EXPECT_EQ(c.loop_seconds.size(), 2u);
  }
  EXPECT_EQ(to_markdown(r).find("Service protocol"), std::string::npos);

  o.protocol = Protocol::Service;
  o.warmup_tokens = 40;  // an asset's count
  EXPECT_THROW(run_bench(o, logger()), Error);
  o.warmup_tokens = 0;
  o.ablate = true;  // leave-one-out needs repeats
  EXPECT_THROW(run_bench(o, logger()), Error);
}

TEST_F(BenchServiceCpu, DenseWarmupIsTwoCopiesOfTheFirstAsset) {
  model::make_checkpoint(model::preset("tiny-ss"), 3, (dir / "ss").string(), DType::BF16);
  payload::generate_payloads((dir / "dpl").string(), payload::GenerateOptions::dense_small());
  BenchOptions o;
  o.checkpoint = (dir / "ss.json").string();
  o.manifest = (dir / "dpl" / "manifest.json").string();
  o.paths = {"beyond-cuda_graphs"};
  o.sampler = sparse3d::SamplerSettings::released_sparse_structure();
  o.sampler.steps = 1;
  o.repeats = 1;
  o.protocol = Protocol::Service;
  o.device = sparse3d::DeviceChoice::CPU;
  o.measure_peaks = false;
  o.work_dir = (dir / "work").string();
  const BenchResult r = run_bench(o, logger());
  EXPECT_EQ(r.settings["service_warmup_tokens"], 0);
  EXPECT_EQ(r.settings["service_warmup"].get<std::string>().rfind("2 copies of ", 0), 0u)
      << r.settings.dump();
  for (const Cell& c : r.cells) EXPECT_TRUE(c.first_request_seconds.has_value());
}

// The command line: --protocol and --device cpu reach the runner; a bad protocol is refused.
// The shared runner of the command's tests (cli_test_util.h), with the output returned
// through `output`; `dir` is kept for the call sites' sake (the runner uses its own folder).
int run_cli(const std::string& args, std::string& output, const fs::path& /*dir*/) {
  s3d::test::CliResult r = s3d::test::run_cli(args);
  output = r.output;
  return r.code;
}

TEST_F(BenchServiceCpu, CommandLine) {
  const BenchOptions o = tiny_options();
  const std::string common = "bench --device cpu --no-torch --checkpoint " + o.checkpoint +
                             " --manifest " + o.manifest +
                             " --paths beyond-cuda_graphs --steps 2 --repeats 1 --out " +
                             (dir / "out").string() + " --stem s";
  std::string out;
  ASSERT_EQ(run_cli(common + " --protocol service --warmup-tokens 25", out, dir), 0) << out;
  const io::Json j = io::read_json_file((dir / "out" / "s.json").string());
  EXPECT_EQ(j["settings"]["protocol"], "service");
  EXPECT_EQ(j["settings"]["service_warmup_tokens"], 25);
  EXPECT_TRUE(j["cells"][0]["first_request_seconds"].is_number());
  EXPECT_NE(out.find("## Service protocol: each asset's first request"), std::string::npos);
  EXPECT_EQ(run_cli(common + " --protocol cold", out, dir), 2);  // a parse error
  EXPECT_NE(out.find("--protocol"), std::string::npos) << out;
}

}  // namespace
}  // namespace s3d::bench
