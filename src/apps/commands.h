// The sparse3d subcommands. Each registers its flags on a CLI11 subcommand and returns the
// function that runs it; main.cpp wires them together and turns s3d::Error into one line
// on stderr and exit code 1.
#pragma once

#include <functional>
#include <map>
#include <string>

namespace CLI {
class App;
}

namespace s3d::apps {

using Command = std::function<int()>;

Command add_info(CLI::App& app);
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

}  // namespace s3d::apps
