// The sparse3d subcommands. Each registers its flags on a CLI11 subcommand and returns the
// function that runs it; main.cpp wires them together and turns s3d::Error into one line
// on stderr and exit code 1.
#pragma once

#include <CLI/Error.hpp>

#include <functional>
#include <map>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace s3d::apps {

using Command = std::function<int()>;

Command add_info(CLI::App& app);
Command add_paths(CLI::App& app);
Command add_make_checkpoint(CLI::App& app);
Command add_make_payloads(CLI::App& app);
Command add_run(CLI::App& app);
Command add_bench(CLI::App& app);
Command add_profile(CLI::App& app);
Command add_bench_report(CLI::App& app);
Command add_bench_kernels(CLI::App& app);

// The whole command line on `app` (what main.cpp parses; the CLI fuzzer parses the same):
// every subcommand, keyed by name.
std::map<std::string, Command> add_commands(CLI::App& app);

// --help-paths (top level, and every subcommand that takes a path): main.cpp prints
// paths_and_flags_help() and exits 0. A CLI::Success, as --help is.
class CallForPathsHelp : public CLI::Success {
 public:
  CallForPathsHelp()
      : CLI::Success("CallForPathsHelp", "--help-paths: print the paths and flags",
                     CLI::ExitCodes::Success) {}
};

// A usage error found by the command line itself rather than by CLI11 (an unknown command):
// a CLI::ParseError like CLI11's own, so it ends the same way (exit 2).
class UsageError : public CLI::ParseError {
 public:
  explicit UsageError(std::string message)
      : CLI::ParseError("UsageError", std::move(message), CLI::ExitCodes::ExtrasError) {}
};

// The name in `names` closest to `word` by edit distance (insertions, deletions,
// substitutions and swaps of two neighbours each count 1), or "" when none is close enough
// to be a likely misspelling (1 edit for words of up to 4 characters, else 2).
std::string closest_name(const std::string& word, const std::vector<std::string>& names);

}  // namespace s3d::apps
