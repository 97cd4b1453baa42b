// The persisted null-context qualification (src/engine/qualification_cache.h): a hit returns
// what was stored; a miss, a stale fingerprint, a corrupt entry and a corrupt file are each
// refused or missed, counted and logged, never trusted; a store after a corrupt file leaves a
// valid file.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "engine/qualification_cache.h"
#include "io/json.h"

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
  static model::QualificationOptions shapes(int64_t tokens) {
    model::QualificationOptions o;
    o.token_counts = {tokens};
    o.context_rows = {4101};
    return o;
  }
  static model::Qualification result(const contract::Fingerprint& fp, int64_t tokens, int64_t m) {
    model::Qualification q;
    q.ran = q.rows_checked = q.slices_checked = q.slices_ok = true;
    q.m = m;
    q.fingerprint = fp;
    q.options = shapes(tokens);
    for (int64_t c : q.options.candidate_m)
      q.candidates.push_back({c, c >= m, c >= m ? "" : "block 3 to_out [3664, 1536]: bit 7"});
    return q;
  }
  QualificationCache cache() {
    return QualificationCache(dir, [this](const std::string& l) { log += l + "\n"; });
  }
  std::string file() const { return dir + "/qualification.json"; }

  std::string dir, log;
};

TEST_F(QualificationCacheTest, MissThenHitAcrossInstances) {
  const auto fp = fingerprint("NVIDIA H200");
  {
    QualificationCache c = cache();
    EXPECT_FALSE(c.find(fp, "00000000000000aa", shapes(3664)).has_value());
    EXPECT_EQ(c.stats().misses, 1u);
    c.store(result(fp, 3664, 64), "00000000000000aa");
    EXPECT_TRUE(fs::exists(file()));
  }
  QualificationCache c = cache();  // a second process on the same machine
  auto q = c.find(fp, "00000000000000aa", shapes(3664));
  ASSERT_TRUE(q.has_value()) << log;
  EXPECT_EQ(q->m, 64);
  EXPECT_TRUE(q->slices_ok);
  ASSERT_EQ(q->candidates.size(), 6u);
  EXPECT_FALSE(q->candidates[0].passed);
  EXPECT_EQ(q->candidates[0].failure, "block 3 to_out [3664, 1536]: bit 7");
  EXPECT_EQ(c.stats().hits, 1u);
  EXPECT_EQ(c.stats().refusals, 0u);
  // Other shapes and other weights are misses, not hits.
  EXPECT_FALSE(c.find(fp, "00000000000000aa", shapes(30227)).has_value());
  EXPECT_FALSE(c.find(fp, "00000000000000bb", shapes(3664)).has_value());
  EXPECT_EQ(c.stats().misses, 2u);
}

TEST_F(QualificationCacheTest, StaleFingerprintIsRefusedNamingTheDifference) {
  QualificationCache c = cache();
  c.store(result(fingerprint("NVIDIA H200"), 3664, 1), "00000000000000aa");
  EXPECT_FALSE(c.find(fingerprint("NVIDIA A100"), "00000000000000aa", shapes(3664)).has_value());
  EXPECT_EQ(c.stats().refusals, 1u);
  EXPECT_NE(log.find("stale"), std::string::npos) << log;
  EXPECT_NE(log.find("NVIDIA A100"), std::string::npos) << log;
  // Qualifying again in the new environment replaces the stale entry.
  c.store(result(fingerprint("NVIDIA A100"), 3664, 256), "00000000000000aa");
  auto q = c.find(fingerprint("NVIDIA A100"), "00000000000000aa", shapes(3664));
  ASSERT_TRUE(q.has_value());
  EXPECT_EQ(q->m, 256);
  EXPECT_EQ(io::read_json_file(file()).at("entries").size(), 1u);
}

TEST_F(QualificationCacheTest, TamperedEntryIsRefusedAsCorrupt) {
  const auto fp = fingerprint("NVIDIA H200");
  cache().store(result(fp, 3664, 64), "00000000000000aa");
  io::Json j = io::read_json_file(file());
  for (auto& [key, e] : j.at("entries").items()) e["result"]["m"] = 1;  // checksum not updated
  std::ofstream(file()) << j.dump();
  QualificationCache c = cache();
  EXPECT_FALSE(c.find(fp, "00000000000000aa", shapes(3664)).has_value());
  EXPECT_EQ(c.stats().refusals, 1u);
  EXPECT_NE(log.find("corrupt"), std::string::npos) << log;
}

TEST_F(QualificationCacheTest, CorruptFileIsRefusedAndRewritten) {
  fs::create_directories(dir);
  std::ofstream(file()) << "{\"format\": \"sparse3d-qualification-cache\", \"entr";
  const auto fp = fingerprint("NVIDIA H200");
  QualificationCache c = cache();
  EXPECT_FALSE(c.find(fp, "00000000000000aa", shapes(3664)).has_value());
  EXPECT_EQ(c.stats().refusals, 1u);
  EXPECT_NE(log.find("corrupt"), std::string::npos) << log;
  c.store(result(fp, 3664, 1), "00000000000000aa");
  EXPECT_TRUE(cache().find(fp, "00000000000000aa", shapes(3664)).has_value());
}

TEST_F(QualificationCacheTest, ResultNamingAFailedCandidateIsRefused) {
  const auto fp = fingerprint("NVIDIA H200");
  model::Qualification q = result(fp, 3664, 64);
  q.m = 1;  // M = 1 failed: a result that claims it passed is inconsistent
  cache().store(q, "00000000000000aa");
  QualificationCache c = cache();
  EXPECT_FALSE(c.find(fp, "00000000000000aa", shapes(3664)).has_value());
  EXPECT_EQ(c.stats().refusals, 1u);
}

TEST_F(QualificationCacheTest, ProbeVerdictRoundTripsAndIsKeyedByL) {
  const auto fp = fingerprint("NVIDIA H200");
  model::NullContextOptions probe;
  probe.context_tokens = 4101;
  model::Applicability verdict;
  verdict.ok = true;
  verdict.facts = {"attention dropout: 0", "30 blocks probed"};
  cache().store_probe(fp, "00000000000000aa", probe, verdict);
  QualificationCache c = cache();
  auto got = c.find_probe(fp, "00000000000000aa", probe);
  ASSERT_TRUE(got.has_value()) << log;
  EXPECT_TRUE(got->ok);
  EXPECT_EQ(got->facts, verdict.facts);
  probe.context_tokens = 1029;
  EXPECT_FALSE(c.find_probe(fp, "00000000000000aa", probe).has_value());
  EXPECT_FALSE(c.find_probe(fingerprint("NVIDIA A100"), "00000000000000aa", probe).has_value());
}

TEST_F(QualificationCacheTest, MemoryOnlyCacheWritesNoFile) {
  QualificationCache c("", nullptr);
  const auto fp = fingerprint("NVIDIA H200");
  c.store(result(fp, 3664, 1), "00000000000000aa");
  EXPECT_TRUE(c.find(fp, "00000000000000aa", shapes(3664)).has_value());
  EXPECT_EQ(c.file(), "");
  EXPECT_FALSE(fs::exists(file()));
}

}  // namespace
}  // namespace s3d::engine
