#include "bench/kernel_bandwidth.h"

#include <sstream>

#include "bench/format.h"
#include "core/error.h"
#include "ops/bandwidth.h"

namespace s3d::bench {

std::shared_ptr<const ops::KernelBandwidth> measure_kernel_bandwidth(
    const sparse3d::ModelInfo& model, const std::vector<int64_t>& tokens) {
  ops::OpShape dims;
  dims.heads = model.num_heads;
  dims.head_dim = model.model_channels / model.num_heads;
  dims.hidden = model.mlp_hidden;
  return std::make_shared<const ops::KernelBandwidth>(ops::measure_bandwidth(dims, tokens));
}

double gbps(double bytes, double seconds) { return seconds > 0 ? bytes / seconds / 1e9 : 0; }

std::string to_markdown(const KernelBandwidthReport& r) {
  S3D_CHECK(r.measured != nullptr, "bench-kernels: the report holds no measurement");
  const ops::KernelBandwidth& m = *r.measured;
  const double copy = gbps(m.copy_bytes, m.copy_seconds);
  std::ostringstream o;
  o << "# sparse3d bench-kernels, " << r.date << "\n\n";
  std::string env;
  if (r.fingerprint.is_object())
    for (const auto& [key, v] : r.fingerprint.items())
      env += (env.empty() ? "" : ", ") + key + ": " + (v.is_string() ? v.get<std::string>() : v.dump());
  o << "- Environment: " << env << "\n"
    << "- Copy bandwidth (cudaMemcpy device to device, 1 GiB, read + written): "
    << fixed(copy, 1) << " GB/s\n\n"
    << "| op | candidate | role | tokens | MB per call | us per call | GB/s | % of copy |\n"
    << "|---|---|---|---:|---:|---:|---:|---:|\n";
  for (const auto& row : m.rows) {
    o << "| " << row.op << " | " << row.candidate << " | " << row.role << " | "
      << group_digits(row.tokens) << " | " << fixed(row.bytes / 1e6, 1) << " | ";
    if (!row.skipped.empty()) {
      o << "refused: " << row.skipped << " | | |\n";
      continue;
    }
    o << fixed(row.seconds * 1e6, 1) << " | " << fixed(gbps(row.bytes, row.seconds), 1) << " | "
      << fixed(100.0 * gbps(row.bytes, row.seconds) / copy, 1) << "% |\n";
  }
  o << "\nBytes are compulsory traffic (each input read once, each output written once); "
       "inputs rotate over enough buffers (>= 512 MiB in all) that no call finds its data in "
       "L2. Event-timed over at least 20 calls after one warm-up pass over the buffers.\n";
  // The tolerance kernels exist for bandwidth alone: their target is stated with them.
  for (const auto& row : m.rows) {
    if (row.role == "tolerance") {
      o << "\nRole \"tolerance\": candidates held to a tolerance instead of bits "
           "(docs/CONTRACTS.md); the fast_* norm kernels (kernels/fast_norm.h) exist for "
           "bandwidth alone, target >= 80% of the copy bandwidth at 30,227 tokens. "
           "linear_gelu is a GEMM: compute-bound, its bandwidth is not its measure.\n";
      break;
    }
  }
  return o.str();
}

io::Json to_json(const KernelBandwidthReport& r) {
  io::Json rows = io::Json::array();
  S3D_CHECK(r.measured != nullptr, "bench-kernels: the report holds no measurement");
  const ops::KernelBandwidth& m = *r.measured;
  const double copy = gbps(m.copy_bytes, m.copy_seconds);
  for (const auto& row : m.rows)
    rows.push_back({{"op", row.op}, {"candidate", row.candidate}, {"role", row.role},
                    {"tokens", row.tokens}, {"skipped", row.skipped},
                    {"bytes", row.bytes}, {"seconds", row.seconds},
                    {"gbps", gbps(row.bytes, row.seconds)},
                    {"fraction_of_copy", gbps(row.bytes, row.seconds) / copy}});
  return io::Json{{"date", r.date},
                  {"fingerprint", r.fingerprint},
                  {"copy_bytes", m.copy_bytes},
                  {"copy_seconds", m.copy_seconds},
                  {"copy_gbps", copy},
                  {"rows", rows}};
}

}  // namespace s3d::bench
