// Helpers of the GPU micro-measurements shared by the library-peak measurement
// (engine/diagnostics.cpp) and the kernel bench (ops/bandwidth.cpp): event timing of short
// calls, random inputs, the device's copy rate.
#pragma once

#include <cstdint>
#include <functional>

#include "core/tensor.h"

namespace s3d {

// Seconds per call of fn(i) for i = 0..calls-1 on the current stream, CUDA-event timed,
// after fn(i) for i = 0..warmup-1 untimed.
double time_calls(const std::function<void(int)>& fn, int warmup, int calls);

// A CUDA tensor of standard-normal values times `scale` (counter-based RNG, host-generated).
Tensor random_device(const Shape& shape, DType dtype, uint64_t seed, float scale = 1.0f);

// The device's copy rate: a 1 GiB device-to-device cudaMemcpy, timed; sets the bytes moved
// (read + written) and the seconds per copy.
void measure_copy_rate(double& bytes, double& seconds);

}  // namespace s3d
