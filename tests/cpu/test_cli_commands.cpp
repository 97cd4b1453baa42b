// The sparse3d command line itself: each subcommand's --help, the paths listing, unknown
// commands, the default path of `run` and the sampler presets' spelling.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "cli_test_util.h"
#include "io/safetensors.h"
#include "model/checkpoint.h"
#include "model/config.h"
#include "payload/generate.h"
#include "payload/payload.h"
#include "sparse3d/engine.h"
#include "sparse3d/flags.h"

namespace s3d {
namespace {

namespace fs = std::filesystem;
using test::CliResult;
using test::run_cli;

const std::vector<std::string> kCommands = {"info",    "paths",   "make-checkpoint",
                                            "make-payloads", "run", "bench",
                                            "profile", "bench-report", "bench-kernels"};

size_t count_of(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

// The lines of `text`.
std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    out.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

// A subcommand's --help lists its own options, not the paths and flags: neither a path's
// description nor a flag's contract appears, and a command that takes a path points to
// `sparse3d paths` in one line.
TEST(CliCommands, EachHelpShowsOnlyItsOwnOptions) {
  for (const auto& command : kCommands) {
    const CliResult r = run_cli(command + " --help");
    ASSERT_EQ(r.code, 0) << command << ":\n" << r.output;
    EXPECT_NE(r.output.find("Usage:"), std::string::npos) << command << ":\n" << r.output;
    for (const auto& p : sparse3d::execution_paths())
      EXPECT_EQ(r.output.find(std::string(p.help)), std::string::npos)
          << command << " --help repeats the description of path " << p.name << ":\n" << r.output;
    for (const auto& f : sparse3d::flag_infos())
      EXPECT_EQ(r.output.find("  " + std::string(f.name) + " "), std::string::npos)
          << command << " --help lists flag " << f.name << ":\n" << r.output;
    const bool takes_a_path = command == "run" || command == "bench" || command == "profile";
    EXPECT_EQ(count_of(r.output, "--path NAME: see `sparse3d paths`"), takes_a_path ? 1u : 0u)
        << command << ":\n" << r.output;
  }
  // The top level's help lists the commands and points to the paths.
  const CliResult top = run_cli("--help");
  ASSERT_EQ(top.code, 0) << top.output;
  for (const auto& command : kCommands)
    EXPECT_NE(top.output.find("  " + command + " "), std::string::npos) << command;
  EXPECT_NE(top.output.find("`sparse3d paths`"), std::string::npos) << top.output;
  for (const auto& p : sparse3d::execution_paths())
    EXPECT_EQ(top.output.find(std::string(p.help)), std::string::npos) << p.name;
}

// `sparse3d paths`: every path with its description and, on the next line, exactly the flags
// it has; every flag with its contract. --help-paths prints the same, at the top level and
// after a command (before the command's required options are asked for).
TEST(CliCommands, PathsListsEveryPathWithItsFlagsAndEveryFlag) {
  const CliResult r = run_cli("paths");
  ASSERT_EQ(r.code, 0) << r.output;
  const std::vector<std::string> lines = lines_of(r.output);
  EXPECT_NE(r.output.find("default " + std::string(sparse3d::default_path())), std::string::npos)
      << r.output;
  for (const auto& p : sparse3d::execution_paths()) {
    size_t i = 0;
    while (i < lines.size() && lines[i].rfind("  " + std::string(p.name) + " ", 0) != 0) ++i;
    ASSERT_LT(i + 1, lines.size()) << "no line for path " << p.name << ":\n" << r.output;
    EXPECT_NE(lines[i].find(std::string(p.help)), std::string::npos) << lines[i];
    const std::string& flags = lines[i + 1];
    const size_t at = flags.find("flags: ");
    ASSERT_NE(at, std::string::npos) << flags;
    std::string want;
    for (sparse3d::Flag f : p.flags.flags())
      want += (want.empty() ? "" : ", ") + std::string(sparse3d::name(f));
    EXPECT_EQ(flags.substr(at + 7), want.empty() ? "none" : want) << p.name;
  }
  for (const auto& f : sparse3d::flag_infos()) {
    bool found = false;
    for (const auto& line : lines)
      found = found || (line.rfind("  " + std::string(f.name) + " ", 0) == 0 &&
                        line.find(std::string(f.contract)) != std::string::npos);
    EXPECT_TRUE(found) << "no line for flag " << f.name << ":\n" << r.output;
  }
  for (const std::string args : {"--help-paths", "run --help-paths", "bench --help-paths",
                                 "profile --help-paths"}) {
    const CliResult again = run_cli(args);
    EXPECT_EQ(again.code, 0) << args << ":\n" << again.output;
    EXPECT_EQ(again.output, r.output) << args;
  }
}

// A misspelt command is named, with the closest command when one is close, and the list of
// commands; it is a usage error (exit 2) in the command line's one error line.
TEST(CliCommands, UnknownCommandSuggestsTheClosestOne) {
  const std::pair<std::string, std::string> cases[] = {
      {"runn", "run"},          {"rnu", "run"},           {"bnech", "bench"},
      {"make-payload", "make-payloads"}, {"profil", "profile"}, {"path", "paths"},
      {"ifno", "info"},
  };
  for (const auto& [typed, meant] : cases) {
    const CliResult r = run_cli(typed + " --checkpoint x.json");
    test::expect_cli_error(r, "unknown command \"" + typed + "\"; did you mean \"" + meant + "\"?",
                           2);
    for (const auto& command : kCommands)
      EXPECT_NE(r.output.find(command), std::string::npos) << typed << ": " << r.output;
  }
  // Nothing close: no guess, still the list.
  for (const std::string typed : {"xyzzy", "rm", "benchmarks-all"}) {
    const CliResult r = run_cli(typed);
    test::expect_cli_error(r, "unknown command \"" + typed + "\".", 2);
    EXPECT_EQ(r.output.find("did you mean"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("bench-kernels"), std::string::npos) << r.output;
  }
  test::expect_cli_error(run_cli(""), "a command is required", 2);
  test::expect_cli_error(run_cli("--bogus info"), "--bogus", 2);
}

struct CliRun : ::testing::Test {
  static void SetUpTestSuite() {
    dir = (fs::temp_directory_path() / ("sparse3d_cli_commands_" + std::to_string(getpid())))
              .string();
    fs::remove_all(dir);
    test::make_tiny_model_and_payloads(dir, 24);
  }
  static void TearDownTestSuite() { fs::remove_all(dir); }
  static std::string dir;

  std::string run_args(const std::string& out) const {
    return "run --device cpu --steps 1 --no-qualification-cache --checkpoint " + dir +
           "/tiny.json --manifest " + dir + "/pl/manifest.json --out " + dir + "/" + out;
  }
  std::string written_path(const std::string& out) const {
    payload::Manifest m = payload::read_manifest(dir + "/pl/manifest.json");
    io::SafetensorsFile f =
        io::SafetensorsFile::open(dir + "/" + out + "/" + m.assets[0].name + ".safetensors");
    return f.metadata().at("path");
  }
};
std::string CliRun::dir;

// Without --path, `run` runs the library's default path (EngineOptions' empty path: the
// engine's default_path(), without cuda_graphs on the CPU backend), not a path of its own.
TEST_F(CliRun, RunUsesTheLibrarysDefaultPath) {
  sparse3d::ExecutionPlan want = sparse3d::ExecutionPlan::parse(sparse3d::default_path());
  want.disable(sparse3d::Flag::cuda_graphs);
  const CliResult r = run_cli(run_args("default"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("path " + want.label() + "; sampler:"), std::string::npos) << r.output;
  EXPECT_EQ(written_path("default"), want.label());
  const CliResult help = run_cli("run --help");
  EXPECT_NE(help.output.find("(default: " + std::string(sparse3d::default_path()) + ";"),
            std::string::npos)
      << help.output;
}

// The presets are spelt as SamplerSettings and the Python package spell them; the retired
// spelling is refused with the new one named, before anything loads.
TEST_F(CliRun, SamplerPresetsAreSpeltAsInTheApis) {
  const CliResult ss = run_cli(run_args("ss") + " --sampler released_sparse_structure");
  ASSERT_EQ(ss.code, 0) << ss.output;
  const sparse3d::SamplerSettings s = sparse3d::SamplerSettings::released_sparse_structure();
  char line[200];
  std::snprintf(line, sizeof line, "rescale_t %g, cfg %g on t in [%g, %g], rescale %g", s.rescale_t,
                s.guidance, s.interval_lo, s.interval_hi, s.guidance_rescale);
  EXPECT_NE(ss.output.find(line), std::string::npos) << line << "\n" << ss.output;
  for (const std::string preset : {"released", "protocol"})
    EXPECT_EQ(run_cli(run_args(preset) + " --sampler " + preset).code, 0) << preset;

  const std::string missing = "run --checkpoint " + dir + "/nope.json --manifest " + dir +
                              "/pl/manifest.json --sampler ";
  CliResult old = run_cli(missing + "released-ss");
  test::expect_cli_error(old, "'released-ss' is now spelt 'released_sparse_structure'", 2);
  EXPECT_EQ(old.output.find("nope.json"), std::string::npos) << old.output;
  test::expect_cli_error(run_cli(missing + "released_ss"),
                         "not a sampler preset (released, released_sparse_structure, protocol)",
                         2);
  // bench takes the same presets.
  test::expect_cli_error(run_cli("bench --checkpoint c.json --manifest m.json --sampler released-ss"),
                         "released_sparse_structure", 2);
}

}  // namespace
}  // namespace s3d
