// Helpers shared by the tests of the sparse3d command (test_cli*.cpp): run the built binary
// (SPARSE3D_CLI) with arguments and collect its exit code and output.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "model/checkpoint.h"
#include "model/config.h"
#include "payload/generate.h"

namespace s3d::test {

// What the CLI tests run on: the tiny model (seed 3) as DIR/tiny.json + .safetensors, and the
// small payload set with one default asset of `tokens` tokens in DIR/pl.
inline void make_tiny_model_and_payloads(const std::string& dir, int64_t tokens) {
  model::make_checkpoint(model::preset("tiny"), 3, dir + "/tiny", DType::BF16);
  payload::GenerateOptions o = payload::GenerateOptions::small();
  o.default_tokens = {tokens};
  payload::generate_payloads(dir + "/pl", o);
}

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

// `sparse3d ARGS...` started without a shell (so that a signal reaches the command itself),
// stdout and stderr to `log`, the signals it handles at their defaults whatever the test's
// runner left, and with a file size limit of `fsize_limit` bytes when it is not 0. The
// caller waits with wait_cli.
inline pid_t spawn_cli(const std::vector<std::string>& args, const std::string& log,
                       rlim_t fsize_limit = 0) {
  std::vector<std::string> all = {SPARSE3D_CLI};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid != 0) return pid;
  // The child: async-signal-safe calls only until exec.
  const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd >= 0) {
    ::dup2(fd, 1);
    ::dup2(fd, 2);
  }
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE, SIGXFSZ}) ::signal(sig, SIG_DFL);
  if (fsize_limit > 0) {
    struct rlimit r {fsize_limit, fsize_limit};
    ::setrlimit(RLIMIT_FSIZE, &r);
  }
  ::execv(argv[0], argv.data());
  ::_exit(127);
}

// The exit code of a spawn_cli command, or 128 + the signal that ended it.
inline int wait_cli(pid_t pid) {
  int status = 0;
  if (::waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// CPU seconds (user + system) used so far by this process's finished children: the cost of
// a command run by run_cli, as the difference around it. Wall time would also count the
// start-up of a loaded machine (loading the CUDA libraries can take a second under load).
inline double children_cpu_seconds() {
  struct rusage r {};
  ::getrusage(RUSAGE_CHILDREN, &r);
  return r.ru_utime.tv_sec + r.ru_stime.tv_sec + 1e-6 * (r.ru_utime.tv_usec + r.ru_stime.tv_usec);
}

inline std::string file_text(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace s3d::test
