#include <CLI/CLI.hpp>

#include <algorithm>

#include "apps/commands.h"
#include "apps/engine_flags.h"
#include "sparse3d/types.h"

namespace s3d::apps {
namespace {

// Optimal string alignment distance: Levenshtein plus a swap of two neighbours as one edit.
size_t edit_distance(const std::string& a, const std::string& b) {
  const size_t n = a.size(), m = b.size();
  std::vector<std::vector<size_t>> d(n + 1, std::vector<size_t>(m + 1, 0));
  for (size_t i = 0; i <= n; ++i) d[i][0] = i;
  for (size_t j = 0; j <= m; ++j) d[0][j] = j;
  for (size_t i = 1; i <= n; ++i)
    for (size_t j = 1; j <= m; ++j) {
      const size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[n][m];
}

std::vector<std::string> command_names(CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::App* sub : app.get_subcommands([](CLI::App* s) { return !s->get_name().empty(); }))
    names.push_back(sub->get_name());
  return names;
}

std::string joined(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

// After a parse: exactly one command, and nothing the top level does not know before it.
// (The top level keeps unknown words as extras so that this check, not CLI11's "a subcommand
// is required", reports them.)
void check_command(CLI::App& app) {
  const std::vector<std::string> extras = app.remaining(false);
  const std::vector<std::string> names = command_names(app);
  if (app.get_subcommands().empty()) {
    for (const auto& word : extras) {
      if (word.empty() || word[0] == '-') continue;
      const std::string near = closest_name(word, names);
      throw UsageError("unknown command \"" + word + "\"" +
                       (near.empty() ? "." : "; did you mean \"" + near + "\"?") +
                       " Commands: " + joined(names));
    }
    throw UsageError((extras.empty() ? "" : "not expected: " + joined(extras) + "; ") +
                     "a command is required. Commands: " + joined(names));
  }
  if (!extras.empty())
    throw UsageError("not expected before the command " + app.get_subcommands()[0]->get_name() +
                     ": " + joined(extras));
}

// The one line a subcommand that takes a path keeps of the paths and flags.
const char* const kPathsPointer =
    "--path NAME: see `sparse3d paths` (or --help-paths) for every execution path and "
    "optimization flag\n";

void add_help_paths_flag(CLI::App* app) {
  app->add_flag_callback(
      "--help-paths", [] { throw CallForPathsHelp(); },
      "Print every execution path and optimization flag and exit (as `sparse3d paths`)");
}

}  // namespace

std::string closest_name(const std::string& word, const std::vector<std::string>& names) {
  const size_t limit = word.size() <= 4 ? 1 : 2;
  std::string best;
  size_t best_d = limit + 1;
  for (const auto& n : names) {
    const size_t d = edit_distance(word, n);
    if (d < best_d && d < word.size()) {
      best = n;
      best_d = d;
    }
  }
  return best;
}

std::map<std::string, Command> add_commands(CLI::App& app) {
  app.set_version_flag("--version", std::string("sparse3d ") + sparse3d::version());
  std::map<std::string, Command> commands;
  commands["info"] = add_info(app);
  commands["paths"] = add_paths(app);
  commands["make-checkpoint"] = add_make_checkpoint(app);
  commands["make-payloads"] = add_make_payloads(app);
  commands["run"] = add_run(app);
  commands["bench"] = add_bench(app);
  commands["profile"] = add_profile(app);
  commands["bench-report"] = add_bench_report(app);
  commands["bench-kernels"] = add_bench_kernels(app);
  // Set once every subcommand exists (a subcommand copies its parent's footer and extras
  // setting when it is made): the pointer to the paths on the commands that take one, and the
  // top level's own footer, extras and command check.
  for (CLI::App* sub : app.get_subcommands([](CLI::App* s) {
         return s->get_option_no_throw("--path") != nullptr ||
                s->get_option_no_throw("--paths") != nullptr;
       })) {
    sub->footer(kPathsPointer);
    add_help_paths_flag(sub);
  }
  add_help_paths_flag(&app);
  app.footer("Execution paths and optimization flags (--path, --enable, --disable): "
             "`sparse3d paths` (or --help-paths)\n");
  // One command; anything else is reported by check_command (an unknown command by name).
  app.require_subcommand(0, 1);
  app.allow_extras();
  app.parse_complete_callback([&app] { check_command(app); });
  return commands;
}

}  // namespace s3d::apps
