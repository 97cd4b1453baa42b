#include "ops/bandwidth.h"

#include <algorithm>
#include <cmath>

#include "core/cuda_util.h"
#include "core/error.h"
#include "core/measure.h"

namespace s3d::ops {
namespace {

// Enough operand sets that the rotation's working set is several times the L2 (50 MiB on an
// H200): every timed call reads cold data, as in the model.
constexpr double kRotationBytes = 512.0 * (1 << 20);

int sets_for(double bytes_per_call) {
  return std::clamp(static_cast<int>(std::ceil(kRotationBytes / bytes_per_call)), 2, 64);
}

// Seconds per call of candidate k, cycling over the sets after one warm-up pass over them.
double time_rotating(std::vector<std::unique_ptr<OpCase>>& sets, int k) {
  const int n = static_cast<int>(sets.size());
  for (auto& c : sets) c->run(k);  // fresh operands, and the warm-up
  return time_calls([&](int i) { sets[static_cast<size_t>(i % n)]->rerun(k); }, 0,
                    std::max(n, 20));
}

}  // namespace

std::string_view role_name(Contract c) {
  return c == Contract::Bitwise ? "bitwise" : "tolerance";
}

KernelBandwidth measure_bandwidth(const OpShape& model, const std::vector<int64_t>& tokens) {
  S3D_CHECK(cuda_available(), "bench-kernels: needs a CUDA GPU, none is usable");
  S3D_CHECK(!tokens.empty(), "bench-kernels: no token count given");
  for (int64_t t : tokens) S3D_CHECK(t >= 1, "bench-kernels: token counts must be >= 1, got ", t);
  KernelBandwidth out;
  measure_copy_rate(out.copy_bytes, out.copy_seconds);
  for (const int64_t T : tokens) {
    OpShape shape = model;
    shape.tokens = T;
    shape.batch = 1;
    for (const OpInfo& op : op_table()) {
      const double bytes = op.bytes(shape);
      const int n = sets_for(bytes);
      std::vector<std::unique_ptr<OpCase>> sets;
      for (int i = 0; i < n; ++i) sets.push_back(op.make_case(shape, Device::CUDA, 100 + i));
      for (int k = 0; k < static_cast<int>(op.candidates.size()); ++k) {
        KernelBandwidthRow row{std::string(op.name),
                               std::string(sparse3d::name(op.candidates[k].flag)),
                               std::string(role_name(op.candidates[k].contract)), T, bytes, 0,
                               sets[0]->unsupported(k)};
        if (row.skipped.empty()) row.seconds = time_rotating(sets, k);
        out.rows.push_back(std::move(row));
      }
      out.rows.push_back(KernelBandwidthRow{std::string(op.name), "reference", "reference", T,
                                            bytes, time_rotating(sets, OpCase::kReference), ""});
    }
  }
  synchronize();
  return out;
}

}  // namespace s3d::ops
