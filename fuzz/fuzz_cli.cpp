// libFuzzer target: the command line. The input is split at NUL bytes into arguments (at
// most 64) and parsed by the same CLI11 app main.cpp builds (apps::add_commands); the
// commands are never run. Only CLI11's ParseError family (usage errors, an unknown command,
// --help, --help-paths, --version) and s3d::Error may come out of a parse; anything else is
// a finding (main.cpp would turn it into "internal error", exit 3, or terminate).
//
// Linked with the engine's libraries (the CMake build's); the command bodies never run.
#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "apps/commands.h"
#include "core/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> args;
  std::string arg;
  for (size_t i = 0; i < size && args.size() < 64; ++i) {
    if (data[i] == 0) {
      args.push_back(arg);
      arg.clear();
    } else {
      arg.push_back(static_cast<char>(data[i]));
    }
  }
  if (args.size() < 64) args.push_back(arg);
  // One app for the process, as CLI11 allows (clear() forgets the last parse): building it
  // costs more than a parse. Values a parse stored stay in the commands' variables, as they
  // would if main.cpp parsed twice; only the parser's own state is reset.
  static CLI::App app{"sparse3d"};
  static const auto commands = s3d::apps::add_commands(app);
  app.clear();
  // CLI11's vector form takes the arguments last to first.
  std::vector<std::string> reversed(args.rbegin(), args.rend());
  try {
    app.parse(reversed);
  } catch (const CLI::ParseError&) {
  } catch (const s3d::Error&) {
  }
  return 0;
}
