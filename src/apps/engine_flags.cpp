#include "apps/engine_flags.h"

#include <filesystem>
#include <string_view>

#include "apps/commands.h"
#include "core/error.h"
#include "io/atomic_file.h"

namespace s3d::apps {

void EngineFlags::add_to(CLI::App* sub) {
  sub->add_option("--checkpoint", checkpoint, "NAME.json (NAME.safetensors beside it)")
      ->required();
  sub->add_option("--device", device, "auto | cuda | cpu")
      ->check(CLI::IsMember({"auto", "cuda", "cpu"}))
      ->capture_default_str();
  sub->add_option("--path", path,
                  "Execution path, optionally with +flag/-flag edits (default: " +
                      std::string(sparse3d::default_path()) + "; every path and flag: `sparse3d paths`)")
      ->check(kNonEmptyValue);
  sub->add_option("--enable", enable, "Turn an optimization flag on (e.g. batched_cfg)");
  sub->add_option("--disable", disable, "Turn an optimization flag off");
  add_qualify_m(sub, qualify_m);
  add_devices(sub, devices);
  sub->add_option("--parallel-min-tokens", parallel_min_tokens,
                  "With --devices: split a request only when every device gets at least this "
                  "many tokens")
      ->transform(integer_in(1, int64_t{1} << 40))
      ->capture_default_str();
  sub->add_option("--max-device-memory", max_device_memory_gib,
                  "Use at most this many GiB of device memory (0 = all)")
      ->check(number_in(0, 1 << 20));
  sub->add_option("--cache-dir", cache_dir,
                  "Qualification cache folder (default $SPARSE3D_CACHE_DIR, else "
                  "$XDG_CACHE_HOME/sparse3d, else ~/.cache/sparse3d)")
      ->check(kNonEmptyPath);
  sub->add_flag("--no-qualification-cache", no_cache,
                "Qualify in memory only: neither read nor write the cache file");
  sub->add_option("--weight-format", weight_format,
                  "How the linear layers hold their weights: plain (default: the checkpoint's "
                  "tensors as they are) or row_scaled (a test format; docs/DESIGN.md)")
      ->check(kNonEmptyValue);
}

void EngineFlags::add_qualify_m(CLI::App* sub, std::vector<int64_t>& qualify_m) {
  sub->add_option("--qualify-m", qualify_m,
                  "Null-context qualification: candidate canonical M (default 1 64 128 256 512 "
                  "1024)")
      ->transform(integer_in(1, 1 << 20));
}

namespace {

// --devices: comma-separated ordinals, every item one (an empty item is a mistake, not
// nothing) and none twice; a usage error (exit 2) otherwise, as every other bad value.
CLI::Validator device_list() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        const CLI::Validator ordinal = integer_in(0, 1 << 16);
        std::vector<std::string> seen;
        size_t start = 0;
        while (true) {
          const size_t comma = text.find(',', start);
          std::string item = text.substr(start, comma == std::string::npos ? std::string::npos
                                                                           : comma - start);
          if (item.empty())
            return "an empty item in the list (give CUDA device ordinals separated by commas, "
                   "e.g. 0,1)";
          const std::string why = ordinal(item);
          if (!why.empty()) return why;
          for (const std::string& s : seen)
            if (s == item) return "device " + item + " is listed twice";
          seen.push_back(item);
          if (comma == std::string::npos) break;
          start = comma + 1;
        }
        return "";
      },
      "INT[,INT...]", "device_list");
}

}  // namespace

void EngineFlags::add_devices(CLI::App* sub, std::vector<int>& devices) {
  sub->add_option_function<std::string>(
         "--devices",
         [&devices](const std::string& text) {
           devices.clear();
           for (size_t start = 0;;) {  // checked by device_list() already
             const size_t comma = text.find(',', start);
             devices.push_back(std::stoi(text.substr(start, comma - start)));
             if (comma == std::string::npos) break;
             start = comma + 1;
           }
         },
         "CUDA devices to split one request over (sequence parallelism), the engine's own "
         "first, e.g. 0,1 (default: one device)")
      ->check(device_list());
}

sparse3d::EngineOptions EngineFlags::resolve() const {
  sparse3d::EngineOptions o;
  o.path = path;
  for (const auto& f : enable) o.enable.push_back(sparse3d::parse_flag(f));
  for (const auto& f : disable) o.disable.push_back(sparse3d::parse_flag(f));
  if (!path.empty()) (void)sparse3d::ExecutionPlan::parse(path);  // unknown names fail here
  o.device = device == "cuda" ? sparse3d::DeviceChoice::CUDA
             : device == "cpu" ? sparse3d::DeviceChoice::CPU
                               : sparse3d::DeviceChoice::Auto;
  o.max_device_memory_gib = max_device_memory_gib;
  o.qualify_m = qualify_m;
  o.devices = devices;
  o.parallel_min_tokens = parallel_min_tokens;
  o.cache_dir = cache_dir;
  o.persist_qualification = !no_cache;
  o.weight_format = weight_format;  // an unknown name: the engine's error names the known
  return o;
}

void EngineFlags::check_output_folder(const std::string& folder) {
  io::check_output_folder(folder, "--out " + folder);
}

void EngineFlags::check_manifest(const sparse3d::Engine& engine, const payload::Manifest& m,
                                 const std::string& path) {
  const sparse3d::ModelInfo& mi = engine.model();
  S3D_CHECK(m.cond_channels == mi.cond_channels, "manifest ", path, " has conditions of ",
            m.cond_channels, " channels, but checkpoint ", mi.checkpoint, " expects ",
            mi.cond_channels);
  S3D_CHECK(m.concat_channels == mi.in_channels - mi.out_channels, "manifest ", path, " has ",
            m.concat_channels, " concat channels per token, but the checkpoint takes ",
            mi.in_channels, " input channels for ", mi.out_channels, " latent channels");
}

std::string paths_and_flags_help() {
  constexpr size_t kColumn = 26;
  auto padded = [](std::string_view name) {
    return std::string(name) + std::string(name.size() < kColumn ? kColumn - name.size() : 1, ' ');
  };
  std::string s = cat("Execution paths (--path NAME, optionally with +flag/-flag edits, e.g. "
                      "beyond-cuda_graphs; default ",
                      sparse3d::default_path(), ", without cuda_graphs on the CPU backend):\n");
  for (const auto& p : sparse3d::execution_paths()) {
    std::string flags;
    for (sparse3d::Flag f : p.flags.flags()) flags += cat(flags.empty() ? "" : ", ", sparse3d::name(f));
    s += cat("  ", padded(p.name), p.help, "\n  ", padded(""), "flags: ",
             flags.empty() ? "none" : flags, "\n");
  }
  s += "\nOptimization flags (--enable/--disable FLAG, or +flag/-flag after a path) and their "
       "contracts:\n";
  for (const auto& f : sparse3d::flag_infos()) s += cat("  ", padded(f.name), f.contract, "\n");
  return s;
}

}  // namespace s3d::apps
