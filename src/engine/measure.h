// Helpers of the GPU micro-measurements shared by the library-peak measurement
// and the kernel bandwidths (diagnostics.cpp): event timing of short calls, random inputs.
#pragma once

#include <cstdint>
#include <functional>

#include "core/tensor.h"

namespace s3d::engine {

// Seconds per call of fn(i) for i = 0..calls-1 on the current stream, CUDA-event timed,
// after fn(i) for i = 0..warmup-1 untimed.
double time_calls(const std::function<void(int)>& fn, int warmup, int calls);

// A CUDA tensor of standard-normal values times `scale` (counter-based RNG, host-generated).
Tensor random_device(const Shape& shape, DType dtype, uint64_t seed, float scale = 1.0f);

}  // namespace s3d::engine
