// Helpers shared by the tests of the sparse3d command (test_cli*.cpp): run the built binary
// (SPARSE3D_CLI) with arguments and collect its exit code and output.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace s3d::test {

struct CliResult {
  int code = -1;
  std::string output;  // stdout and stderr together
};

// `sparse3d ARGS`, with `env` (VAR=value ...) in its environment. Each run qualifies afresh
// in its own cache folder, never the user's.
inline CliResult run_cli(const std::string& args, const std::string& env = "") {
  namespace fs = std::filesystem;
  static int counter = 0;
  fs::path log = fs::temp_directory_path() / ("sparse3d_cli_" + std::to_string(getpid()) + "_" +
                                              std::to_string(counter++) + ".log");
  std::string cmd = env + " SPARSE3D_CACHE_DIR=" + log.string() + ".cache " +
                    std::string(SPARSE3D_CLI) + " " + args + " > " + log.string() + " 2>&1";
  int status = std::system(cmd.c_str());
  CliResult r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  std::ifstream f(log);
  std::stringstream ss;
  ss << f.rdbuf();
  r.output = ss.str();
  fs::remove(log);
  fs::remove_all(log.string() + ".cache");
  return r;
}

// Ended with exit code `code` and one "sparse3d: error: " line that contains `needle`.
inline void expect_cli_error(const CliResult& r, const std::string& needle, int code = 1) {
  EXPECT_EQ(r.code, code) << r.output;
  const size_t at = r.output.find("sparse3d: error: ");
  EXPECT_NE(at, std::string::npos) << r.output;
  if (at != std::string::npos) {
    EXPECT_EQ(r.output.find("sparse3d: error: ", at + 1), std::string::npos)
        << "more than one error line:\n" << r.output;
  }
  EXPECT_NE(r.output.find(needle), std::string::npos) << "expected '" << needle << "' in:\n"
                                                      << r.output;
}

}  // namespace s3d::test
