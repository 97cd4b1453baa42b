// Helpers shared by the io-layer tests: error-message assertions, a scratch folder, raw
// file bytes, and the committed corrupt-file corpus that seeds the fuzzers.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <string>

#include "../expect_error.h"
#include "core/error.h"

namespace s3d::test {

// A fresh folder under the system temp dir, removed with its contents at scope exit.
class TempDir {
 public:
  TempDir() {
    static int counter = 0;
    path_ = std::filesystem::temp_directory_path() /
            ("sparse3d_io_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  std::string file(const std::string& name) const { return (path_ / name).string(); }
  std::string dir() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << "cannot write " << path;
}

inline std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// tests/data/corrupt holds every corrupt input the tests build, committed, as the fuzzers'
// seed corpus. With S3D_WRITE_CORPUS=1 the tests (re)write it; otherwise they check that the
// committed file still equals what the test builds, so the two cannot drift apart.
inline std::string corpus_dir() { return std::string(SPARSE3D_TEST_DATA) + "/corrupt"; }

inline void check_corpus_file(const std::string& name, const std::string& bytes) {
  const std::string path = corpus_dir() + "/" + name;
  if (const char* w = std::getenv("S3D_WRITE_CORPUS"); w != nullptr && std::string(w) == "1") {
    std::filesystem::create_directories(corpus_dir());
    write_bytes(path, bytes);
  }
  ASSERT_TRUE(std::filesystem::exists(path))
      << path << " is missing: run the tests once with S3D_WRITE_CORPUS=1 and commit it";
  EXPECT_TRUE(read_bytes(path) == bytes)
      << path << " differs from what the test builds: rerun with S3D_WRITE_CORPUS=1";
}

}  // namespace s3d::test
