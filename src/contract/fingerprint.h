// The environment a measurement or a qualification was taken in. A result is only valid
// for the fingerprint it carries (DESIGN.md, "Numerical contracts").
#pragma once

#include <string>

#include "io/json.h"

namespace s3d::contract {

struct Fingerprint {
  std::string engine_version;
  bool has_gpu = false;
  std::string gpu_name;
  int sm_count = 0;
  int compute_capability = 0;  // major * 10 + minor
  size_t gpu_memory_bytes = 0;
  std::string nvidia_driver;   // e.g. "580.159.03", from /proc/driver/nvidia/version
  std::string cuda_driver_api; // e.g. "13.0"
  std::string cuda_runtime;    // e.g. "13.0"
  std::string cublaslt;
  std::string cudnn;

  io::Json to_json() const;
  std::string to_text() const;  // one "key: value" per line
};

Fingerprint environment_fingerprint();
// The current context's fingerprint (core/context.h), taken once per context: what its
// qualifications and measurements are valid for.
const Fingerprint& context_fingerprint();

}  // namespace s3d::contract
