// The sparse3d subcommands. Each registers its flags on a CLI11 subcommand and returns the
// function that runs it; main.cpp wires them together and turns s3d::Error into one line
// on stderr and exit code 1.
#pragma once

#include <CLI/Error.hpp>
#include <CLI/Validators.hpp>

#include <cstdint>
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
Command add_export_glb(CLI::App& app);
Command add_make_glb_input(CLI::App& app);

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

// After a failed parse: the arguments the chosen command does not know, as one message
// ("run: unknown option '--bogus'"; with the closest option when one is close), or "" when
// there are none. main.cpp reports them before anything else CLI11 found (a required option
// reported missing is most often the one that was misspelt).
std::string unknown_arguments(const CLI::App& app);

// `text` with its control characters (bytes below 0x20 and 0x7f) written as \xNN: a value
// echoed in an error line can neither break the line nor drive the terminal. UTF-8 stays.
std::string printable(const std::string& text);

// Value checks for numeric options, applied to the text before CLI11 converts it (CLI11's
// own conversion takes "-1" for 2^64 - 1 in an unsigned option, "010" for 8 and "0x10" for 16,
// and saturates 1e23). Each refuses anything else with a message CLI11 prefixes with the
// option's name (a usage error, exit 2), and rewrites an accepted value in canonical decimal.
//
// An integer written in decimal digits (with a leading '-' where `min` < 0) in [min, max].
CLI::Validator integer_in(int64_t min, int64_t max);
// The same for the full unsigned 64-bit range of seeds: [0, 2^64 - 1].
CLI::Validator unsigned_64();
// A finite decimal number in [min, max] (no NaN, no infinity, no hexadecimal).
CLI::Validator number_in(double min, double max);
// A path that is not empty.
extern const CLI::Validator kNonEmptyPath;
// Any value that is not empty (CLI11 takes `--cfg ''` as given, leaving the value unset).
extern const CLI::Validator kNonEmptyValue;

// The name in `names` closest to `word` by edit distance (insertions, deletions,
// substitutions and swaps of two neighbours each count 1), or "" when none is close enough
// to be a likely misspelling (1 edit for words of up to 4 characters, else 2).
std::string closest_name(const std::string& word, const std::vector<std::string>& names);

}  // namespace s3d::apps
