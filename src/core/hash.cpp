#include "core/hash.h"

#include <cstring>

#include "core/rng.h"

namespace s3d {
namespace {

inline uint64_t load64(const unsigned char* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

inline uint64_t mix(uint64_t lane, uint64_t word) {
  return (lane ^ splitmix64(word)) * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull;
}

}  // namespace

uint64_t content_hash(const void* data, size_t n, uint64_t seed) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint64_t lane[4] = {splitmix64(seed), splitmix64(seed + 1), splitmix64(seed + 2),
                      splitmix64(seed + 3)};
  size_t i = 0;
  for (; i + 32 <= n; i += 32)
    for (int k = 0; k < 4; ++k) lane[k] = mix(lane[k], load64(p + i + 8 * k));
  unsigned char tail[32] = {};
  std::memcpy(tail, p + i, n - i);
  for (int k = 0; k < 4; ++k) lane[k] = mix(lane[k], load64(tail + 8 * k));
  uint64_t h = splitmix64(static_cast<uint64_t>(n));
  for (int k = 0; k < 4; ++k) h = splitmix64(h ^ lane[k]);
  return h;
}

uint64_t content_hash(const std::string& text, uint64_t seed) {
  return content_hash(text.data(), text.size(), seed);
}

std::string hex16(uint64_t value) {
  static const char digits[] = "0123456789abcdef";
  std::string s(16, '0');
  for (int i = 15; i >= 0; --i, value >>= 4) s[static_cast<size_t>(i)] = digits[value & 15];
  return s;
}

}  // namespace s3d
