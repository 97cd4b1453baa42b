#include <CLI/CLI.hpp>

#include "apps/commands.h"
#include "apps/engine_flags.h"
#include "sparse3d/types.h"

namespace s3d::apps {

std::map<std::string, Command> add_commands(CLI::App& app) {
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("sparse3d ") + sparse3d::version());
  app.footer(paths_and_flags_help());
  std::map<std::string, Command> commands;
  commands["info"] = add_info(app);
  commands["make-checkpoint"] = add_make_checkpoint(app);
  commands["make-payloads"] = add_make_payloads(app);
  commands["run"] = add_run(app);
  commands["bench"] = add_bench(app);
  commands["profile"] = add_profile(app);
  commands["bench-report"] = add_bench_report(app);
  commands["bench-kernels"] = add_bench_kernels(app);
  return commands;
}

}  // namespace s3d::apps
