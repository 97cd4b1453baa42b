// info and paths: what the environment is, and what the engine can run.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>

#include "apps/commands.h"
#include "apps/engine_flags.h"
#include "sparse3d/engine.h"

namespace s3d::apps {

Command add_info(CLI::App& app) {
  auto* sub = app.add_subcommand("info", "Print the environment fingerprint");
  auto json = std::make_shared<bool>(false);
  sub->add_flag("--json", *json, "Print it as JSON");
  return [json]() {
    std::fputs(sparse3d::environment_report(*json).c_str(), stdout);
    return 0;
  };
}

Command add_paths(CLI::App& app) {
  app.add_subcommand("paths",
                     "Print every execution path (--path) with its flags, and every "
                     "optimization flag (--enable/--disable) with its contract");
  return []() {
    std::fputs(paths_and_flags_help().c_str(), stdout);
    return 0;
  };
}

}  // namespace s3d::apps
