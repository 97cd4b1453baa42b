// The op table (one row per op, each defined in its op's file), the per-request plan and the
// random operands of the tests and the kernel bench.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "ops/op.h"

namespace s3d::ops {

// Each op's row, defined beside its ladder in src/ops/NAME.cpp.
OpInfo modulated_layernorm_row();
OpInfo qk_rmsnorm_rope_row();
OpInfo qk_rmsnorm_cross_row();
OpInfo gated_residual_add_row();
OpInfo linear_gelu_row();
OpInfo linear_row();
OpInfo sdpa_row();

namespace {

std::vector<OpInfo> make_table() {
  std::vector<OpInfo> t;
  t.push_back(modulated_layernorm_row());
  t.push_back(qk_rmsnorm_rope_row());
  t.push_back(qk_rmsnorm_cross_row());
  t.push_back(gated_residual_add_row());
  t.push_back(linear_gelu_row());
  t.push_back(linear_row());
  t.push_back(sdpa_row());
  for (size_t i = 0; i < t.size(); ++i) {
    // The rows are indexed by OpId, and a flag names one candidate of one op.
    S3D_CHECK(static_cast<size_t>(t[i].id) == i, "op table: row ", i, " (", t[i].name,
              ") is out of OpId order");
    S3D_CHECK(!t[i].candidates.empty(), "op table: ", t[i].name, " has no candidate");
    for (const CandidateInfo& c : t[i].candidates)
      S3D_CHECK(c.impl != nullptr && c.operands != nullptr, "op table: candidate ",
                sparse3d::name(c.flag), " of ", t[i].name, " has no kernel");
  }
  S3D_CHECK(t.size() == kOpCount, "op table: ", t.size(), " rows for ", kOpCount, " ops");
  return t;
}

}  // namespace

const std::vector<OpInfo>& op_table() {
  static const std::vector<OpInfo> table = make_table();
  return table;
}

const OpInfo& op_info(OpId id) { return op_table()[static_cast<size_t>(id)]; }

const OpInfo& find_op(std::string_view name) {
  std::string known;
  for (const OpInfo& op : op_table()) {
    if (op.name == name) return op;
    known += cat(known.empty() ? "" : ", ", op.name);
  }
  fail("unknown op '", name, "' (known: ", known, ")");
}

namespace {

// SPARSE3D_SDPA_IMPLEMENTATION = auto (or unset) | unified | composite.
attention::Implementation sdpa_implementation_from_environment() {
  const char* env = std::getenv("SPARSE3D_SDPA_IMPLEMENTATION");
  if (env == nullptr || std::strcmp(env, "auto") == 0) return attention::Implementation::Auto;
  if (std::strcmp(env, "unified") == 0) return attention::Implementation::Unified;
  if (std::strcmp(env, "composite") == 0) return attention::Implementation::Composite;
  fail("SPARSE3D_SDPA_IMPLEMENTATION is '", env, "'; expected auto, unified or composite");
}

}  // namespace

OpPlan OpPlan::resolve(const sparse3d::FlagSet& flags, plan_search::Store* store) {
  OpPlan p;
  p.flags_ = flags;
  p.store_ = store;
  p.sdpa_implementation_ = sdpa_implementation_from_environment();
  for (const OpInfo& op : op_table()) {
    const auto o = static_cast<size_t>(op.id);
    for (size_t k = 0; k < op.candidates.size(); ++k)
      if (flags.on(op.candidates[k].flag)) p.order_[o].push_back(static_cast<uint16_t>(k));
  }
  return p;
}

std::vector<OpShape> head_test_shapes() {
  return {{37, 3, 16, 1, 0}, {1, 2, 24, 1, 0}, {129, 3, 12, 1, 0}, {5, 2, 264, 1, 0}};
}

Tensor spread_batch_index(int64_t tokens, int batch, Device device) {
  std::vector<int32_t> b(static_cast<size_t>(tokens));
  for (int64_t t = 0; t < tokens; ++t)
    b[static_cast<size_t>(t)] = static_cast<int32_t>(t * batch / tokens);
  return Tensor::from_ints(b, {tokens}).to(device);
}

Tensor random_tensor(const Shape& shape, DType dtype, Device device, uint64_t seed, float scale,
                     float offset) {
  std::vector<float> v(static_cast<size_t>(shape_numel(shape)));
  normal_fill(seed, 0, v.size(), v.data());
  for (float& x : v) x = x * scale + offset;
  return Tensor::from_floats(v, shape, dtype).to(device);
}

}  // namespace s3d::ops
