#include <gtest/gtest.h>

#include <algorithm>

#include "bench/report.h"
#include "bench/result_io.h"
#include "core/error.h"
#include "sparse3d/flags.h"

namespace s3d::bench {
namespace {

BenchResult small_result() {
  BenchResult r;
  r.date = "2026-11-29T09:00:00Z";
  r.fingerprint = io::Json{{"gpu_name", "NVIDIA H200"}};
  r.settings = io::Json{{"steps", 15}};
  r.assets = {{"a", 100, "default"}, {"b", 300, "default"}};
  r.paths = {"pure_eager"};
  r.peaks = Peaks{500, 700, "attn", "gemm"};
  for (const char* asset : {"a", "b"}) {
    Cell c;
    c.path = "pure_eager";
    c.asset = asset;
    c.loop_seconds = {1.0, 1.1, 0.9};
    c.launches = 1234;
    c.launches_by_op = {{"gemm", 10}};
    c.peak_bytes = 1 << 20;
    c.attention_seconds = 0.25;
    c.gemm_seconds = 0.5;
    c.attention_flops = 1e12;
    c.gemm_flops = 2e12;
    r.cells.push_back(c);
  }
  return r;
}

TEST(BenchResultIo, JsonRoundTripKeepsEveryRawNumber) {
  BenchResult r = small_result();
  BenchResult back = result_from_json(to_json(r), "test");
  EXPECT_EQ(back.date, r.date);
  EXPECT_EQ(back.paths, r.paths);
  ASSERT_EQ(back.cells.size(), 2u);
  EXPECT_EQ(back.cells[1].loop_seconds, r.cells[1].loop_seconds);
  EXPECT_EQ(back.cells[0].launches, 1234u);
  EXPECT_EQ(back.cells[0].launches_by_op.at("gemm"), 10u);
  EXPECT_DOUBLE_EQ(back.cells[0].gemm_flops, 2e12);
  EXPECT_DOUBLE_EQ(back.peaks.gemm_tflops, 700);
  EXPECT_EQ(to_json(back)["cells"], to_json(r)["cells"]);
}

TEST(BenchResultIo, DevicesAndTheQueueRoundTripAndReport) {
  BenchResult r = small_result();
  r.paths.push_back("pure_eager@0,1");
  Cell split = r.cells[1];
  split.path = "pure_eager@0,1";
  split.devices = 2;
  r.cells.push_back(split);
  r.queue.push_back({"pure_eager", "independent", 2, 1, 3.0, {1.5, 2.5}});
  r.queue.push_back({"pure_eager", "split", 1, 2, 2.0, {0.75, 1.25}});
  const BenchResult back = result_from_json(to_json(r), "test");
  ASSERT_EQ(back.cells.size(), 3u);
  EXPECT_EQ(back.cells[0].devices, 1);
  EXPECT_EQ(back.cells[2].devices, 2);
  ASSERT_EQ(back.queue.size(), 2u);
  EXPECT_EQ(back.queue[1].mode, "split");
  EXPECT_EQ(back.queue[1].devices_per_engine, 2);
  EXPECT_EQ(back.queue[0].latency_seconds, (std::vector<double>{1.5, 2.5}));
  EXPECT_EQ(plan_of_path(back.paths[1]).label(), "pure_eager");
  // The report's queue table: 2 assets in 3 s are 2,400 an hour, in 2 s 3,600.
  const std::string md = to_markdown(back);
  EXPECT_NE(md.find("## Serving a queue"), std::string::npos);
  EXPECT_NE(md.find("| pure_eager | 2 engines, 1 GPU each | 2 | 3.00 | 2400 | 2.00 | 2.50 |"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("| pure_eager | 1 engine over 2 GPUs | 2 | 2.00 | 3600 | 1.00 | 1.25 |"),
            std::string::npos)
      << md;
  io::Json bad = to_json(r);
  bad["queue"][0]["mode"] = "round-robin";
  EXPECT_THROW(result_from_json(bad, "q.json"), Error);
}

TEST(BenchResultIo, RejectsOtherFiles) {
  EXPECT_THROW(result_from_json(io::Json{{"schema", "x"}}, "f.json"), Error);
  io::Json j = to_json(small_result());
  j["cells"][0].erase("loop_seconds");
  try {
    result_from_json(j, "f.json");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("f.json"), std::string::npos) << e.what();
  }
}

TEST(BenchResultIo, BaselineTimingBecomesCells) {
  BenchResult r = small_result();
  io::Json timing = {{"assets", {{"a", {{"total_seconds", {2.0, 2.2}}}},
                                 {"b", {{"total_seconds", {3.0}}}}}}};
  add_baseline_timing(r, timing, "torch_eager", "t.json");
  ASSERT_EQ(r.cells.size(), 4u);
  EXPECT_EQ(r.paths.back(), "torch_eager");
  EXPECT_TRUE(r.baselines.back().ran);
  EXPECT_EQ(r.cells[2].loop_seconds, (std::vector<double>{2.0, 2.2}));
  // The report now has a speedup against the baseline.
  EXPECT_NE(to_markdown(r).find("torch_eager"), std::string::npos);
}

TEST(BenchResultIo, FailedCompileIsRecordedWithItsReason) {
  BenchResult r = small_result();
  io::Json timing = {{"compile", {{"ok", false}, {"stage", "first_call"}, {"reason", "InductorError: boom"}}},
                     {"assets", io::Json::object()}};
  add_baseline_timing(r, timing, "torch_compile", "t.json");
  EXPECT_EQ(r.cells.size(), 2u);
  ASSERT_FALSE(r.baselines.back().ran);
  EXPECT_NE(r.baselines.back().reason.find("InductorError: boom"), std::string::npos);
  EXPECT_NE(to_markdown(r).find("InductorError: boom"), std::string::npos);
}

TEST(BenchResultIo, BaselineOfASubsetSaysWhichAssetsItMissed) {
  BenchResult r = small_result();
  io::Json timing = {{"assets", {{"a", {{"total_seconds", {2.0}}}}}}};
  add_baseline_timing(r, timing, "torch_compile", "t.json");
  EXPECT_TRUE(r.baselines.back().ran);
  EXPECT_NE(r.baselines.back().reason.find("timed 1 of 2 assets (not: b)"), std::string::npos)
      << r.baselines.back().reason;
  EXPECT_EQ(r.cells.size(), 3u);
  io::Json none = {{"assets", {{"zz", {{"total_seconds", {2.0}}}}}}};
  EXPECT_THROW(add_baseline_timing(r, none, "torch_eager", "t.json"), Error);
}

TEST(ExecutionPlan, PathsFlagsAndLabels) {
  sparse3d::ExecutionPlan p = sparse3d::ExecutionPlan::parse("pure_eager");
  EXPECT_FALSE(p.on(sparse3d::Flag::batched_cfg));
  EXPECT_EQ(p.label(), "pure_eager");
  sparse3d::ExecutionPlan q = sparse3d::ExecutionPlan::parse("pure_eager+batched_cfg");
  EXPECT_TRUE(q.on(sparse3d::Flag::batched_cfg));
  EXPECT_EQ(q.label(), "pure_eager+batched_cfg");
  q.disable(sparse3d::Flag::batched_cfg);
  EXPECT_EQ(q.label(), "pure_eager");
  EXPECT_THROW(sparse3d::ExecutionPlan::parse("pure_eager+no_such_flag"), Error);
  EXPECT_THROW(sparse3d::ExecutionPlan::parse("warp_speed"), Error);
  const sparse3d::ExecutionPlan beyond = sparse3d::ExecutionPlan::parse("beyond");
  EXPECT_TRUE(beyond.on(sparse3d::Flag::cuda_graphs) && beyond.on(sparse3d::Flag::batched_cfg) &&
              beyond.on(sparse3d::Flag::cond_kv_cache));
  EXPECT_TRUE(beyond.on(sparse3d::Flag::step_tables));
}

}  // namespace
}  // namespace s3d::bench
