// libFuzzer target: the payload manifest reader. Only s3d::Error may escape; a manifest
// that reads must also write and read back unchanged (write_manifest refuses nothing that
// read_manifest accepts), or the target traps.
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/error.h"
#include "payload/payload.h"

namespace {

const std::string& scratch_dir() {
  static const std::string dir = [] {
    auto p = std::filesystem::temp_directory_path() /
             ("s3d_fuzz_manifest_" + std::to_string(::getpid()));
    std::filesystem::create_directories(p);
    return p.string();
  }();
  return dir;
}

bool same(const s3d::payload::Manifest& a, const s3d::payload::Manifest& b) {
  if (a.grid != b.grid || a.cond_tokens != b.cond_tokens || a.cond_channels != b.cond_channels ||
      a.concat_channels != b.concat_channels || a.assets.size() != b.assets.size())
    return false;
  for (size_t i = 0; i < a.assets.size(); ++i) {
    const auto &x = a.assets[i], &y = b.assets[i];
    if (x.name != y.name || x.file != y.file || x.tokens != y.tokens ||
        x.noise_seed != y.noise_seed || x.set != y.set)
      return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace s3d;
  const std::string path = scratch_dir() + "/manifest.json";
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  payload::Manifest m;
  try {
    m = payload::read_manifest(path);
  } catch (const Error&) {
    return 0;
  }
  const std::string again = scratch_dir() + "/again.json";
  payload::write_manifest(again, m);  // throws (uncaught: a finding) if it refuses m
  if (!same(m, payload::read_manifest(again))) __builtin_trap();
  return 0;
}
