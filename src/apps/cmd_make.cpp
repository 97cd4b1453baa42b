// make-checkpoint and make-payloads: synthetic inputs in the released formats.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <sstream>

#include "apps/commands.h"
#include "core/error.h"
#include "io/atomic_file.h"
#include "payload/generate.h"
#include "sparse3d/synthetic.h"

namespace s3d::apps {
namespace {

// --tokens: comma-separated counts, each a decimal integer in [1, 2^30] (as a manifest's
// 'tokens'), at most payload::kMaxAssets of them; rewritten canonical ("010" is 10).
CLI::Validator token_list() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        const CLI::Validator count = integer_in(1, int64_t{1} << 30);
        std::string canonical, item;
        size_t n = 0;
        std::stringstream ss(text + ",");  // every item, the empty last one included
        while (std::getline(ss, item, ',')) {
          if (++n > payload::kMaxAssets)
            return cat("more than ", payload::kMaxAssets, " token counts (at most ",
                       payload::kMaxAssets, " assets)");
          const std::string error = count(item);
          if (!error.empty()) return "token count " + error;
          canonical += (canonical.empty() ? "" : ",") + item;
        }
        text = canonical;
        return "";
      },
      "N,N,...", "token_list");
}

std::vector<int64_t> parse_counts(const std::string& text) {
  std::vector<int64_t> v;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) v.push_back(std::stoll(item));  // checked by token_list
  return v;
}

}  // namespace

Command add_make_checkpoint(CLI::App& app) {
  struct Args {
    std::string preset = "tiny", out, dtype = "bf16";
    uint64_t seed = 0;
  };
  auto a = std::make_shared<Args>();
  auto* sub = app.add_subcommand("make-checkpoint",
                                 "Write OUT.json + OUT.safetensors with synthetic weights");
  sub->add_option("--preset", a->preset,
                  "trellis2-shape-1024 | trellis2-tex-1024 | tiny | trellis2-ss-16 | tiny-ss")
      ->capture_default_str();
  sub->add_option("--seed", a->seed, "Weight seed")
      ->transform(unsigned_64())
      ->capture_default_str();
  sub->add_option("--out", a->out, "Output prefix DIR/NAME")->required()->check(kNonEmptyPath);
  sub->add_option("--dtype", a->dtype, "Stored dtype: bf16 (as released) or f32")
      ->check(CLI::IsMember({"bf16", "f32"}))
      ->capture_default_str();
  return [a]() {
    namespace fs = std::filesystem;
    const std::string what = "--out " + a->out;
    const fs::path prefix(a->out);
    const std::string name = prefix.filename().string();
    S3D_CHECK(!name.empty() && name != "." && name != "..", what,
              ": names a folder; give a prefix DIR/NAME (NAME.json and NAME.safetensors are "
              "written)");
    const int64_t parameters = sparse3d::synthetic_parameter_count(a->preset);  // known preset
    // Both files checked before the weights are made (a large preset takes a while).
    const std::string st = a->out + ".safetensors", json = a->out + ".json";
    io::check_output_file(st, what);
    io::check_output_file(json, what);
    io::NewFolders folders;
    if (prefix.has_parent_path()) folders.make(prefix.parent_path().string(), what);
    // An interruption between the two files removes the first, when this call made it.
    std::error_code ec;
    io::RemoveOnSignal st_guard, json_guard;
    if (!fs::exists(st, ec)) st_guard = io::RemoveOnSignal(st, io::RemoveOnSignal::Kind::File);
    if (!fs::exists(json, ec))
      json_guard = io::RemoveOnSignal(json, io::RemoveOnSignal::Kind::File);
    sparse3d::make_synthetic_checkpoint(a->preset, a->seed, a->out,
                                        a->dtype == "f32" ? DType::F32 : DType::BF16);
    folders.keep();
    std::printf("wrote %s.json and %s.safetensors (%s, %lld parameters, %s)\n", a->out.c_str(),
                a->out.c_str(), a->preset.c_str(),
                static_cast<long long>(parameters), a->dtype.c_str());
    return 0;
  };
}

Command add_make_payloads(CLI::App& app) {
  struct Args {
    std::string out, set = "benchmark", tokens;
    int cond_tokens = 0, cond_channels = 0, concat_channels = 0;
    uint64_t seed = 2026;
  };
  auto a = std::make_shared<Args>();
  auto* sub = app.add_subcommand("make-payloads", "Write a payload manifest and asset files");
  sub->add_option("--out", a->out, "Output folder")->required()->check(kNonEmptyPath);
  sub->add_option("--set", a->set,
                  "benchmark (10 assets 3,664..30,227 + long tail to 49,152, L=4101, 1024 ch), "
                  "small (2 small assets for the tiny preset), dense (4 structures on the 16^3 "
                  "grid, L=1029, for trellis2-ss-16) or dense-small (2 on 8^3, for tiny-ss)")
      ->check(CLI::IsMember({"benchmark", "small", "dense", "dense-small"}))
      ->capture_default_str();
  sub->add_option("--tokens", a->tokens, "Comma-separated token counts (replaces the set's)")
      ->transform(token_list());
  // The bounds a manifest's reader takes (payload.cpp); the sizes they make together are
  // checked against payload::kMaxAssetBytes and kMaxPayloadBytes before anything is made.
  CLI::Option* cond_tokens =
      sub->add_option("--cond-tokens", a->cond_tokens, "Condition tokens L")
          ->transform(integer_in(1, int64_t{1} << 30));
  CLI::Option* cond_channels =
      sub->add_option("--cond-channels", a->cond_channels, "Condition channels")
          ->transform(integer_in(1, 1 << 20));
  sub->add_option("--concat-channels", a->concat_channels,
                  "Per-token shape-latent channels (texture models)")
      ->transform(integer_in(0, 1 << 20))
      ->capture_default_str();
  sub->add_option("--seed", a->seed, "Payload seed")
      ->transform(unsigned_64())
      ->capture_default_str();
  return [a, cond_tokens, cond_channels]() {
    payload::GenerateOptions o = a->set == "small"         ? payload::GenerateOptions::small()
                                 : a->set == "dense"       ? payload::GenerateOptions::dense_structure()
                                 : a->set == "dense-small" ? payload::GenerateOptions::dense_small()
                                                           : payload::GenerateOptions::benchmark();
    if (!a->tokens.empty()) {
      o.default_tokens = parse_counts(a->tokens);
      o.long_tail_tokens.clear();
    }
    if (cond_tokens->count() > 0) o.cond_tokens = a->cond_tokens;
    if (cond_channels->count() > 0) o.cond_channels = a->cond_channels;
    o.concat_channels = a->concat_channels;
    o.seed = a->seed;
    payload::Manifest m = payload::generate_payloads(a->out, o);
    std::printf("wrote %s/manifest.json with %zu assets:\n", a->out.c_str(), m.assets.size());
    for (const auto& e : m.assets)
      std::printf("  %-24s %7lld tokens  %s\n", e.name.c_str(), static_cast<long long>(e.tokens),
                  e.set.c_str());
    return 0;
  };
}

}  // namespace s3d::apps
