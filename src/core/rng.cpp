#include "core/rng.h"

#include <cmath>

namespace s3d {

void normal_fill(uint64_t seed, uint64_t begin, uint64_t n, float* out) {
  const uint64_t end = begin + n;
  const int64_t first_pair = static_cast<int64_t>(begin / 2);
  const int64_t last_pair = static_cast<int64_t>((end + 1) / 2);
#pragma omp parallel for schedule(static) if (n > (1u << 16))
  for (int64_t k = first_pair; k < last_pair; ++k) {
    uint64_t kk = static_cast<uint64_t>(k);
    double u1 = static_cast<double>((rng_key(seed, 2 * kk) >> 11) + 1) * 0x1.0p-53;
    double u2 = static_cast<double>(rng_key(seed, 2 * kk + 1) >> 11) * 0x1.0p-53;
    double r = std::sqrt(-2.0 * std::log(u1));
    double a = 2.0 * M_PI * u2;
    uint64_t i0 = 2 * kk, i1 = 2 * kk + 1;
    if (i0 >= begin && i0 < end) out[i0 - begin] = static_cast<float>(r * std::cos(a));
    if (i1 >= begin && i1 < end) out[i1 - begin] = static_cast<float>(r * std::sin(a));
  }
}

}  // namespace s3d
