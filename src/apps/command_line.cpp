// The command line's parse and run, and how each outcome ends (command_line.h).
#include "apps/command_line.h"

#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>
#include <filesystem>
#include <map>
#include <new>

#include "apps/commands.h"
#include "apps/engine_flags.h"
#include "core/error.h"
#include "io/atomic_file.h"

namespace s3d::apps {
namespace {

void error_line(const std::string& name, const std::string& text, const char* kind = "error") {
  std::fprintf(stderr, "%s: %s: %s\n", name.c_str(), kind, printable(text).c_str());
}

// Parses; returns -1 to go on to the command, or the exit code when the parse ends the run
// (--help, --version, a usage error, a bad value the parse itself checked).
int parse(CLI::App& app, const std::vector<std::string>& args, const std::string& name) {
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  try {
    app.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const CallForPathsHelp&) {
    std::fputs(paths_and_flags_help().c_str(), stdout);
    return 0;
  } catch (const CLI::Success& e) {  // --help, --help-all, --version
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // An unknown option is named first: a missing required option or a bad value after it
    // is most likely a consequence of the misspelling.
    std::string message = unknown_arguments(app);
    if (message.empty()) message = e.what();
    // The program as the user would type it again: a path's file name.
    const std::string program =
        args.empty() ? name : std::filesystem::path(args[0]).filename().string();
    error_line(name, cat(message, " (see ", program, " --help)"));
    return 2;
  } catch (const s3d::Error& e) {
    error_line(name, e.what());
    return 1;
  }
  return -1;
}

int run(const std::map<std::string, Command>& commands, CLI::App& app, const std::string& name) {
  try {
    for (auto* sub : app.get_subcommands()) return commands.at(sub->get_name())();
  } catch (const s3d::Error& e) {
    error_line(name, e.what());
    return 1;
  } catch (const std::filesystem::filesystem_error& e) {
    // A file or folder the system refused (a path the commands' own checks did not foresee):
    // bad input or a bad environment, not a bug. The message names the path and the reason.
    error_line(name, e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    error_line(name, "out of host memory");
    return 1;
  } catch (const std::exception& e) {
    error_line(name, e.what(), "internal error");
    return 3;
  }
  return 0;
}

}  // namespace

int command_line(const std::vector<std::string>& args, const std::string& name) {
  // An interrupted command (Ctrl-C, kill, a closed terminal) removes the temporary files and
  // new folders it has under way before it ends by the signal.
  io::FatalSignalScope signals;
  CLI::App app{"sparse3d: inference engine for sparse-voxel 3D flow transformers (TRELLIS.2)"};
  std::map<std::string, Command> commands = add_commands(app);
  int code = parse(app, args, name);
  if (code < 0) code = run(commands, app, name);
  std::fflush(stdout);
  std::fflush(stderr);
  return code;
}

}  // namespace s3d::apps
