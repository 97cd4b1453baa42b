// The persisted null-context probe verdicts (src/engine/qualification_cache.h): a hit returns
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
  static model::NullContextOptions probe(int context_tokens) {
    model::NullContextOptions o;
    o.context_tokens = context_tokens;
    return o;
  }
  static model::Applicability verdict(bool ok) {
    model::Applicability a;
    a.ok = ok;
    if (!ok) a.reason = "block 3: the null cross-attention output is not v0";
    a.facts = {"attention dropout: 0", "context tokens (L): 4101", "30 blocks probed"};
    return a;
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
    EXPECT_FALSE(c.find_probe(fp, "00000000000000aa", probe(4101)).has_value());
    EXPECT_EQ(c.stats().misses, 1u);
    c.store_probe(fp, "00000000000000aa", probe(4101), verdict(false));
    EXPECT_TRUE(fs::exists(file()));
  }
  QualificationCache c = cache();  // a second process on the same machine
  auto got = c.find_probe(fp, "00000000000000aa", probe(4101));
  ASSERT_TRUE(got.has_value()) << log;
  EXPECT_FALSE(got->ok);
  EXPECT_EQ(got->reason, verdict(false).reason);
  EXPECT_EQ(got->facts, verdict(false).facts);
  EXPECT_EQ(c.stats().hits, 1u);
  EXPECT_EQ(c.stats().refusals, 0u);
  // Other shapes and other weights are misses, not hits.
  EXPECT_FALSE(c.find_probe(fp, "00000000000000aa", probe(1029)).has_value());
  EXPECT_FALSE(c.find_probe(fp, "00000000000000bb", probe(4101)).has_value());
  EXPECT_EQ(c.stats().misses, 2u);
}

TEST_F(QualificationCacheTest, StaleFingerprintIsRefusedNamingTheDifference) {
  QualificationCache c = cache();
  c.store_probe(fingerprint("NVIDIA H200"), "00000000000000aa", probe(4101), verdict(true));
  EXPECT_FALSE(
      c.find_probe(fingerprint("NVIDIA A100"), "00000000000000aa", probe(4101)).has_value());
  EXPECT_EQ(c.stats().refusals, 1u);
  EXPECT_NE(log.find("stale"), std::string::npos) << log;
  EXPECT_NE(log.find("NVIDIA A100"), std::string::npos) << log;
  // Probing again in the new environment replaces the stale entry.
  c.store_probe(fingerprint("NVIDIA A100"), "00000000000000aa", probe(4101), verdict(false));
  auto got = c.find_probe(fingerprint("NVIDIA A100"), "00000000000000aa", probe(4101));
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
  EXPECT_FALSE(c.find_probe(fp, "00000000000000aa", probe(4101)).has_value());
  EXPECT_EQ(c.stats().refusals, 1u);
  EXPECT_NE(log.find("corrupt"), std::string::npos) << log;
}

TEST_F(QualificationCacheTest, CorruptFileIsRefusedAndRewritten) {
  fs::create_directories(dir);
  std::ofstream(file()) << "{\"format\": \"sparse3d-qualification-cache\", \"entr";
  const auto fp = fingerprint("NVIDIA H200");
  QualificationCache c = cache();
  EXPECT_FALSE(c.find_probe(fp, "00000000000000aa", probe(4101)).has_value());
  EXPECT_EQ(c.stats().refusals, 1u);
  EXPECT_NE(log.find("corrupt"), std::string::npos) << log;
  c.store_probe(fp, "00000000000000aa", probe(4101), verdict(true));
  EXPECT_TRUE(cache().find_probe(fp, "00000000000000aa", probe(4101)).has_value());
}

TEST_F(QualificationCacheTest, InconsistentVerdictIsRefused) {
  const auto fp = fingerprint("NVIDIA H200");
  model::Applicability a = verdict(true);
  a.reason = "a refusal reason on a verdict that claims to hold";
  cache().store_probe(fp, "00000000000000aa", probe(4101), a);
  QualificationCache c = cache();
  EXPECT_FALSE(c.find_probe(fp, "00000000000000aa", probe(4101)).has_value());
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
  c.store_probe(fp, "00000000000000aa", probe(4101), verdict(true));
  EXPECT_TRUE(c.find_probe(fp, "00000000000000aa", probe(4101)).has_value());
  EXPECT_EQ(c.file(), "");
  EXPECT_FALSE(fs::exists(file()));
}

}  // namespace
}  // namespace s3d::engine
