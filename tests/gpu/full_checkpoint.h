// The full 30-block checkpoint and real payload files for GPU tests that need them:
// SPARSE3D_FULL_CKPT (NAME.json) and SPARSE3D_FULL_MANIFEST (manifest.json) name them
// (scripts/device/prepare_model.sh makes /tmp/s3d/shape.json and /tmp/s3d/pl/manifest.json);
// tests skip with that hint otherwise. Assets: SPARSE3D_FULL_ASSETS (comma-separated
// names), else those of 3,664 and 30,227 tokens, else the smallest and the largest.
#pragma once

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "core/rng.h"
#include "payload/payload.h"
#include "sampler/sampler.h"

namespace s3d::testing {

inline int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : fallback;
}

struct FullCheckpoint {
  std::string checkpoint, manifest;
  // Empty when the variables are unset or name no file: the reason to skip.
  std::string missing;
};

inline FullCheckpoint full_checkpoint() {
  FullCheckpoint f;
  const char* ckpt = std::getenv("SPARSE3D_FULL_CKPT");
  const char* man = std::getenv("SPARSE3D_FULL_MANIFEST");
  if (!ckpt || !man || !std::filesystem::exists(ckpt) || !std::filesystem::exists(man)) {
    f.missing = "set SPARSE3D_FULL_CKPT=NAME.json and SPARSE3D_FULL_MANIFEST=manifest.json "
                "(scripts/device/prepare_model.sh makes /tmp/s3d/shape.json and "
                "/tmp/s3d/pl/manifest.json)";
    return f;
  }
  f.checkpoint = ckpt;
  f.manifest = man;
  return f;
}

inline std::vector<const payload::ManifestEntry*> full_assets(const payload::Manifest& man) {
  const char* env_names = std::getenv("SPARSE3D_FULL_ASSETS");
  const std::string names = env_names ? env_names : "";
  std::vector<std::string> wanted;
  for (size_t at = 0; at < names.size();) {
    size_t cut = names.find(',', at);
    if (cut == std::string::npos) cut = names.size();
    wanted.push_back(names.substr(at, cut - at));
    at = cut + 1;
  }
  std::vector<const payload::ManifestEntry*> picked;
  for (const auto& e : man.assets) {
    const bool named = std::find(wanted.begin(), wanted.end(), e.name) != wanted.end();
    if (named || (wanted.empty() && (e.tokens == 3664 || e.tokens == 30227))) picked.push_back(&e);
  }
  if (picked.empty() && !man.assets.empty()) {
    auto by_tokens = [](const auto* a, const auto* b) { return a->tokens < b->tokens; };
    std::vector<const payload::ManifestEntry*> all;
    for (const auto& e : man.assets) all.push_back(&e);
    picked = {*std::min_element(all.begin(), all.end(), by_tokens),
              *std::max_element(all.begin(), all.end(), by_tokens)};
  }
  return picked;
}

// One asset's sampler inputs: its coordinates and condition, noise from its seed.
inline sampler::Inputs asset_inputs(const payload::Manifest& man, const payload::ManifestEntry& e,
                                    int64_t out_channels) {
  payload::Asset a = payload::read_asset(man, e);
  sampler::Inputs in;
  in.coords = a.coords;
  in.cond = a.cond.reshape({1, a.cond.size(0), a.cond.size(1)});
  in.noise = Tensor::empty({a.coords.size(0), out_channels}, DType::F32, Device::CPU);
  normal_fill(a.noise_seed, 0, static_cast<uint64_t>(in.noise.numel()), in.noise.data_as<float>());
  in.concat_cond = a.concat_cond;
  return in;
}

}  // namespace s3d::testing
