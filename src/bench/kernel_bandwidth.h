// `sparse3d bench-kernels`: the report of each fused kernel's
// achieved memory bandwidth at the model's shapes against the copy bandwidth of the same GPU
// measured in the same run (sparse3d::measure_kernel_bandwidth, diagnostics.h, measures).
// Bytes are the kernel's compulsory traffic (every input read once, every output written
// once); inputs rotate over enough buffers that a call finds none of its data in L2. A
// memory-bound kernel below 70% of the copy rate needs a reason in the report.
#pragma once

#include <string>

#include "io/json.h"
#include "sparse3d/diagnostics.h"

namespace s3d::bench {

struct KernelBandwidthReport {
  std::string date;  // ISO 8601, UTC
  io::Json fingerprint;
  sparse3d::KernelBandwidth measured;
};

// GB/s of `bytes` moved in `seconds` (0 when nothing was timed).
double gbps(double bytes, double seconds);

std::string to_markdown(const KernelBandwidthReport& r);
io::Json to_json(const KernelBandwidthReport& r);

}  // namespace s3d::bench
