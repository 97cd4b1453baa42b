// libFuzzer target: the payload manifest reader. Only s3d::Error may escape; a manifest
// that reads must also write and read back unchanged (write_manifest refuses nothing that
// read_manifest accepts), or the target traps.
#include <cstdint>
#include <string>

#include "core/error.h"
#include "payload/payload.h"
#include "scratch.h"

namespace {

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
  const std::string path = s3d::fuzz::write_input("manifest.json", data, size);
  payload::Manifest m;
  try {
    m = payload::read_manifest(path);
  } catch (const Error&) {
    return 0;
  }
  const std::string again = s3d::fuzz::scratch_dir() + "/again.json";
  payload::write_manifest(again, m);  // throws (uncaught: a finding) if it refuses m
  if (!same(m, payload::read_manifest(again))) __builtin_trap();
  return 0;
}
