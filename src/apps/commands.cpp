#include <CLI/CLI.hpp>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

#include "apps/commands.h"
#include "apps/engine_flags.h"
#include "core/error.h"
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

// `text` as a decimal integer: an optional '-', then digits; nothing else (no '+', no
// spaces, no base prefix). False when it is not one or does not fit 64 bits.
bool parse_decimal(const std::string& text, bool& negative, uint64_t& magnitude) {
  negative = !text.empty() && text[0] == '-';
  const size_t start = negative ? 1 : 0;
  if (text.size() == start || text.size() - start > 20) return false;
  magnitude = 0;
  for (size_t i = start; i < text.size(); ++i) {
    const char c = text[i];
    if (c < '0' || c > '9') return false;
    const uint64_t digit = static_cast<uint64_t>(c - '0');
    if (magnitude > (std::numeric_limits<uint64_t>::max() - digit) / 10) return false;
    magnitude = magnitude * 10 + digit;
  }
  return true;
}

std::string in_quotes(const std::string& text) {
  return "'" + (text.size() > 40 ? text.substr(0, 40) + "..." : text) + "'";
}

}  // namespace

CLI::Validator integer_in(int64_t min, int64_t max) {
  const std::string range = cat("[", min, ", ", max, "]");
  return CLI::Validator(
      [min, max, range](std::string& text) -> std::string {
        bool negative = false;
        uint64_t magnitude = 0;
        if (!parse_decimal(text, negative, magnitude) || (negative && min >= 0))
          return in_quotes(text) + " is not " + (min >= 0 ? "a non-negative" : "an") +
                 " integer in decimal digits (expected one in " + range + ")";
        const uint64_t limit = negative ? uint64_t{1} << 63
                                        : static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
        if (magnitude > limit) return in_quotes(text) + " is outside " + range;
        const int64_t value = !negative              ? static_cast<int64_t>(magnitude)
                              : magnitude == limit ? std::numeric_limits<int64_t>::min()
                                                   : -static_cast<int64_t>(magnitude);
        if (value < min || value > max) return in_quotes(text) + " is outside " + range;
        text = std::to_string(value);
        return "";
      },
      "INT in " + range, "integer_in");
}

CLI::Validator unsigned_64() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        bool negative = false;
        uint64_t value = 0;
        if (!parse_decimal(text, negative, value) || negative)
          return in_quotes(text) + " is not a non-negative integer in decimal digits below 2^64 "
                 "(expected one in [0, 18446744073709551615])";
        text = std::to_string(value);
        return "";
      },
      "UINT64", "unsigned_64");
}

CLI::Validator number_in(double min, double max) {
  const std::string range = cat("[", min, ", ", max, "]");
  return CLI::Validator(
      [min, max, range](std::string& text) -> std::string {
        // Decimal only: digits, one '.', an exponent; strtod alone would also take "nan",
        // "inf", hexadecimal and leading spaces.
        bool digits = false, decimal = !text.empty();
        for (size_t i = 0; i < text.size(); ++i) {
          const char c = text[i];
          const bool sign_ok = (c == '-' || c == '+') &&
                               (i == 0 || text[i - 1] == 'e' || text[i - 1] == 'E');
          digits = digits || (c >= '0' && c <= '9');
          decimal = decimal && ((c >= '0' && c <= '9') || sign_ok || c == '.' || c == 'e' ||
                                c == 'E');
        }
        digits = digits && decimal;
        char* end = nullptr;
        errno = 0;
        const double v = digits ? std::strtod(text.c_str(), &end) : 0.0;
        if (!digits || end != text.c_str() + text.size() || !std::isfinite(v) || errno == ERANGE)
          return in_quotes(text) + " is not a finite decimal number (expected one in " + range + ")";
        if (v < min || v > max) return in_quotes(text) + " is outside " + range;
        return "";
      },
      "NUMBER in " + range, "number_in");
}

const CLI::Validator kNonEmptyPath(
    [](std::string& text) -> std::string { return text.empty() ? "the path is empty" : ""; },
    "PATH", "non_empty_path");

const CLI::Validator kNonEmptyValue(
    [](std::string& text) -> std::string { return text.empty() ? "the value is empty" : ""; },
    "", "non_empty_value");

std::string printable(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte < 0x20 || byte == 0x7f) {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\x%02x", byte);
      out += escaped;
    } else {
      out += c;
    }
  }
  return out;
}

std::string unknown_arguments(const CLI::App& app) {
  const auto subs = app.get_subcommands();
  if (subs.empty()) return "";  // no command: check_command's report stands
  const CLI::App* sub = subs[0];
  // Words before the command are check_command's to report.
  const std::vector<std::string> words = sub->remaining(true);
  std::vector<std::string> names;
  for (const CLI::Option* o : sub->get_options())
    for (const auto& n : o->get_lnames()) names.push_back("--" + n);
  std::vector<std::string> options, others;
  bool after_unknown_option = false;
  for (const auto& w : words) {
    if (w.empty() || w == "--") continue;
    // A plain word right after an unknown option is most likely that option's value.
    const bool value = after_unknown_option && w[0] != '-';
    after_unknown_option = w[0] == '-' && w.find('=') == std::string::npos;
    if (value) continue;
    if (w[0] == '-') {
      // "--name=value": the name is what is unknown.
      const std::string name = w.substr(0, w.find('='));
      const std::string near = closest_name(name, names);
      options.push_back(in_quotes(name) + (near.empty() ? "" : " (did you mean " + near + "?)"));
    } else {
      others.push_back(in_quotes(w));
    }
  }
  if (options.empty() && others.empty()) return "";
  std::string message = sub->get_name() + ": ";
  if (!options.empty())
    message += (options.size() > 1 ? "unknown options " : "unknown option ") + joined(options);
  if (!others.empty())
    message += std::string(options.empty() ? "" : "; ") +
               (others.size() > 1 ? "unexpected arguments " : "unexpected argument ") +
               joined(others);
  return message;
}

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
  commands["make-glb-input"] = add_make_glb_input(app);
  commands["export-glb"] = add_export_glb(app);
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
