// The typed flag list (include/sparse3d/flags.h): names and labels round-trip, the paths
// carry the flags they always had, unknown names are errors that list the known ones, and
// every flag survives the bench's result JSON (write, read back, same plan).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "bench/report.h"
#include "bench/result_io.h"
#include "core/error.h"
#include "sparse3d/flags.h"

namespace s3d {
namespace {

using sparse3d::ExecutionPlan;
using sparse3d::Flag;
using sparse3d::FlagSet;

const char* const kKnownFlags =
    "batched_cfg, null_context_exact, null_context_cache, cond_kv_cache, step_tables, "
    "cuda_graphs, qk_rmsnorm_rope_inplace, modulated_layernorm, gated_residual_add, "
    "qk_rmsnorm_cross_inplace, gelu_tanh, gemm_gelu_epilogue, fast_modulated_layernorm, "
    "fast_qk_rmsnorm_rope, fast_qk_rmsnorm_cross, tuned_gemm, tuned_attention, chunked_mlp";
const char* const kKnownPaths =
    "pure_eager, kernel_fusion, prior_exact_null, canonical_cache_null, "
    "canonical_cache_combined, beyond, fast, low_memory";

// The message of the Error `f` throws ("" when it throws none).
template <class F>
std::string error_of(F f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Flags, EveryNameRoundTripsThroughParseFlag) {
  ASSERT_EQ(sparse3d::flag_infos().size(), static_cast<size_t>(sparse3d::kFlagCount));
  for (size_t i = 0; i < sparse3d::flag_infos().size(); ++i) {
    const sparse3d::FlagInfo& f = sparse3d::flag_infos()[i];
    EXPECT_EQ(static_cast<size_t>(f.flag), i) << f.name;  // declaration order
    EXPECT_EQ(sparse3d::parse_flag(f.name), f.flag);
    EXPECT_EQ(sparse3d::name(f.flag), f.name);
    EXPECT_EQ(&sparse3d::info(f.flag), &f);
    EXPECT_FALSE(f.help.empty()) << f.name;
    EXPECT_FALSE(f.contract.empty()) << f.name;
    EXPECT_TRUE(f.contract == "bitwise" || f.contract.starts_with("tolerance: ")) << f.contract;
  }
}

// A flag renamed after its op keeps its earlier spelling readable (old result files).
TEST(Flags, AnEarlierSpellingParsesAsTheFlagsNameNow) {
  EXPECT_EQ(sparse3d::parse_flag("fast_head_rmsnorm"), Flag::fast_qk_rmsnorm_cross);
  EXPECT_EQ(sparse3d::name(Flag::fast_qk_rmsnorm_cross), "fast_qk_rmsnorm_cross");
  EXPECT_EQ(sparse3d::ExecutionPlan::parse("kernel_fusion+fast_head_rmsnorm").label(),
            "kernel_fusion+fast_qk_rmsnorm_cross");
}

TEST(Flags, ContractsAreTheDocumentedOnes) {
  for (const auto& f : sparse3d::flag_infos()) {
    const bool tolerance =
        f.flag == Flag::batched_cfg || f.flag == Flag::step_tables ||
        f.flag == Flag::gemm_gelu_epilogue || f.flag == Flag::fast_modulated_layernorm ||
        f.flag == Flag::fast_qk_rmsnorm_rope || f.flag == Flag::fast_qk_rmsnorm_cross ||
        f.flag == Flag::tuned_gemm || f.flag == Flag::tuned_attention ||
        f.flag == Flag::chunked_mlp;
    EXPECT_EQ(f.contract != "bitwise", tolerance) << f.name << ": " << f.contract;
  }
}

TEST(Flags, UnknownFlagIsAnErrorListingTheKnownOnes) {
  EXPECT_EQ(error_of([] { sparse3d::parse_flag("warp_drive"); }),
            std::string("unknown optimization flag 'warp_drive' (known: ") + kKnownFlags + ")");
  EXPECT_EQ(error_of([] { sparse3d::parse_flag(""); }),
            std::string("unknown optimization flag '' (known: ") + kKnownFlags + ")");
}

TEST(Flags, UnknownPathIsAnErrorListingTheKnownOnes) {
  EXPECT_EQ(error_of([] { ExecutionPlan::parse("warp_speed"); }),
            std::string("unknown execution path 'warp_speed' (known: ") + kKnownPaths + ")");
  EXPECT_EQ(error_of([] { ExecutionPlan::of_path("beyond+batched_cfg"); }),
            std::string("unknown execution path 'beyond+batched_cfg' (known: ") + kKnownPaths +
                ")");
  EXPECT_EQ(error_of([] { ExecutionPlan::parse("pure_eager+warp_drive"); }),
            std::string("unknown optimization flag 'warp_drive' (known: ") + kKnownFlags + ")");
  EXPECT_EQ(error_of([] { ExecutionPlan::parse("beyond-"); }),
            std::string("unknown optimization flag '' (known: ") + kKnownFlags + ")");
}

TEST(Flags, PathsCarryTheirFlags) {
  const FlagSet fusion = {Flag::qk_rmsnorm_rope_inplace, Flag::modulated_layernorm,
                          Flag::gated_residual_add, Flag::gemm_gelu_epilogue};
  const FlagSet combined = FlagSet(fusion).set(Flag::null_context_cache);
  const FlagSet beyond = FlagSet(combined)
                             .set(Flag::cond_kv_cache)
                             .set(Flag::batched_cfg)
                             .set(Flag::step_tables)
                             .set(Flag::cuda_graphs);
  const FlagSet tolerance = {Flag::fast_modulated_layernorm, Flag::fast_qk_rmsnorm_rope,
                             Flag::fast_qk_rmsnorm_cross};
  const std::vector<std::pair<std::string, FlagSet>> want = {
      {"pure_eager", {}},
      {"kernel_fusion", fusion},
      {"prior_exact_null", {Flag::null_context_exact}},
      {"canonical_cache_null", {Flag::null_context_cache}},
      {"canonical_cache_combined", combined},
      {"beyond", beyond},
      {"fast", FlagSet(beyond).set(tolerance)},
      {"low_memory", FlagSet(beyond)
                         .set(tolerance)
                         .set(Flag::batched_cfg, false)
                         .set(Flag::cond_kv_cache, false)
                         .set(Flag::chunked_mlp)},
  };
  ASSERT_EQ(sparse3d::execution_paths().size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    const sparse3d::PathInfo& p = sparse3d::execution_paths()[i];
    EXPECT_EQ(p.name, want[i].first);
    EXPECT_EQ(p.flags, want[i].second) << p.name;
    EXPECT_FALSE(p.help.empty()) << p.name;
  }
  EXPECT_EQ(sparse3d::default_path(), "fast");
  EXPECT_EQ(ExecutionPlan::of_path(sparse3d::default_path()).label(), "fast");
}

// Every path, and every path with each flag turned the other way, survives its label.
TEST(Flags, EveryLabelRoundTripsThroughParse) {
  for (const auto& p : sparse3d::execution_paths()) {
    const ExecutionPlan plan = ExecutionPlan::of_path(p.name);
    EXPECT_EQ(plan.label(), p.name);
    EXPECT_EQ(plan.flags(), p.flags) << p.name;
    for (const auto& f : sparse3d::flag_infos()) {
      ExecutionPlan edited = plan;
      edited.set(f.flag, !plan.on(f.flag));
      const std::string label = edited.label();
      EXPECT_EQ(label, std::string(p.name) + (plan.on(f.flag) ? "-" : "+") + std::string(f.name));
      const ExecutionPlan back = ExecutionPlan::parse(label);
      EXPECT_EQ(back.path(), p.name) << label;
      EXPECT_EQ(back.flags(), edited.flags()) << label;
      EXPECT_EQ(back.label(), label);
    }
  }
  // Edits apply left to right; the label is canonical.
  EXPECT_EQ(ExecutionPlan::parse("pure_eager+batched_cfg-batched_cfg").label(), "pure_eager");
  EXPECT_EQ(ExecutionPlan::parse("pure_eager+gelu_tanh+batched_cfg").label(),
            "pure_eager+batched_cfg+gelu_tanh");
}

TEST(Flags, FlagSetListsItsFlagsInDeclarationOrder) {
  FlagSet s = {Flag::gemm_gelu_epilogue, Flag::batched_cfg, Flag::cuda_graphs};
  EXPECT_EQ(s.flags(),
            (std::vector<Flag>{Flag::batched_cfg, Flag::cuda_graphs, Flag::gemm_gelu_epilogue}));
  EXPECT_TRUE(s.any());
  s.set(Flag::batched_cfg, false).set(Flag::cuda_graphs, false);
  s.set(Flag::gemm_gelu_epilogue, false);
  EXPECT_FALSE(s.any());
  EXPECT_EQ(s, FlagSet());
}

// A result with one measured plan, and a leave-one-out of `flag` against it.
bench::BenchResult result_with(const ExecutionPlan& plan, Flag flag) {
  bench::BenchResult r;
  r.date = "2026-11-30T09:00:00Z";
  r.fingerprint = io::Json{{"gpu_name", "test"}};
  r.settings = io::Json{{"steps", 15}};
  r.assets = {{"a", 100, "default"}};
  ExecutionPlan other = plan;
  other.set(flag, !plan.on(flag));
  r.paths = {plan.label(), other.label()};
  for (const auto& path : r.paths) {
    bench::Cell c;
    c.path = path;
    c.asset = "a";
    c.loop_seconds = {1.0};
    r.cells.push_back(c);
  }
  r.ablation.reference_path = plan.label();
  r.ablation.flags = {flag};
  r.ablation.calls_per_iteration = {{flag, sparse3d::info(flag).calls_per_step}};
  r.ablation.variant_path = {{flag, other.label()}};
  return r;
}

// Every flag, enabled and disabled, written into a result's JSON and read back: the same
// plan, the same leave-one-out.
TEST(Flags, EveryFlagRoundTripsThroughBenchResultJson) {
  for (const auto& f : sparse3d::flag_infos()) {
    for (const bool on : {true, false}) {
      const ExecutionPlan plan = ExecutionPlan::of_path("beyond").set(f.flag, on);
      const bench::BenchResult back =
          bench::result_from_json(bench::to_json(result_with(plan, f.flag)), "r.json");
      ASSERT_EQ(back.paths.size(), 2u);
      const ExecutionPlan read = bench::plan_of_path(back.paths[0]);
      EXPECT_EQ(read.path(), "beyond");
      EXPECT_EQ(read.flags(), plan.flags()) << back.paths[0];
      EXPECT_EQ(read.on(f.flag), on) << back.paths[0];
      EXPECT_EQ(bench::plan_of_path(back.paths[1]).on(f.flag), !on) << back.paths[1];
      EXPECT_EQ(back.ablation.flags, std::vector<Flag>{f.flag});
      EXPECT_EQ(back.ablation.variant_path.at(f.flag), back.paths[1]);
      EXPECT_EQ(back.ablation.calls_per_iteration.at(f.flag), f.calls_per_step);
      EXPECT_EQ(bench::to_json(back)["ablation"],
                bench::to_json(result_with(plan, f.flag))["ablation"]);
    }
  }
}

TEST(Flags, ResultPathsAreLabelsOrBaselines) {
  // A plan measured twice ("#2") and a baseline are paths too.
  bench::BenchResult r = result_with(ExecutionPlan::of_path("pure_eager"), Flag::batched_cfg);
  r.paths.push_back("pure_eager#2");
  r.paths.push_back("torch_eager");
  r.baselines = {{"torch_eager", true, ""}};
  const bench::BenchResult back = bench::result_from_json(bench::to_json(r), "r.json");
  EXPECT_EQ(back.paths, r.paths);
  EXPECT_EQ(bench::plan_of_path("pure_eager#2").label(), "pure_eager");
  EXPECT_EQ(bench::plan_of_path("fast@0,1").label(), "fast");
  EXPECT_EQ(bench::plan_of_path("beyond-cuda_graphs@2,3").label(), "beyond-cuda_graphs");
}

TEST(Flags, UnknownNamesInBenchResultJsonAreErrors) {
  const bench::BenchResult r = result_with(ExecutionPlan::of_path("beyond"), Flag::cuda_graphs);
  io::Json j = bench::to_json(r);
  j["ablation"]["flags"] = {"warp_drive"};
  EXPECT_EQ(error_of([&] { bench::result_from_json(j, "r.json"); }),
            std::string("r.json: unknown optimization flag 'warp_drive' (known: ") + kKnownFlags +
                ")");
  j = bench::to_json(r);
  j["ablation"]["variant_path"] = {{"warp_drive", "beyond"}};
  EXPECT_NE(error_of([&] { bench::result_from_json(j, "r.json"); }).find("'warp_drive'"),
            std::string::npos);
  j = bench::to_json(r);
  j["paths"] = {"beyond+warp_drive"};
  EXPECT_EQ(error_of([&] { bench::result_from_json(j, "r.json"); }),
            std::string("r.json: path 'beyond+warp_drive': unknown optimization flag "
                        "'warp_drive' (known: ") +
                kKnownFlags + ")");
  j["paths"] = {"warp_speed"};
  EXPECT_EQ(error_of([&] { bench::result_from_json(j, "r.json"); }),
            std::string("r.json: path 'warp_speed': unknown execution path 'warp_speed' (known: ") +
                kKnownPaths + ")");
}

}  // namespace
}  // namespace s3d
