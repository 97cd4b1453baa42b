// The engine's counter-based normal generator (docs/FORMATS.md gives its exact definition,
// which the PyTorch oracle reimplements). Element i of a stream depends only on (seed, i),
// so any range can be generated in parallel and every backend sees the same noise.
#pragma once

#include <cstdint>

namespace s3d {

inline uint64_t splitmix64(uint64_t x) {
  uint64_t z = x + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

inline uint64_t rng_key(uint64_t seed, uint64_t counter) {
  return splitmix64(seed ^ splitmix64(counter));
}

// Standard normal values for elements [begin, begin + n) of the stream `seed`.
void normal_fill(uint64_t seed, uint64_t begin, uint64_t n, float* out);

// Uniform in [0, 1) for element i (53-bit resolution).
inline double uniform_at(uint64_t seed, uint64_t i) {
  return static_cast<double>(rng_key(seed, i) >> 11) * 0x1.0p-53;
}

}  // namespace s3d
