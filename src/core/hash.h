// Content hashes for cache keys and weight versions: not cryptographic, just fast enough to
// hash a multi-gigabyte checkpoint at load (8 bytes per step in four independent lanes, so
// the multiplies overlap) and spread well enough that distinct contents do not collide in
// practice. Written for this project; the mixing constants are splitmix64's (core/rng.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace s3d {

// Hash of n bytes, continuing from `seed` (pass a previous result to chain pieces).
uint64_t content_hash(const void* data, size_t n, uint64_t seed = 0);
uint64_t content_hash(const std::string& text, uint64_t seed = 0);

// 16 lowercase hex digits.
std::string hex16(uint64_t value);

}  // namespace s3d
