#include "bench/device_peak.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>

#include "core/cuda_util.h"

namespace s3d::bench {
namespace {

size_t in_use(int device) {
  size_t free_b = 0, total_b = 0;
  if (cudaSetDevice(device) != cudaSuccess || cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return total_b - free_b;
}

}  // namespace

DevicePeak::DevicePeak(int device) : device_(device) {
  if (!s3d::cuda_available()) return;
  start_ = in_use(device_);
  peak_ = start_;
  thread_ = std::thread([this] {
    while (!stop_.load()) {
      const size_t now = in_use(device_);
      size_t seen = peak_.load();
      while (now > seen && !peak_.compare_exchange_weak(seen, now)) {
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  });
}

DevicePeak::~DevicePeak() { stop(); }

size_t DevicePeak::stop() {
  if (thread_.joinable()) {
    stop_ = true;
    thread_.join();
    const size_t now = in_use(device_);  // the end of the window counts too
    peak_ = std::max(peak_.load(), now);
  }
  return peak_.load() > start_ ? peak_.load() - start_ : 0;
}

}  // namespace s3d::bench
