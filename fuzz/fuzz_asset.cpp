// libFuzzer target: the payload asset reader against a manifest the input also chooses.
// The first 12 bytes set the manifest's grid, L, cond channels, concat channels and the
// entry's token count (small ranges, so that a well-formed file can match them); the rest is
// the asset file. Only s3d::Error may come out; an asset that reads must hold what the
// reader promises (payload.h), or the target traps: coords [T, 4] with T = tokens, batch
// column 0, x, y, z in [0, grid) strictly increasing; cond [L, C] finite; concat_cond
// [T, Cc] finite when Cc > 0.
#include <cstdint>
#include <string>

#include "core/error.h"
#include "payload/payload.h"
#include "scratch.h"

namespace {

uint32_t u16(const uint8_t* p) { return p[0] | (uint32_t(p[1]) << 8); }

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
  if (a.cond.first_non_finite() >= 0) __builtin_trap();
  if (m.concat_channels > 0) {
    if (!a.concat_cond.defined() || a.concat_cond.size(0) != e.tokens ||
        a.concat_cond.size(1) != m.concat_channels || a.concat_cond.first_non_finite() >= 0)
      __builtin_trap();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 12) return 0;
  using namespace s3d;
  payload::Manifest m;
  m.dir = s3d::fuzz::scratch_dir();
  m.grid = 1 + static_cast<int>(u16(data) % 1024);
  m.cond_tokens = 1 + static_cast<int>(u16(data + 2) % 64);
  m.cond_channels = 1 + static_cast<int>(u16(data + 4) % 64);
  m.concat_channels = static_cast<int>(u16(data + 6) % 9);
  payload::ManifestEntry entry;
  entry.name = "fuzz";
  entry.file = "asset.safetensors";
  entry.tokens = 1 + static_cast<int64_t>(u16(data + 8) % 4096);
  s3d::fuzz::write_input(entry.file, data + 12, size - 12);
  payload::Asset a;
  try {
    a = payload::read_asset(m, entry);
  } catch (const Error&) {
    return 0;
  }
  check_promises(m, entry, a);
  return 0;
}
