// Searched library plans (core/plan_search.h) without a GPU: the choice carried by the op plan, the
// choice rule, the report and its formatting, the qualification cache's plan entries (round
// trip, stale, corrupt and inconsistent entries refused and counted), the bench result's
// "Searched plans" (JSON round trip, markdown table), and that the flags change nothing on
// the CPU backend, which has no library plans.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "bench/report.h"
#include "bench/result_io.h"
#include "core/context.h"
#include "core/hash.h"
#include "core/plan_search.h"
#include "gemm/linear.h"
#include "ops/op.h"
#include "engine/qualification_cache.h"
#include "io/json.h"
#include "sparse3d/sparse3d.h"
#include "../model_inputs.h"

namespace s3d {
namespace {

namespace fs = std::filesystem;
using plan_search::Choice;
using plan_search::Kind;
using plan_search::Row;
using plan_search::Source;

// The searches are chosen in the request's op plan, nowhere else: the `linear` and `sdpa` rows'
// candidates under the request's flags, with the store the plan carries.
TEST(PlanSearchInThePlan, TheRequestsPlanCarriesTheSearchesAndTheStore) {
  engine::QualificationCache store("", nullptr);
  const ops::OpPlan none = ops::OpPlan::resolve(sparse3d::FlagSet());
  EXPECT_EQ(none.count(ops::OpId::linear), 0);
  EXPECT_EQ(none.count(ops::OpId::sdpa), 0);
  EXPECT_EQ(none.plan_store(), nullptr);
  const ops::OpPlan gemm =
      ops::OpPlan::resolve(sparse3d::FlagSet({sparse3d::Flag::tuned_gemm}), &store);
  ASSERT_EQ(gemm.count(ops::OpId::linear), 1);
  EXPECT_EQ(ops::op_info(ops::OpId::linear).candidates[static_cast<size_t>(
                gemm.candidate(ops::OpId::linear, 0))].flag,
            sparse3d::Flag::tuned_gemm);
  EXPECT_EQ(gemm.count(ops::OpId::sdpa), 0);
  EXPECT_EQ(gemm.plan_store(), &store);
  const ops::OpPlan attention =
      ops::OpPlan::resolve(sparse3d::FlagSet({sparse3d::Flag::tuned_attention}));
  EXPECT_EQ(attention.count(ops::OpId::linear), 0);
  EXPECT_EQ(attention.count(ops::OpId::sdpa), 1);
}

// SPARSE3D_SDPA_IMPLEMENTATION is read when a plan is resolved (once per request), not inside
// the attention: a bad value is refused there, naming the variable and the values it takes.
TEST(PlanSearchInThePlan, TheSdpaImplementationIsResolvedWithThePlan) {
  struct Restore {
    std::string old;
    bool had;
    Restore() : had(std::getenv("SPARSE3D_SDPA_IMPLEMENTATION") != nullptr) {
      if (had) old = std::getenv("SPARSE3D_SDPA_IMPLEMENTATION");
    }
    ~Restore() {
      if (had) setenv("SPARSE3D_SDPA_IMPLEMENTATION", old.c_str(), 1);
      else unsetenv("SPARSE3D_SDPA_IMPLEMENTATION");
    }
  } restore;
  unsetenv("SPARSE3D_SDPA_IMPLEMENTATION");
  EXPECT_EQ(ops::OpPlan::resolve({}).sdpa_implementation(), attention::Implementation::Auto);
  setenv("SPARSE3D_SDPA_IMPLEMENTATION", "composite", 1);
  EXPECT_EQ(ops::OpPlan::resolve({}).sdpa_implementation(), attention::Implementation::Composite);
  setenv("SPARSE3D_SDPA_IMPLEMENTATION", "unified", 1);
  EXPECT_EQ(ops::OpPlan::resolve({}).sdpa_implementation(), attention::Implementation::Unified);
  setenv("SPARSE3D_SDPA_IMPLEMENTATION", "fastest", 1);
  try {
    ops::OpPlan::resolve({});
    ADD_FAILURE() << "a bad SPARSE3D_SDPA_IMPLEMENTATION was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("SPARSE3D_SDPA_IMPLEMENTATION is 'fastest'"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("auto, unified or composite"), std::string::npos);
  }
}

// A searched GEMM refuses an output that overlaps an input (the rule the `linear` row's
// candidate applies before the search would run the product into it).
TEST(PlanSearchInThePlan, OverlapRuleSeesSharedBytesOnly) {
  Tensor x = Tensor::empty({4, 8}, DType::BF16, Device::CPU);
  Tensor w = Tensor::empty({8, 8}, DType::BF16, Device::CPU);
  Tensor b = Tensor::empty({8}, DType::BF16, Device::CPU);
  Tensor y = Tensor::empty({4, 8}, DType::BF16, Device::CPU);
  EXPECT_FALSE(gemm::output_overlaps_input(x, w, &b, y));
  EXPECT_TRUE(gemm::output_overlaps_input(x, w, &b, x));
  Tensor wide = Tensor::empty({2, 8, 8}, DType::BF16, Device::CPU);
  Tensor first = wide.reshape({16, 8}).rows(0, 8), second = wide.reshape({16, 8}).rows(8, 16);
  EXPECT_FALSE(gemm::output_overlaps_input(x, first, nullptr, second));
  EXPECT_TRUE(gemm::output_overlaps_input(x, w, &first, first.rows(7, 8)));
}

TEST(PlanSearchChoose, KeepsTheFastestUnlessWithinNoiseOfTheDefault) {
  EXPECT_EQ(plan_search::choose({1.0, 0.5, 0.7}, 0), 1);
  // 1.5% faster than the default: noise, the default stays.
  EXPECT_EQ(plan_search::choose({1.0, 0.985, 1.2}, 0), 0);
  // Negative: not timed (did not build or run).
  EXPECT_EQ(plan_search::choose({-1.0, 2.0, 1.0}, 1), 2);
  EXPECT_EQ(plan_search::choose({-1.0, 2.0, 1.0}, 0), 2);  // no default time: the fastest
  EXPECT_EQ(plan_search::choose({-1.0, -1.0}, 0), -1);
  EXPECT_EQ(plan_search::choose({}, 0), -1);
  // Ties go to the lower index (deterministic).
  EXPECT_EQ(plan_search::choose({1.0, 0.5, 0.5}, 0), 1);
}

Choice choice(int index, int candidates, double default_ms, double best_ms) {
  Choice c;
  c.index = index;
  c.candidates = candidates;
  c.timed = candidates;
  c.default_ms = default_ms;
  c.best_ms = best_ms;
  return c;
}

TEST(PlanSearchReport, OneRowPerShapeReplacedWhenSearchedAgainAndFormatted) {
  Context ctx;
  ContextScope in(ctx);
  EXPECT_TRUE(plan_search::report().empty());
  EXPECT_EQ(plan_search::format_report({}), "");
  const std::string g = "bf16 M=37 N=4608 K=1536 bias align 256/256/256";
  plan_search::record({Kind::Gemm, g, choice(3, 16, 0.020, 0.010), Source::Searched});
  plan_search::record({Kind::Attention, g, choice(0, 4, 1.0, 1.0), Source::Cache});
  plan_search::record({Kind::Gemm, g, choice(5, 16, 0.030, 0.015), Source::Cache});
  const std::vector<Row> rows = plan_search::report();
  ASSERT_EQ(rows.size(), 2u);  // same shape, different kinds: two rows
  EXPECT_EQ(rows[0].kind, Kind::Gemm);
  EXPECT_EQ(rows[0].choice.index, 5);
  EXPECT_EQ(rows[0].source, Source::Cache);
  EXPECT_DOUBLE_EQ(rows[0].gain(), 2.0);
  EXPECT_DOUBLE_EQ(rows[1].gain(), 1.0);
  Row unmeasured;
  EXPECT_DOUBLE_EQ(unmeasured.gain(), 1.0);

  Row partial{Kind::Gemm, "f32 M=1 N=8 K=8 none align 256/256/256", choice(1, 9, 0.5, 0.25),
              Source::Searched};
  partial.choice.timed = 7;
  const std::string text = plan_search::format_report({rows[0], rows[1], partial});
  std::vector<std::string> lines;
  for (size_t at = 0, nl; (nl = text.find('\n', at)) != std::string::npos; at = nl + 1)
    lines.push_back(text.substr(at, nl - at));
  ASSERT_EQ(lines.size(), 4u) << text;
  EXPECT_NE(lines[0].find("candidates"), std::string::npos);
  EXPECT_NE(lines[0].find("default ms"), std::string::npos);
  EXPECT_NE(lines[0].find("gain"), std::string::npos);
  EXPECT_NE(lines[0].find("source"), std::string::npos);
  EXPECT_EQ(lines[1].rfind("gemm", 0), 0u);
  EXPECT_NE(lines[1].find("0.0300"), std::string::npos) << lines[1];
  EXPECT_NE(lines[1].find("2.00x"), std::string::npos) << lines[1];
  EXPECT_NE(lines[1].find("cache"), std::string::npos);
  EXPECT_EQ(lines[2].rfind("attention", 0), 0u);
  EXPECT_NE(lines[3].find("7/9"), std::string::npos) << lines[3];
  EXPECT_NE(lines[3].find("searched"), std::string::npos);
  // Columns aligned: every line as long as the header up to the source column.
  EXPECT_EQ(lines[1].find("cache"), lines[0].find("source"));
  EXPECT_EQ(lines[3].find("searched"), lines[0].find("source"));

  plan_search::reset_report();
  EXPECT_TRUE(plan_search::report().empty());
}

struct PlanCacheTest : ::testing::Test {
  void SetUp() override {
    dir = (fs::temp_directory_path() /
           ("sparse3d_plancache_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name()))
              .string();
    fs::remove_all(dir);
  }
  void TearDown() override { fs::remove_all(dir); }

  static contract::Fingerprint fingerprint(const std::string& cublaslt) {
    contract::Fingerprint f;
    f.engine_version = "0.2.0";
    f.has_gpu = true;
    f.gpu_name = "NVIDIA H200";
    f.sm_count = 132;
    f.cudnn = "9.19.0";
    f.cublaslt = cublaslt;
    return f;
  }
  engine::QualificationCache cache() {
    return engine::QualificationCache(dir, [this](const std::string& l) { log += l + "\n"; });
  }
  std::string file() const { return dir + "/qualification.json"; }
  // Rewrites every entry of the file with `edit` (checksums left as they were).
  template <class Edit>
  void tamper(Edit edit) {
    io::Json j = io::read_json_file(file());
    for (auto& [key, e] : j.at("entries").items()) edit(e);
    std::ofstream(file()) << j.dump();
  }

  std::string dir, log;
  const std::string shape = "bf16 M=37 N=4608 K=1536 bias align 256/256/256";
};

TEST_F(PlanCacheTest, ChoiceRoundTripsAcrossInstancesPerKindAndShape) {
  const auto fp = fingerprint("13.1.0");
  Choice c = choice(7, 16, 0.0213, 0.0150);
  c.timed = 15;
  c.variant = "unified";
  {
    engine::QualificationCache first = cache();
    EXPECT_FALSE(first.find_plan(fp, Kind::Gemm, shape).has_value());
    EXPECT_EQ(first.stats().misses, 1u);
    first.store_plan(fp, Kind::Gemm, shape, c);
  }
  engine::QualificationCache second = cache();
  const std::optional<Choice> got = second.find_plan(fp, Kind::Gemm, shape);
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->index, 7);
  EXPECT_EQ(got->candidates, 16);
  EXPECT_EQ(got->timed, 15);
  EXPECT_EQ(got->variant, "unified");
  EXPECT_DOUBLE_EQ(got->default_ms, 0.0213);
  EXPECT_DOUBLE_EQ(got->best_ms, 0.0150);
  EXPECT_EQ(second.stats().hits, 1u);
  EXPECT_EQ(second.stats().refusals, 0u);
  // Keyed by kind and shape: the other kind and another M are misses.
  EXPECT_FALSE(second.find_plan(fp, Kind::Attention, shape).has_value());
  EXPECT_FALSE(
      second.find_plan(fp, Kind::Gemm, "bf16 M=38 N=4608 K=1536 bias align 256/256/256"));
  EXPECT_EQ(second.stats().misses, 2u);
  // The entry in the file: no checkpoint, the plan's kind and shape as its shapes.
  const io::Json entries = io::read_json_file(file()).at("entries");
  ASSERT_EQ(entries.size(), 1u);
  const io::Json& e = entries.begin().value();
  EXPECT_EQ(e.at("weights"), "");
  EXPECT_EQ(e.at("shapes").at("plan").at("kind"), "gemm");
  EXPECT_EQ(e.at("shapes").at("plan").at("shape"), shape);
  EXPECT_EQ(e.at("result").at("index"), 7);
}

TEST_F(PlanCacheTest, ChoiceFromAnotherEnvironmentIsRefusedAsStale) {
  cache().store_plan(fingerprint("13.1.0"), Kind::Gemm, shape, choice(2, 16, 1.0, 0.5));
  engine::QualificationCache c = cache();
  EXPECT_FALSE(c.find_plan(fingerprint("13.2.0"), Kind::Gemm, shape).has_value());
  EXPECT_EQ(c.stats().refusals, 1u);
  EXPECT_NE(log.find("stale"), std::string::npos) << log;
  EXPECT_NE(log.find("13.1.0"), std::string::npos) << log;  // names the difference
  // A new search stores the new environment's choice in place of the stale one.
  c.store_plan(fingerprint("13.2.0"), Kind::Gemm, shape, choice(4, 12, 1.0, 0.9));
  EXPECT_EQ(io::read_json_file(file()).at("entries").size(), 1u);
  EXPECT_EQ(cache().find_plan(fingerprint("13.2.0"), Kind::Gemm, shape)->index, 4);
}

TEST_F(PlanCacheTest, TamperedChoiceIsRefusedAsCorrupt) {
  const auto fp = fingerprint("13.1.0");
  cache().store_plan(fp, Kind::Attention, shape, choice(1, 3, 2.0, 1.5));
  tamper([](io::Json& e) { e["result"]["index"] = 2; });  // checksum not updated
  engine::QualificationCache c = cache();
  EXPECT_FALSE(c.find_plan(fp, Kind::Attention, shape).has_value());
  EXPECT_EQ(c.stats().refusals, 1u);
  EXPECT_EQ(c.stats().hits, 0u);
  EXPECT_NE(log.find("corrupt"), std::string::npos) << log;
}

TEST_F(PlanCacheTest, InconsistentChoicesAreRefused) {
  const auto fp = fingerprint("13.1.0");
  // Consistent checksums, impossible content: each is refused when read, never trusted.
  const std::vector<Choice> bad = {
      choice(16, 16, 1.0, 0.5),  // index past the list
      choice(0, 4, 1.0, 2.0),    // kept one slower than the default, which it was timed against
      choice(0, 4, 0.0, 0.0),    // not measured
  };
  uint64_t refusals = 0;
  for (const Choice& c : bad) {
    engine::QualificationCache store = cache();
    store.store_plan(fp, Kind::Gemm, shape, c);
    engine::QualificationCache read = cache();
    EXPECT_FALSE(read.find_plan(fp, Kind::Gemm, shape).has_value()) << c.index;
    EXPECT_EQ(read.stats().refusals, 1u);
    EXPECT_EQ(read.stats().hits, 0u);
    refusals += read.stats().refusals;
  }
  EXPECT_EQ(refusals, bad.size());
  EXPECT_NE(log.find("searching again"), std::string::npos) << log;
  // An unknown field, under a checksum that matches, is refused by the strict reader.
  cache().store_plan(fp, Kind::Gemm, shape, choice(0, 4, 1.0, 1.0));
  tamper([](io::Json& e) {
    e["result"]["extra"] = 1;
    io::Json without = e;
    without.erase("checksum");
    e["checksum"] = hex16(content_hash(without.dump()));
  });
  log.clear();
  engine::QualificationCache c = cache();
  EXPECT_FALSE(c.find_plan(fp, Kind::Gemm, shape).has_value());
  EXPECT_EQ(c.stats().refusals, 1u);
  EXPECT_NE(log.find("extra"), std::string::npos) << log;
  EXPECT_EQ(log.find("corrupt"), std::string::npos) << log;
}

TEST_F(PlanCacheTest, ChoiceTheLibraryCannotUseIsCountedAsARefusal) {
  const auto fp = fingerprint("13.1.0");
  cache().store_plan(fp, Kind::Gemm, shape, choice(9, 16, 1.0, 0.5));
  engine::QualificationCache c = cache();
  ASSERT_TRUE(c.find_plan(fp, Kind::Gemm, shape).has_value());
  EXPECT_EQ(c.stats().hits, 1u);
  // The library's list is shorter now: gemm refuses it through the Store interface.
  plan_search::Store& store = c;
  store.refuse_plan(Kind::Gemm, shape, "the stored choice is candidate 9 of 16 but cuBLASLt now "
                                       "offers 8: searching again");
  EXPECT_EQ(c.stats().hits, 0u);
  EXPECT_EQ(c.stats().refusals, 1u);
  EXPECT_NE(log.find("gemm plan for " + shape), std::string::npos) << log;
}

TEST_F(PlanCacheTest, StoreInterfaceUsesTheContextFingerprint) {
  Context ctx;
  ContextScope in(ctx);
  engine::QualificationCache c = cache();
  plan_search::Store& store = c;
  EXPECT_FALSE(store.find_plan(Kind::Attention, shape).has_value());
  store.store_plan(Kind::Attention, shape, choice(1, 2, 1.0, 0.8));
  EXPECT_EQ(store.find_plan(Kind::Attention, shape)->index, 1);
  EXPECT_EQ(c.find_plan(contract::context_fingerprint(), Kind::Attention, shape)->index, 1);
}

TEST_F(PlanCacheTest, MemoryOnlyCacheKeepsChoicesWithoutAFile) {
  engine::QualificationCache c("", nullptr);
  const auto fp = fingerprint("13.1.0");
  c.store_plan(fp, Kind::Gemm, shape, choice(3, 5, 1.0, 0.7));
  EXPECT_EQ(c.find_plan(fp, Kind::Gemm, shape)->index, 3);
  EXPECT_FALSE(fs::exists(file()));
}

bench::BenchResult with_plans() {
  bench::BenchResult r;
  sparse3d::SearchedPlan g;
  g.kind = "gemm";
  g.shape = "bf16 M=37 N=4608 K=1536 bias align 256/256/256";
  g.candidates = 16;
  g.timed = 14;
  g.index = 3;
  g.default_ms = 0.0213;
  g.best_ms = 0.0142;
  g.source = "searched";
  sparse3d::SearchedPlan a = g;
  a.kind = "attention";
  a.shape = "B=1 H=12 D=128 Sq<=4096 Skv<=4096 strides 4608/4608/4608 scale 0x3db504f3 impl auto";
  a.candidates = 4;
  a.timed = 4;
  a.index = 0;
  a.default_ms = a.best_ms = 1.25;
  a.source = "cache";
  r.searched_plans = {g, a};
  return r;
}

TEST(BenchSearchedPlans, JsonRoundTrip) {
  const bench::BenchResult r = with_plans();
  const io::Json j = bench::to_json(r);
  ASSERT_TRUE(j.contains("searched_plans"));
  const bench::BenchResult back = bench::result_from_json(j, "test");
  ASSERT_EQ(back.searched_plans.size(), 2u);
  const auto& g = back.searched_plans[0];
  EXPECT_EQ(g.kind, "gemm");
  EXPECT_EQ(g.shape, r.searched_plans[0].shape);
  EXPECT_EQ(g.candidates, 16);
  EXPECT_EQ(g.timed, 14);
  EXPECT_EQ(g.index, 3);
  EXPECT_DOUBLE_EQ(g.default_ms, 0.0213);
  EXPECT_DOUBLE_EQ(g.best_ms, 0.0142);
  EXPECT_EQ(g.source, "searched");
  EXPECT_EQ(back.searched_plans[1].source, "cache");
  // Results written before searched plans have none.
  io::Json old = j;
  old.erase("searched_plans");
  EXPECT_TRUE(bench::result_from_json(old, "test").searched_plans.empty());
  // A row that cannot be is one clear error.
  io::Json bad = j;
  bad["searched_plans"][0]["index"] = 16;
  try {
    bench::result_from_json(bad, "bad.json");
    FAIL() << "accepted index 16 of 16";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("bad.json"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("index 16 of 16"), std::string::npos) << e.what();
  }
}

TEST(BenchSearchedPlans, MarkdownTable) {
  const std::string md = bench::to_markdown(with_plans());
  const size_t at = md.find("## Searched plans");
  ASSERT_NE(at, std::string::npos) << md;
  EXPECT_NE(md.find("| kind | shape | candidates | default ms | best ms | gain | index | source |",
                    at),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("| gemm | bf16 M=37 N=4608 K=1536 bias align 256/256/256 | 14 / 16 | 0.0213 | "
                    "0.0142 | 1.50x | 3 | searched |",
                    at),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("| 4 | 1.2500 | 1.2500 | 1.00x | 0 | cache |", at), std::string::npos) << md;
  // None searched: no section.
  EXPECT_EQ(bench::to_markdown(bench::BenchResult{}).find("Searched plans"), std::string::npos);
}

// The CPU backend has no library plans: the flags change no bit and search nothing.
TEST(PlanSearchCpu, FlagsHaveNoEffectOnTheCpuBackend) {
  const std::string tiny = std::string(SPARSE3D_TEST_DATA) + "/golden/inputs/tiny.json";
  auto run = [&](const std::string& path, std::vector<sparse3d::SearchedPlan>* plans) {
    sparse3d::EngineOptions o;
    o.device = sparse3d::DeviceChoice::CPU;
    o.path = path;
    o.persist_qualification = false;
    sparse3d::Engine e(tiny, o);
    sampler::Inputs in = testing::synthetic_inputs({61, 40}, 9, 64, 32, 5);
    sparse3d::SampleRequest r;
    r.coords = {in.coords.data(), in.coords.dtype(), in.coords.device(), 0, in.coords.shape()};
    r.batch = in.batch;
    r.cond = {in.cond.data(), in.cond.dtype(), in.cond.device(), 0, in.cond.shape()};
    r.seed = 11;
    r.sampler = sparse3d::SamplerSettings::protocol();
    r.sampler.steps = 2;
    sparse3d::SampleResult out = e.sample(r);
    *plans = sparse3d::searched_plans(e);
    for (const auto& f : e.counters().fallbacks)
      EXPECT_EQ(f.optimization.rfind("tuned_", 0), std::string::npos) << f.reason;
    const auto* p = static_cast<const uint8_t*>(out.latent.view.data);
    return std::vector<uint8_t>(p, p + 101 * 32 * 4);
  };
  std::vector<sparse3d::SearchedPlan> plans;
  const std::vector<uint8_t> reference = run("pure_eager", &plans);
  const std::vector<uint8_t> tuned = run("pure_eager+tuned_gemm+tuned_attention", &plans);
  EXPECT_TRUE(reference == tuned);
  EXPECT_TRUE(plans.empty());
}

}  // namespace
}  // namespace s3d
