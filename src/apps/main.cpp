// sparse3d: the command line of the engine. Exit codes: 0 success; 1 bad data or an engine
// error (one "sparse3d: error: ..." line); 2 a usage error (unknown option, missing or
// malformed argument); 3 an internal error (a bug: please report it).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>
#include <map>
#include <string>

#include "apps/commands.h"
#include "apps/engine_flags.h"
#include "core/error.h"
#include "sparse3d/types.h"

int main(int argc, char** argv) {
  CLI::App app{"sparse3d: inference engine for sparse-voxel 3D flow transformers (TRELLIS.2)"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("sparse3d ") + sparse3d::version());
  app.footer(s3d::apps::paths_and_flags_help());
  std::map<std::string, s3d::apps::Command> commands;
  commands["info"] = s3d::apps::add_info(app);
  commands["make-checkpoint"] = s3d::apps::add_make_checkpoint(app);
  commands["make-payloads"] = s3d::apps::add_make_payloads(app);
  commands["run"] = s3d::apps::add_run(app);
  commands["bench"] = s3d::apps::add_bench(app);
  commands["profile"] = s3d::apps::add_profile(app);
  commands["bench-report"] = s3d::apps::add_bench_report(app);
  commands["bench-kernels"] = s3d::apps::add_bench_kernels(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "sparse3d: error: %s (see sparse3d --help)\n", e.what());
    return 2;
  }
  try {
    for (auto* sub : app.get_subcommands()) return commands.at(sub->get_name())();
  } catch (const s3d::Error& e) {
    std::fprintf(stderr, "sparse3d: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sparse3d: internal error: %s\n", e.what());
    return 3;
  }
  return 0;
}
