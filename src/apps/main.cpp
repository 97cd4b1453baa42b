// sparse3d: the command line of the engine. Exit codes: 0 success; 1 bad data or an engine
// error (one "sparse3d: error: ..." line); 2 a usage error (unknown option, missing or
// malformed argument, an unknown command); 3 an internal error (a bug: please report it).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>
#include <filesystem>
#include <map>
#include <new>
#include <string>

#include "apps/commands.h"
#include "apps/engine_flags.h"
#include "core/error.h"
#include "io/atomic_file.h"
#include "sparse3d/types.h"

int main(int argc, char** argv) {
  // An interrupted command (Ctrl-C, kill, a closed terminal) removes the temporary files
  // and new folders it has under way before it ends by the signal.
  s3d::io::remove_on_fatal_signals();
  CLI::App app{"sparse3d: inference engine for sparse-voxel 3D flow transformers (TRELLIS.2)"};
  std::map<std::string, s3d::apps::Command> commands = s3d::apps::add_commands(app);
  try {
    app.parse(argc, argv);
  } catch (const s3d::apps::CallForPathsHelp&) {
    std::fputs(s3d::apps::paths_and_flags_help().c_str(), stdout);
    return 0;
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // An unknown option is named first: a missing required option or a bad value after it
    // is most likely a consequence of the misspelling.
    std::string message = s3d::apps::unknown_arguments(app);
    if (message.empty()) message = e.what();
    std::fprintf(stderr, "sparse3d: error: %s (see sparse3d --help)\n",
                 s3d::apps::printable(message).c_str());
    return 2;
  } catch (const s3d::Error& e) {
    std::fprintf(stderr, "sparse3d: error: %s\n", s3d::apps::printable(e.what()).c_str());
    return 1;
  }
  try {
    for (auto* sub : app.get_subcommands()) return commands.at(sub->get_name())();
  } catch (const s3d::Error& e) {
    std::fprintf(stderr, "sparse3d: error: %s\n", s3d::apps::printable(e.what()).c_str());
    return 1;
  } catch (const std::filesystem::filesystem_error& e) {
    // A file or folder the system refused (a path the commands' own checks did not foresee):
    // bad input or a bad environment, not a bug. The message names the path and the reason.
    std::fprintf(stderr, "sparse3d: error: %s\n", s3d::apps::printable(e.what()).c_str());
    return 1;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "sparse3d: error: out of host memory\n");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sparse3d: internal error: %s\n", s3d::apps::printable(e.what()).c_str());
    return 3;
  }
  return 0;
}
