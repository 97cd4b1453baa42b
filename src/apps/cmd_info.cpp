// info and paths: what the environment is, and what the engine can run.
#include <CLI/CLI.hpp>
#include <link.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "apps/commands.h"
#include "apps/engine_flags.h"
#include "io/json.h"
#include "sparse3d/engine.h"

namespace s3d::apps {
namespace {

// The CUDA libraries this process has loaded, with the files they came from (links
// resolved, so that the file name shows the version): which cuDNN a process runs is a
// question of where the loader found it, and a Python process may hold another package's.
struct LoadedLibrary {
  std::string name, path, file;
};

std::vector<LoadedLibrary> loaded_cuda_libraries() {
  static const char* const kNames[] = {"libcudart.so", "libcublasLt.so", "libcublas.so",
                                       "libcudnn.so", "libnvrtc.so"};
  std::vector<LoadedLibrary> out;
  auto visit = [&](const char* path) {
    const std::string p = path ? path : "";
    const std::string base = std::filesystem::path(p).filename().string();
    for (const char* name : kNames)
      if (base.rfind(name, 0) == 0) {
        std::error_code ec;
        const std::filesystem::path real = std::filesystem::canonical(p, ec);
        out.push_back({std::string(name, std::string(name).size() - 3), p,
                       ec ? base : real.filename().string()});
      }
  };
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        (*static_cast<decltype(visit)*>(data))(info->dlpi_name);
        return 0;
      },
      &visit);
  return out;
}

std::string info_text(bool json) {
  const std::string report = sparse3d::environment_report(json);
  const std::vector<LoadedLibrary> libs = loaded_cuda_libraries();
  if (json) {
    io::Json j = io::parse_json(report, "the environment report");
    j["libraries"] = io::Json::array();
    for (const auto& l : libs) j["libraries"].push_back({{"name", l.name}, {"path", l.path},
                                                         {"file", l.file}});
    return j.dump(2) + "\n";
  }
  std::string text = report + "libraries loaded:\n";
  for (const auto& l : libs) text += "  " + l.name + ": " + l.file + " from " + l.path + "\n";
  if (libs.empty()) text += "  none\n";
  return text;
}

}  // namespace

Command add_info(CLI::App& app) {
  auto* sub = app.add_subcommand(
      "info", "Print the environment fingerprint and the CUDA libraries loaded (and from where)");
  auto json = std::make_shared<bool>(false);
  sub->add_flag("--json", *json, "Print it as JSON");
  return [json]() {
    std::fputs(info_text(*json).c_str(), stdout);
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
