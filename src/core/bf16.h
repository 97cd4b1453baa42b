// bfloat16 bit conversions usable on host and device. Round-to-nearest-even, the rounding
// of PyTorch's .to(torch.bfloat16) and of __float2bfloat16_rn, so CPU and GPU agree bitwise.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define S3D_HD __host__ __device__ __forceinline__
#else
#define S3D_HD inline
#endif

namespace s3d {

S3D_HD float bf16_to_float(uint16_t bits) {
  uint32_t u = static_cast<uint32_t>(bits) << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

S3D_HD uint16_t float_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu) != 0) {
    return static_cast<uint16_t>((u >> 16) | 0x0040u);  // quiet NaN, sign kept
  }
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

// The value of f after one round trip through bf16.
S3D_HD float round_bf16(float f) { return bf16_to_float(float_to_bf16(f)); }

}  // namespace s3d
