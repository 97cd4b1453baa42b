// The persisted null-context probe verdicts (src/engine/qualification_cache.h): a hit returns
// what was stored; a miss, a stale fingerprint, a corrupt entry and a corrupt file are each
// refused or missed, counted and logged, never trusted; a store after a corrupt file leaves a
// valid file.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <chrono>
#include <cstring>
#include <functional>
#include <memory>

#include "core/hash.h"
#include "engine/qualification_cache.h"
#include "io/json.h"
#include "sparse3d/sparse3d.h"

namespace s3d::engine {
namespace {

namespace fs = std::filesystem;

struct QualificationCacheTest : ::testing::Test {
  void SetUp() override {
    dir = (fs::temp_directory_path() /
           ("sparse3d_qcache_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name()))
              .string();
    fs::remove_all(dir);
  }
  void TearDown() override { fs::remove_all(dir); }

  static contract::Fingerprint fingerprint(const std::string& gpu) {
    contract::Fingerprint f;
    f.engine_version = "0.2.0";
    f.has_gpu = true;
    f.gpu_name = gpu;
    f.sm_count = 132;
    f.cudnn = "9.19.0";
    f.cublaslt = "13.1.0";
    return f;
  }
  static model::NullContextOptions probe(int context_tokens) {
    model::NullContextOptions o;
    o.context_tokens = context_tokens;
    return o;
  }
  // What the probe gives for a model of `config` at L: every block passing, or block 3's
  // attention output differing at query 5, column 17 (the blocks after it passing).
  model::Applicability verdict(bool ok, int context_tokens = 4101) const {
    model::NullContextFacts facts;
    facts.context_tokens = context_tokens;
    std::vector<model::BlockProbe> blocks(static_cast<size_t>(config.num_blocks));
    if (!ok) {
      blocks[3].differing_attention_row = 5;
      blocks[3].difference = "row 5 column 17: bits 0x3f80 vs 0x3f81";
    }
    return model::judge_applicability(facts, blocks);
  }
  QualificationCache cache() {
    return QualificationCache(dir, [this](const std::string& l) { log += l + "\n"; });
  }
  std::string file() const { return dir + "/qualification.json"; }

  // Rewrites every entry of the file through `edit` with its checksum recomputed, as anyone
  // who can write the file can: the checksum is a content hash, not a signature.
  void forge(const std::function<void(io::Json& entry)>& edit) const {
    io::Json j = io::read_json_file(file());
    for (auto& [key, e] : j.at("entries").items()) {
      edit(e);
      e.erase("checksum");
      e["checksum"] = hex16(content_hash(e.dump()));
    }
    std::ofstream(file()) << j.dump();
  }

  // A request for the tiny checkpoint on the CPU: one asset of the voxels (0, x, y, z) with
  // x, y < side and z < depth, a five-token condition of `value`, two steps from `seed`.
  struct TinyRequest {
    std::vector<int32_t> coords;
    std::vector<float> cond;
    sparse3d::SampleRequest request;
  };
  static std::unique_ptr<TinyRequest> tiny_request(int side, int depth, float value,
                                                   uint64_t seed) {
    auto t = std::make_unique<TinyRequest>();
    for (int x = 0; x < side; ++x)
      for (int y = 0; y < side; ++y)
        for (int z = 0; z < depth; ++z) t->coords.insert(t->coords.end(), {0, x, y, z});
    t->cond.assign(5 * 64, value);
    const int64_t n = static_cast<int64_t>(t->coords.size() / 4);
    t->request.coords = {t->coords.data(), sparse3d::DType::I32, sparse3d::Device::CPU, 0, {n, 4}};
    t->request.cond = {t->cond.data(), sparse3d::DType::F32, sparse3d::Device::CPU, 0, {1, 5, 64}};
    t->request.seed = seed;
    t->request.sampler.steps = 2;
    return t;
  }
  const std::string tiny = std::string(SPARSE3D_TEST_DATA) + "/golden/inputs/tiny.json";

  model::ModelConfig config;  // the released shape: 30 blocks of 1536 channels
  std::string dir, log;
};

TEST_F(QualificationCacheTest, MissThenHitAcrossInstances) {
  const auto fp = fingerprint("NVIDIA H200");
  {
    QualificationCache c = cache();
    EXPECT_FALSE(c.find_probe(fp, "00000000000000aa", probe(4101), config).has_value());
    EXPECT_EQ(c.stats().misses, 1u);
    c.store_probe(fp, "00000000000000aa", probe(4101), verdict(false));
    EXPECT_TRUE(fs::exists(file()));
  }
  QualificationCache c = cache();  // a second process on the same machine
  auto got = c.find_probe(fp, "00000000000000aa", probe(4101), config);
  ASSERT_TRUE(got.has_value()) << log;
  EXPECT_FALSE(got->ok);
  EXPECT_EQ(got->reason, verdict(false).reason);
  EXPECT_EQ(got->facts, verdict(false).facts);
  EXPECT_EQ(c.stats().hits, 1u);
  EXPECT_EQ(c.stats().refusals, 0u);
  // Other shapes and other weights are misses, not hits.
  EXPECT_FALSE(c.find_probe(fp, "00000000000000aa", probe(1029), config).has_value());
  EXPECT_FALSE(c.find_probe(fp, "00000000000000bb", probe(4101), config).has_value());
  EXPECT_EQ(c.stats().misses, 2u);
}

TEST_F(QualificationCacheTest, StaleFingerprintIsRefusedNamingTheDifference) {
  QualificationCache c = cache();
  c.store_probe(fingerprint("NVIDIA H200"), "00000000000000aa", probe(4101), verdict(true));
  EXPECT_FALSE(
      c.find_probe(fingerprint("NVIDIA A100"), "00000000000000aa", probe(4101), config).has_value());
  EXPECT_EQ(c.stats().refusals, 1u);
  EXPECT_NE(log.find("stale"), std::string::npos) << log;
  EXPECT_NE(log.find("NVIDIA A100"), std::string::npos) << log;
  // Probing again in the new environment replaces the stale entry.
  c.store_probe(fingerprint("NVIDIA A100"), "00000000000000aa", probe(4101), verdict(false));
  auto got = c.find_probe(fingerprint("NVIDIA A100"), "00000000000000aa", probe(4101), config);
  ASSERT_TRUE(got.has_value());
  EXPECT_FALSE(got->ok);
  EXPECT_EQ(io::read_json_file(file()).at("entries").size(), 1u);
}

TEST_F(QualificationCacheTest, TamperedEntryIsRefusedAsCorrupt) {
  const auto fp = fingerprint("NVIDIA H200");
  cache().store_probe(fp, "00000000000000aa", probe(4101), verdict(false));
  io::Json j = io::read_json_file(file());
  for (auto& [key, e] : j.at("entries").items()) e["result"]["ok"] = true;  // checksum not updated
  std::ofstream(file()) << j.dump();
  QualificationCache c = cache();
  EXPECT_FALSE(c.find_probe(fp, "00000000000000aa", probe(4101), config).has_value());
  EXPECT_EQ(c.stats().refusals, 1u);
  EXPECT_NE(log.find("corrupt"), std::string::npos) << log;
}

TEST_F(QualificationCacheTest, CorruptFileIsRefusedAndRewritten) {
  fs::create_directories(dir);
  std::ofstream(file()) << "{\"format\": \"sparse3d-qualification-cache\", \"entr";
  const auto fp = fingerprint("NVIDIA H200");
  QualificationCache c = cache();
  EXPECT_FALSE(c.find_probe(fp, "00000000000000aa", probe(4101), config).has_value());
  EXPECT_EQ(c.stats().refusals, 1u);
  EXPECT_NE(log.find("corrupt"), std::string::npos) << log;
  c.store_probe(fp, "00000000000000aa", probe(4101), verdict(true));
  EXPECT_TRUE(cache().find_probe(fp, "00000000000000aa", probe(4101), config).has_value());
}

// A cache folder the process cannot reach: a symbolic-link loop (ELOOP, which root meets too)
// and a regular file where the folder should be (ENOTDIR: no entry there, a miss). Each costs a
// counted refusal or miss and a "not saved" line, never an exception: the request goes on.
TEST_F(QualificationCacheTest, AFolderThatCannotBeReachedIsARefusalNotAFailure) {
  fs::create_directories(dir);
  const std::string loop = dir + "/loop";
  fs::create_symlink("loop", loop);
  const std::string file_as_folder = dir + "/plain";
  std::ofstream(file_as_folder) << "x";
  const auto fp = fingerprint("NVIDIA H200");
  for (const std::string& where : {loop, loop + "/sub", file_as_folder + "/sub"}) {
    log.clear();
    QualificationCache c(where, [this](const std::string& l) { log += l + "\n"; });
    EXPECT_FALSE(c.find_probe(fp, "00000000000000aa", probe(4101), config).has_value()) << where;
    if (where.find("plain") == std::string::npos) {
      EXPECT_EQ(c.stats().refusals, 1u) << where;
      EXPECT_NE(log.find("cannot be reached"), std::string::npos) << log;
    } else {
      EXPECT_EQ(c.stats().misses, 1u) << where;  // under a file there is no entry: a miss
    }
    c.store_probe(fp, "00000000000000aa", probe(4101), verdict(true));
    EXPECT_NE(log.find("not saved"), std::string::npos) << log;
  }
  // An engine whose cache folder is such a path serves its request with the bits of an
  // engine that keeps its qualifications in memory.
  sparse3d::EngineOptions o;
  o.device = sparse3d::DeviceChoice::CPU;
  const auto t = tiny_request(3, 1, 0.5f, 5);
  const sparse3d::SampleRequest& r = t->request;
  sparse3d::EngineOptions memory_only = o;
  memory_only.persist_qualification = false;
  const sparse3d::Array want = sparse3d::Engine(tiny, memory_only).sample(r).latent;
  o.cache_dir = loop + "/sub";
  const sparse3d::Array got = sparse3d::Engine(tiny, o).sample(r).latent;
  EXPECT_EQ(got.to_floats(), want.to_floats());
}

TEST_F(QualificationCacheTest, InconsistentVerdictIsRefused) {
  const auto fp = fingerprint("NVIDIA H200");
  model::Applicability a = verdict(true);
  a.reason = "a refusal reason on a verdict that claims to hold";
  cache().store_probe(fp, "00000000000000aa", probe(4101), a);
  QualificationCache c = cache();
  EXPECT_FALSE(c.find_probe(fp, "00000000000000aa", probe(4101), config).has_value());
  EXPECT_EQ(c.stats().refusals, 1u);
}

TEST_F(QualificationCacheTest, ProbeVerdictRoundTripsAndIsKeyedByL) {
  const auto fp = fingerprint("NVIDIA H200");
  model::NullContextOptions probe;
  probe.context_tokens = 4101;
  const model::Applicability holds = verdict(true);
  cache().store_probe(fp, "00000000000000aa", probe, holds);
  QualificationCache c = cache();
  auto got = c.find_probe(fp, "00000000000000aa", probe, config);
  ASSERT_TRUE(got.has_value()) << log;
  EXPECT_TRUE(got->ok);
  EXPECT_EQ(got->facts, holds.facts);
  probe.context_tokens = 1029;
  EXPECT_FALSE(c.find_probe(fp, "00000000000000aa", probe, config).has_value());
  EXPECT_FALSE(c.find_probe(fingerprint("NVIDIA A100"), "00000000000000aa", probe, config).has_value());
}

TEST_F(QualificationCacheTest, MemoryOnlyCacheWritesNoFile) {
  QualificationCache c("", nullptr);
  const auto fp = fingerprint("NVIDIA H200");
  c.store_probe(fp, "00000000000000aa", probe(4101), verdict(true));
  EXPECT_TRUE(c.find_probe(fp, "00000000000000aa", probe(4101), config).has_value());
  EXPECT_EQ(c.file(), "");
  EXPECT_FALSE(fs::exists(file()));
}

// Entries whose checksum holds but whose content no probe gives: each refused (counted,
// logged, probed again), never trusted.
TEST_F(QualificationCacheTest, ForgedVerdictWithAValidChecksumIsRefused) {
  const auto fp = fingerprint("NVIDIA H200");
  const model::Applicability holds = verdict(true), refused = verdict(false);
  const std::string block3 = refused.reason;
  const std::vector<std::pair<std::string, std::function<void(io::Json&)>>> forgeries = {
      {"a passing verdict with another block count",
       [](io::Json& r) { r["facts"][3] = "31 blocks probed: value rows identical and attention "
                                         "output = v0 in 31"; }},
      {"a passing verdict with a fact left out", [](io::Json& r) { r["facts"].erase(1); }},
      {"a passing verdict for another L",
       [](io::Json& r) { r["facts"][1] = "context tokens (L): 16"; }},
      {"a refusal of another form",
       [](io::Json& r) { r["ok"] = false; r["reason"] = "the operator said so"; }},
      {"a refusal naming a block the model does not have",
       [&](io::Json& r) {
         r = {{"ok", false}, {"reason", "block 30" + block3.substr(7)}, {"facts", refused.facts}};
       }},
      {"a refusal naming a query past the probe's",
       [&](io::Json& r) {
         std::string why = block3;
         why.replace(why.find("row 5"), 5, "row 64");
         r = {{"ok", false}, {"reason", why}, {"facts", refused.facts}};
       }},
      {"a refusal naming a column past the model's",
       [&](io::Json& r) {
         std::string why = block3;
         why.replace(why.find("column 17"), 9, "column 1536");
         r = {{"ok", false}, {"reason", why}, {"facts", refused.facts}};
       }},
      {"a refusal whose facts say every block passed",
       [&](io::Json& r) { r = {{"ok", false}, {"reason", block3}, {"facts", holds.facts}}; }},
      {"a refusal whose facts say a block before the one named failed",
       [&](io::Json& r) {
         io::Json f = refused.facts;
         f[3] = "30 blocks probed: value rows identical and attention output = v0 in 2";
         r = {{"ok", false}, {"reason", block3}, {"facts", f}};
       }},
  };
  for (const auto& [what, edit] : forgeries) {
    SCOPED_TRACE(what);
    fs::remove_all(dir);
    log.clear();
    cache().store_probe(fp, "00000000000000aa", probe(4101), holds);
    forge([&](io::Json& e) { edit(e["result"]); });
    QualificationCache c = cache();
    EXPECT_FALSE(c.find_probe(fp, "00000000000000aa", probe(4101), config).has_value());
    EXPECT_EQ(c.stats().refusals, 1u);
    EXPECT_EQ(c.stats().hits, 0u);
    EXPECT_NE(log.find("probing again"), std::string::npos) << log;
  }
  // What a probe does give reads back: a refusal of either form, at any block and place
  // inside the model, with any later block passing.
  fs::remove_all(dir);
  model::Applicability last = refused;
  last.reason = "block 29: the value rows of the null condition differ after the "
                "condition-side transform (row 4100 column 1535: bits 0x0 vs 0xffff)";
  last.facts[3] = "30 blocks probed: value rows identical and attention output = v0 in 29";
  for (const model::Applicability& genuine : {refused, last, holds}) {
    cache().store_probe(fp, "00000000000000aa", probe(4101), genuine);
    QualificationCache c = cache();
    const auto got = c.find_probe(fp, "00000000000000aa", probe(4101), config);
    ASSERT_TRUE(got.has_value()) << genuine.reason << "\n" << log;
    EXPECT_EQ(got->reason, genuine.reason);
    EXPECT_EQ(c.stats().refusals, 0u);
  }
}

TEST_F(QualificationCacheTest, ForgedPlanChoiceWithAValidChecksumIsRefused) {
  const auto fp = fingerprint("NVIDIA H200");
  plan_search::Choice genuine;
  genuine.index = 2;
  genuine.candidates = plan_search::kMaxCandidates;
  genuine.timed = 12;
  genuine.default_ms = 1.5;
  genuine.best_ms = 1.2;
  const std::vector<std::pair<std::string, std::function<void(io::Json&)>>> forgeries = {
      {"more candidates than a search keeps", [](io::Json& r) { r["candidates"] = 1 << 16; }},
      {"an index past the candidates", [](io::Json& r) { r["index"] = 16; }},
      {"more timed than offered", [](io::Json& r) { r["timed"] = 17; }},
      {"a variant longer than any implementation's name",
       [](io::Json& r) { r["variant"] = std::string(1000, 'x'); }},
      {"a best time slower than the default", [](io::Json& r) { r["best_ms"] = 2.0; }},
  };
  for (const auto& [what, edit] : forgeries) {
    SCOPED_TRACE(what);
    fs::remove_all(dir);
    log.clear();
    cache().store_plan(fp, plan_search::Kind::Gemm, "m=100 n=64 k=64", genuine);
    forge([&](io::Json& e) { edit(e["result"]); });
    QualificationCache c = cache();
    EXPECT_FALSE(c.find_plan(fp, plan_search::Kind::Gemm, "m=100 n=64 k=64").has_value());
    EXPECT_EQ(c.stats().refusals, 1u);
    EXPECT_NE(log.find("searching again"), std::string::npos) << log;
  }
  // The genuine choice reads back.
  fs::remove_all(dir);
  cache().store_plan(fp, plan_search::Kind::Gemm, "m=100 n=64 k=64", genuine);
  EXPECT_TRUE(cache().find_plan(fp, plan_search::Kind::Gemm, "m=100 n=64 k=64").has_value());
}

// Through the engine: a forged verdict with a valid checksum is refused and counted, the probe
// runs again, and the request gives the bits of an engine without a cache, in about the time
// a first request takes. A per-token-count qualification of an earlier engine's format (M
// = 2^40 or 2^24, or an M that is no candidate) is never read: the chosen M is always one of
// this engine's candidates, qualified here.
TEST_F(QualificationCacheTest, AnEngineRefusesAForgedEntryAndRequalifies) {
  sparse3d::EngineOptions o;
  o.device = sparse3d::DeviceChoice::CPU;
  o.path = "canonical_cache_null";
  o.cache_dir = dir;
  const auto t = tiny_request(4, 3, 0.25f, 3);
  sparse3d::SampleRequest r = t->request;
  r.sampler.interval_lo = 0.0;
  sparse3d::EngineOptions memory_only = o;
  memory_only.persist_qualification = false;
  const sparse3d::Array want = sparse3d::Engine(tiny, memory_only).sample(r).latent;
  double genuine_seconds = 0;  // a first request's: probe, qualification and the loop
  {
    sparse3d::Engine e(tiny, o);  // writes the genuine verdict
    const auto t0 = std::chrono::steady_clock::now();
    e.sample(r);
    genuine_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  // The genuine verdict turned into a refusal naming a block the tiny model (2 blocks) lacks,
  // plus entries in an earlier engine's per-token-count format choosing M = 2^40, 2^24 and
  // 3 (no candidate), each with a valid checksum under this engine's fingerprint and weights.
  forge([](io::Json& e) {
    e["result"] = {{"ok", false},
                   {"reason", "block 7: the null cross-attention output is not v0 (row 1 "
                              "column 1: bits 0x0 vs 0x1)"},
                   {"facts", e["result"]["facts"]}};
  });
  io::Json j = io::read_json_file(file());
  const io::Json probe_entry = j.at("entries").begin().value();
  int n = 0;
  for (int64_t m : {int64_t{1} << 40, int64_t{1} << 24, int64_t{3}}) {
    io::Json e = {{"fingerprint", probe_entry.at("fingerprint")},
                  {"weights", probe_entry.at("weights")},
                  {"shapes", {{"candidate_m", {1, 64, 128, 256, 512, 1024}},
                              {"token_counts", {48}}, {"context_rows", {5}}, {"serial", true},
                              {"batched", false}, {"seed", n}}},
                  {"result", {{"m", m}, {"rows_checked", true}, {"slices_checked", false},
                              {"slices_ok", false}, {"slice_failure", ""},
                              {"candidates", {{{"m", m}, {"passed", true}, {"failure", ""}}}}}}};
    e["checksum"] = hex16(content_hash(e.dump()));
    j["entries"][cat("legacy", n++)] = e;
  }
  std::ofstream(file()) << j.dump();
  sparse3d::Engine e(tiny, o);
  const auto t0 = std::chrono::steady_clock::now();
  const sparse3d::SampleResult got = e.sample(r);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // As long as a first request without the forged entries (a generous bound: the machine
  // may be loaded); an M of 2^24 used to run for minutes, 2^40 to exhaust host memory.
  EXPECT_LT(seconds, 3 * genuine_seconds + 5) << genuine_seconds;
  EXPECT_EQ(e.counters().qualification_cache_refusals, 1u);
  EXPECT_EQ(e.counters().qualification_cache_hits, 0u);
  ASSERT_EQ(e.qualification().size(), 1u);
  EXPECT_TRUE(e.qualification()[0].applicable);  // probed again, not taken from the file
  ASSERT_EQ(e.qualification()[0].shapes.size(), 1u);
  EXPECT_EQ(e.qualification()[0].shapes[0].source, "qualified");
  EXPECT_EQ(e.qualification()[0].shapes[0].m, 1);
  ASSERT_EQ(got.latent.view.nbytes(), want.view.nbytes());
  EXPECT_EQ(std::memcmp(got.latent.view.data, want.view.data, want.view.nbytes()), 0);
}

}  // namespace
}  // namespace s3d::engine
