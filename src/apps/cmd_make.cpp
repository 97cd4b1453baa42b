// make-checkpoint and make-payloads: synthetic inputs in the released formats.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>
#include <sstream>

#include "apps/commands.h"
#include "core/error.h"
#include "model/checkpoint.h"
#include "model/slat_flow_weights.h"
#include "payload/generate.h"

namespace s3d::apps {
namespace {

std::vector<int64_t> parse_counts(const std::string& text) {
  std::vector<int64_t> v;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      size_t used = 0;
      long long n = std::stoll(item, &used);
      S3D_CHECK(used == item.size() && n >= 1, "bad token count '", item, "'");
      v.push_back(n);
    } catch (const std::logic_error&) {
      fail("--tokens: '", item, "' is not a positive integer");
    }
  }
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
  sub->add_option("--seed", a->seed, "Weight seed")->capture_default_str();
  sub->add_option("--out", a->out, "Output prefix DIR/NAME")->required();
  sub->add_option("--dtype", a->dtype, "Stored dtype: bf16 (as released) or f32")
      ->check(CLI::IsMember({"bf16", "f32"}))
      ->capture_default_str();
  return [a]() {
    model::ModelConfig c = model::preset(a->preset);
    model::make_checkpoint(c, a->seed, a->out, a->dtype == "f32" ? DType::F32 : DType::BF16);
    std::printf("wrote %s.json and %s.safetensors (%s, %lld parameters, %s)\n", a->out.c_str(),
                a->out.c_str(), a->preset.c_str(),
                static_cast<long long>(model::parameter_count(c)), a->dtype.c_str());
    return 0;
  };
}

Command add_make_payloads(CLI::App& app) {
  struct Args {
    std::string out, set = "benchmark", tokens;
    int cond_tokens = -1, cond_channels = -1, concat_channels = 0;
    uint64_t seed = 2026;
  };
  auto a = std::make_shared<Args>();
  auto* sub = app.add_subcommand("make-payloads", "Write a payload manifest and asset files");
  sub->add_option("--out", a->out, "Output folder")->required();
  sub->add_option("--set", a->set,
                  "benchmark (10 assets 3,664..30,227 + long tail to 49,152, L=4101, 1024 ch), "
                  "small (2 small assets for the tiny preset), dense (4 structures on the 16^3 "
                  "grid, L=1029, for trellis2-ss-16) or dense-small (2 on 8^3, for tiny-ss)")
      ->check(CLI::IsMember({"benchmark", "small", "dense", "dense-small"}))
      ->capture_default_str();
  sub->add_option("--tokens", a->tokens, "Comma-separated token counts (replaces the set's)");
  sub->add_option("--cond-tokens", a->cond_tokens, "Condition tokens L");
  sub->add_option("--cond-channels", a->cond_channels, "Condition channels");
  sub->add_option("--concat-channels", a->concat_channels,
                  "Per-token shape-latent channels (texture models)")
      ->capture_default_str();
  sub->add_option("--seed", a->seed, "Payload seed")->capture_default_str();
  return [a]() {
    payload::GenerateOptions o = a->set == "small"         ? payload::GenerateOptions::small()
                                 : a->set == "dense"       ? payload::GenerateOptions::dense_structure()
                                 : a->set == "dense-small" ? payload::GenerateOptions::dense_small()
                                                           : payload::GenerateOptions::benchmark();
    if (!a->tokens.empty()) {
      o.default_tokens = parse_counts(a->tokens);
      o.long_tail_tokens.clear();
    }
    if (a->cond_tokens > 0) o.cond_tokens = a->cond_tokens;
    if (a->cond_channels > 0) o.cond_channels = a->cond_channels;
    S3D_CHECK(a->cond_tokens == -1 || a->cond_tokens > 0, "--cond-tokens must be >= 1");
    S3D_CHECK(a->cond_channels == -1 || a->cond_channels > 0, "--cond-channels must be >= 1");
    S3D_CHECK(a->concat_channels >= 0, "--concat-channels must be >= 0");
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
