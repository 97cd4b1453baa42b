// `sparse3d bench-kernels`: the report of each op candidate's achieved memory bandwidth at
// the model's shapes, beside its op's reference, against the copy bandwidth of the same GPU
// measured in the same run (ops::measure_bandwidth iterates the op table and measures).
// Bytes are the kernel's compulsory traffic (every input read once, every output written
// once); inputs rotate over enough buffers that a call finds none of its data in L2. A
// memory-bound kernel below 70% of the copy rate needs a reason in the report.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "io/json.h"
#include "sparse3d/engine.h"

// What the op table measured (ops/bandwidth.h). Named, not included: the command that holds a
// report reaches no layer under the bench (the op table, the kernels) through this header.
namespace s3d::ops {
struct KernelBandwidth;
}

namespace s3d::bench {

struct KernelBandwidthReport {
  std::string date;  // ISO 8601, UTC
  io::Json fingerprint;
  std::shared_ptr<const ops::KernelBandwidth> measured;
};

// GB/s of `bytes` moved in `seconds` (0 when nothing was timed).
double gbps(double bytes, double seconds);

// Measures every op of the table at the engine model's shapes (its heads, head dim and MLP
// width), on the GPU.
std::shared_ptr<const ops::KernelBandwidth> measure_kernel_bandwidth(
    const sparse3d::ModelInfo& model, const std::vector<int64_t>& tokens);

std::string to_markdown(const KernelBandwidthReport& r);
io::Json to_json(const KernelBandwidthReport& r);

}  // namespace s3d::bench
