// libFuzzer target: the payload asset reader against a manifest the input also chooses.
// The first 12 bytes set the manifest's grid, L, cond channels, concat channels and the
// entry's token count (small ranges, so that a well-formed file can match them); the rest is
// the asset file. Only s3d::Error may come out; an asset that reads must hold what the
// reader promises (payload.h), or the target traps: coords [T, 4] with T = tokens, batch
// column 0, x, y, z in [0, grid) strictly increasing; cond [L, C] finite; concat_cond
// [T, Cc] finite when Cc > 0.
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/bf16.h"
#include "core/error.h"
#include "payload/payload.h"

namespace {

const std::string& scratch_dir() {
  static const std::string dir = [] {
    auto p = std::filesystem::temp_directory_path() /
             ("s3d_fuzz_asset_" + std::to_string(::getpid()));
    std::filesystem::create_directories(p);
    return p.string();
  }();
  return dir;
}

uint32_t u16(const uint8_t* p) { return p[0] | (uint32_t(p[1]) << 8); }

bool finite_all(const s3d::Tensor& t) {
  if (!t.defined()) return true;
  const int64_t n = t.numel();
  if (t.dtype() == s3d::DType::F32) {
    const float* p = t.data_as<float>();
    for (int64_t i = 0; i < n; ++i)
      if (!std::isfinite(p[i])) return false;
  } else if (t.dtype() == s3d::DType::BF16) {
    const uint16_t* p = t.data_as<uint16_t>();
    for (int64_t i = 0; i < n; ++i)
      if (!std::isfinite(s3d::bf16_to_float(p[i]))) return false;
  }
  return true;
}

void check_promises(const s3d::payload::Manifest& m, const s3d::payload::ManifestEntry& e,
                    const s3d::payload::Asset& a) {
  const s3d::Tensor& c = a.coords;
  if (c.ndim() != 2 || c.size(0) != e.tokens || c.size(1) != 4) __builtin_trap();
  const int32_t* p = c.data_as<int32_t>();
  for (int64_t r = 0; r < c.size(0); ++r) {
    const int32_t* row = p + 4 * r;
    if (row[0] != 0) __builtin_trap();
    for (int k = 1; k < 4; ++k)
      if (row[k] < 0 || row[k] >= m.grid) __builtin_trap();
    if (r > 0) {
      const int32_t* prev = row - 4;
      const bool increasing = prev[1] < row[1] || (prev[1] == row[1] && prev[2] < row[2]) ||
                              (prev[1] == row[1] && prev[2] == row[2] && prev[3] < row[3]);
      if (!increasing) __builtin_trap();
    }
  }
  if (a.cond.ndim() != 2 || a.cond.size(0) != m.cond_tokens || a.cond.size(1) != m.cond_channels)
    __builtin_trap();
  if (!finite_all(a.cond)) __builtin_trap();
  if (m.concat_channels > 0) {
    if (!a.concat_cond.defined() || a.concat_cond.size(0) != e.tokens ||
        a.concat_cond.size(1) != m.concat_channels || !finite_all(a.concat_cond))
      __builtin_trap();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 12) return 0;
  using namespace s3d;
  payload::Manifest m;
  m.dir = scratch_dir();
  m.grid = 1 + static_cast<int>(u16(data) % 1024);
  m.cond_tokens = 1 + static_cast<int>(u16(data + 2) % 64);
  m.cond_channels = 1 + static_cast<int>(u16(data + 4) % 64);
  m.concat_channels = static_cast<int>(u16(data + 6) % 9);
  payload::ManifestEntry entry;
  entry.name = "fuzz";
  entry.file = "asset.safetensors";
  entry.tokens = 1 + static_cast<int64_t>(u16(data + 8) % 4096);
  {
    std::ofstream out(m.dir + "/" + entry.file, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data + 12), static_cast<std::streamsize>(size - 12));
  }
  payload::Asset a;
  try {
    a = payload::read_asset(m, entry);
  } catch (const Error&) {
    return 0;
  }
  check_promises(m, entry, a);
  return 0;
}
