// Helpers for the device-parametrised model and engine tests (tests/device/): a scratch folder
// per process and suite, a checkpoint made in it once, the engine options of the test device
// (tests/device_under_test.h) and a caller's view of a tensor.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <string>

#include "core/tensor.h"
#include "device_under_test.h"
#include "model/checkpoint.h"
#include "model/config.h"
#include "sparse3d/engine.h"

namespace s3d::test {

// temp/sparse3d_<what>_<pid>, made if missing (ctest runs tests in parallel processes).
inline std::string scratch_dir(const std::string& what) {
  const std::filesystem::path p = std::filesystem::temp_directory_path() /
                                  ("sparse3d_" + what + "_" + std::to_string(getpid()));
  std::filesystem::create_directories(p);
  return p.string();
}

// dir/name.json (and .safetensors) from `config` and `seed`, made unless already there.
inline std::string checkpoint_in(const std::string& dir, const std::string& name,
                                 const model::ModelConfig& config, uint64_t seed) {
  const std::string prefix = dir + "/" + name;
  if (!std::filesystem::exists(prefix + ".json"))
    model::make_checkpoint(config, seed, prefix, DType::BF16);
  return prefix + ".json";
}

inline sparse3d::DeviceChoice test_device_choice() {
  return kTestOnCuda ? sparse3d::DeviceChoice::CUDA : sparse3d::DeviceChoice::CPU;
}

// An engine on the test device running `path`, with its qualification cache in `cache_dir`.
inline sparse3d::EngineOptions test_engine_options(const std::string& path,
                                                   const std::string& cache_dir) {
  sparse3d::EngineOptions o;
  o.device = test_device_choice();
  o.path = path;
  o.cache_dir = cache_dir;
  return o;
}

// A caller's view of a tensor the test owns (on whichever device it is).
inline sparse3d::TensorView view_of(Tensor& t) {
  return {t.data(), t.dtype(), t.device(), 0, t.shape()};
}

// The fallbacks counted for the null-context flags, every reason together (not the other
// flags': the CPU backend also counts cuda_graphs' refusal). The CPU engine tests use it too.
inline uint64_t null_fallbacks(const sparse3d::Engine& e) {
  uint64_t n = 0;
  for (const auto& f : e.counters().fallbacks)
    if (f.optimization.rfind("null_context", 0) == 0) n += f.count;
  return n;
}

}  // namespace s3d::test
