// The Engine's options as command-line flags: all of them for `run`, and --qualify-m for
// `bench` too, whose other engine options have help of their own in cmd_bench.cpp (the
// flags and paths themselves come from include/sparse3d/flags.h).
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "payload/payload.h"
#include "sparse3d/engine.h"

namespace s3d::apps {

struct EngineFlags {
  std::string checkpoint;
  std::string device = "auto";
  std::string path;  // empty: the engine's default (fast; without cuda_graphs on the CPU)
  std::vector<std::string> enable, disable;
  std::vector<int64_t> qualify_m;
  std::vector<int> devices;
  int64_t parallel_min_tokens = 8192;
  double max_device_memory_gib = 0;
  std::string cache_dir;
  bool no_cache = false;
  std::string weight_format;

  void add_to(CLI::App* sub);
  sparse3d::EngineOptions resolve() const;

  // --qualify-m into `qualify_m` (EngineOptions::qualify_m). add_to registers it; `bench`,
  // which keeps its engine options in BenchOptions, registers the same option with this.
  static void add_qualify_m(CLI::App* sub, std::vector<int64_t>& qualify_m);
  // --devices 0,1 into `devices` (EngineOptions::devices), for `run` and `bench`.
  static void add_devices(CLI::App* sub, std::vector<int>& devices);

  // Before anything is loaded: `folder` is a folder this process can write in, or one it
  // can make (the folder itself is made only when there is a file to write into it).
  static void check_output_folder(const std::string& folder);
  // The manifest's conditions and concat channels must match the model.
  static void check_manifest(const sparse3d::Engine& engine, const payload::Manifest& m,
                             const std::string& path);
};

// Every execution path (a line of what it is, a line of its flags), then every optimization
// flag (a line with its contract): what `sparse3d paths` and --help-paths print.
std::string paths_and_flags_help();

}  // namespace s3d::apps
