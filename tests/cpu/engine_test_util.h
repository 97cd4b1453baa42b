// Helpers shared by the tests of the public Engine on the CPU backend: the committed tiny
// checkpoint, a view of a tensor, and the engine options those tests use.
#pragma once

#include <string>

#include "core/tensor.h"
#include "sparse3d/sparse3d.h"

namespace s3d::test {

// The tiny SLat checkpoint the golden tests were made from (tests/data/golden/inputs).
inline const std::string kTinyCheckpoint =
    std::string(SPARSE3D_TEST_DATA) + "/golden/inputs/tiny.json";

// A caller's view of a tensor the test owns.
inline sparse3d::TensorView view(Tensor& t) {
  return {t.data(), t.dtype(), t.device(), 0, t.shape()};
}

// An engine on the CPU backend with its own qualification cache folder, on `path` (empty:
// the default path).
inline sparse3d::EngineOptions cpu_options(const std::string& cache, const std::string& path = "") {
  sparse3d::EngineOptions o;
  o.device = sparse3d::DeviceChoice::CPU;
  o.path = path;
  o.cache_dir = cache;
  return o;
}

}  // namespace s3d::test
