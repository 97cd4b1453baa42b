#include "model/null_context_qualify.h"

#include <algorithm>
#include <cstring>
#include <map>

#include "core/error.h"
#include "core/rng.h"
#include "gemm/linear.h"
#include "kernels/elementwise.h"

namespace s3d::model {
namespace {

Tensor random_rows(int64_t rows, int64_t cols, uint64_t seed, Device dev) {
  std::vector<float> v(static_cast<size_t>(rows * cols));
  normal_fill(seed, 0, v.size(), v.data());
  return Tensor::from_floats(v, {rows, cols}, DType::BF16).to(dev);
}

// [top; bottom] as one tensor (top rows first), on top's device.
Tensor stacked(const Tensor& top, const Tensor& bottom) {
  Tensor out = Tensor::empty({top.size(0) + bottom.size(0), top.size(1)}, DType::BF16,
                             top.device());
  RowView a = RowView::of(out.rows(0, top.size(0))), b = RowView::of(out.rows(top.size(0), out.size(0)));
  kernels::copy_rows(RowView::of(top), a);
  kernels::copy_rows(RowView::of(bottom), b);
  return out;
}

const uint16_t* row_bits(const Tensor& host, int64_t r) {
  return host.data_as<uint16_t>() + r * host.size(1);
}

// "" when rows [begin, end) of host all equal `want` bitwise, else the first difference.
std::string rows_differ(const Tensor& host, int64_t begin, int64_t end, const uint16_t* want) {
  const int64_t C = host.size(1);
  for (int64_t r = begin; r < end; ++r) {
    const uint16_t* got = row_bits(host, r);
    if (std::memcmp(got, want, static_cast<size_t>(C) * 2) == 0) continue;
    int64_t c = 0;
    while (got[c] == want[c]) ++c;
    return cat("row ", r, " column ", c, ": bits 0x", std::hex, got[c], " vs 0x", want[c]);
  }
  return "";
}

// "" when the [N] projection equals rows [0, N) of the [2N] one bitwise.
std::string slice_differs(const Tensor& y_n, const Tensor& y_2n) {
  Tensor a = y_n.to(Device::CPU), b = y_2n.to(Device::CPU);
  for (int64_t r = 0; r < a.size(0); ++r) {
    std::string d = rows_differ(a, r, r + 1, row_bits(b, r));
    if (!d.empty()) return d;
  }
  return "";
}

struct ReferenceRow {
  std::string shape;           // "[3664, 1536] serial CFG"
  std::vector<uint16_t> bits;  // the reference unconditional row
};

// What one run of the checks shares across blocks and shapes: the options, the projection,
// and the random non-zero rows (made once per shape, shared by every layer).
struct Checks {
  Checks(const QualificationOptions& options, Device device) : o(options), dev(device) {}

  const QualificationOptions& o;
  Projection proj;
  Device dev;
  int64_t C = 0;
  bool rows = false;    // search M (reference rows of to_out)
  bool slices = false;  // batched-CFG slice checks of to_q and to_kv
  std::map<int64_t, Tensor> cond_rows, other_rows, kv_rows;

  Tensor project(const Tensor& x, const Linear& l) const {
    Tensor y = Tensor::empty({x.size(0), l.weight.size(0)}, DType::BF16, dev);
    proj(x, l.weight, l.bias_or_null(), y);
    return y;
  }
};

// One block's reference rows of to_out, and why no cached row can match them (empty when
// one can).
struct BlockReferences {
  std::vector<ReferenceRow> rows;
  std::string broken;

  void add(const Tensor& y, int64_t begin, int block, int64_t C, const std::string& shape) {
    Tensor h = y.to(Device::CPU);
    const uint16_t* first = row_bits(h, begin);
    std::string d = rows_differ(h, begin, h.size(0), first);
    if (!d.empty() && broken.empty())
      broken = cat("block ", block, " ", shape, ": the reference's unconditional rows differ "
                   "among themselves (", d, "), so no single cached row reproduces them");
    rows.push_back(ReferenceRow{shape, std::vector<uint16_t>(first, first + C)});
  }
};

void check_arguments(const ModelConfig& cfg, const std::vector<Tensor>& value_rows,
                     const QualificationOptions& o, bool check_rows) {
  S3D_CHECK(value_rows.size() == static_cast<size_t>(cfg.num_blocks), "qualify_null_context: ",
            value_rows.size(), " value rows for ", cfg.num_blocks, " blocks");
  S3D_CHECK(!check_rows || !o.candidate_m.empty(), "qualify_null_context: no candidate M given");
  S3D_CHECK(!o.token_counts.empty(), "qualify_null_context: no token count given");
  for (int64_t n : o.token_counts)
    S3D_CHECK(n >= 1, "qualify_null_context: token counts must be >= 1, got ", n);
  for (int64_t n : o.context_rows)
    S3D_CHECK(n >= 1, "qualify_null_context: context rows must be >= 1, got ", n);
}

Checks make_checks(const QualificationOptions& o, const ModelConfig& cfg, Device dev,
                   bool check_rows, bool check_slices) {
  Checks k(o, dev);
  k.proj = o.projection ? o.projection
                        : Projection([](const Tensor& x, const Tensor& w, const Tensor* b,
                                        Tensor& y) { gemm::linear(x, w, b, y); });
  k.C = cfg.model_channels;
  k.rows = check_rows;
  k.slices = check_slices;
  for (int64_t n : o.token_counts) {
    k.cond_rows[n] = random_rows(n, k.C, o.seed ^ (uint64_t(n) << 8), dev);
    if (k.slices) k.other_rows[n] = random_rows(n, k.C, o.seed ^ (uint64_t(n) << 9) ^ 1, dev);
  }
  if (k.slices)
    for (int64_t l : o.context_rows)
      k.kv_rows[l] = random_rows(l, cfg.cond_channels, o.seed ^ (uint64_t(l) << 10) ^ 2, dev);
  return k;
}

// The checks of block i at N tokens per CFG branch: the reference rows of to_out at [N, C]
// (serial) and [2N, C] (batched, with the [N] to_out its conditional slice), and to_q's
// [N] vs [2N] slice. Returns the to_q slice failure, or "".
std::string check_token_count(const Checks& k, int i, int64_t n, const CrossAttentionWeights& w,
                              const Tensor& v0, BlockReferences& refs) {
  const int64_t C = k.C;
  if (k.rows && k.o.serial) {
    Tensor x = Tensor::empty({n, C}, DType::BF16, k.dev);
    kernels::broadcast_row(v0, x);
    refs.add(k.project(x, w.to_out), 0, i, C, cat("to_out [", n, ", ", C, "] (serial CFG)"));
  }
  if (k.rows && k.o.batched) {
    // The reference batched projection: conditional rows first, then the v0 rows.
    Tensor x2 = Tensor::empty({2 * n, C}, DType::BF16, k.dev);
    RowView top = RowView::of(x2.rows(0, n));
    kernels::copy_rows(RowView::of(k.cond_rows.at(n)), top);
    Tensor bottom = x2.rows(n, 2 * n);
    kernels::broadcast_row(v0, bottom);
    Tensor y2 = k.project(x2, w.to_out);
    const std::string shape = cat("to_out [", 2 * n, ", ", C, "] (batched CFG)");
    refs.add(y2, n, i, C, shape);
    // The cache path projects the conditional rows alone: a cache-only condition.
    std::string d = slice_differs(k.project(k.cond_rows.at(n), w.to_out), y2.rows(0, n));
    if (!d.empty() && refs.broken.empty())
      refs.broken = cat("block ", i, " to_out [", n, "] is not the conditional slice of ", shape,
                        ": ", d);
  }
  if (!k.slices) return "";
  const Tensor& cond = k.cond_rows.at(n);
  Tensor y2 = k.project(stacked(cond, k.other_rows.at(n)), w.to_q);
  std::string d = slice_differs(k.project(cond, w.to_q), y2.rows(0, n));
  return d.empty() ? "" : cat("block ", i, " to_q [", n, "] vs [", 2 * n, "]: ", d);
}

// to_kv's [L] vs [2L] slice of block i (the reference batched condition: the real rows, then
// the zero condition). Returns the failure, or "".
std::string check_context_rows(const Checks& k, int i, int64_t l, const Linear& to_kv) {
  const Tensor& real = k.kv_rows.at(l);
  Tensor zeros = Tensor::zeros(real.shape(), DType::BF16, k.dev);
  Tensor y2 = k.project(stacked(real, zeros), to_kv);
  std::string d = slice_differs(k.project(real, to_kv), y2.rows(0, l));
  return d.empty() ? "" : cat("block ", i, " to_kv [", l, "] vs [", 2 * l, "]: ", d);
}

// Each candidate M's cached row of block i against the block's reference rows; a candidate
// that failed an earlier block stays failed (its rows are still made, for the report).
void judge_candidates(const Checks& k, int i, const CrossAttentionWeights& w, const Tensor& v0,
                      const BlockReferences& refs, std::vector<CandidateResult>& candidates,
                      std::map<int64_t, std::vector<Tensor>>& rows_by_m) {
  for (auto& cand : candidates) {
    Tensor row = canonical_row(k.proj, v0, cand.m, w.to_out.weight, w.to_out.bias);
    if (k.o.tamper_cached_row) k.o.tamper_cached_row(i, row);
    rows_by_m[cand.m].push_back(row);
    if (!cand.passed) continue;
    if (!refs.broken.empty()) {
      cand.passed = false;
      cand.failure = refs.broken;
      continue;
    }
    Tensor h = row.to(Device::CPU);
    for (const auto& ref : refs.rows) {
      std::string d = rows_differ(h, 0, 1, ref.bits.data());
      if (d.empty()) continue;
      cand.passed = false;
      cand.failure = cat("block ", i, " ", ref.shape, ": cached row vs reference ", d);
      break;
    }
  }
}

}  // namespace

bool bits_equal(const Tensor& a, const Tensor& b) {
  if (a.dtype() != DType::BF16 || b.dtype() != DType::BF16 || a.shape() != b.shape()) return false;
  Tensor ha = a.to(Device::CPU), hb = b.to(Device::CPU);
  return std::memcmp(ha.data(), hb.data(), ha.nbytes()) == 0;
}

Tensor canonical_row(const Projection& projection, const Tensor& v0, int64_t m,
                     const Tensor& w_out, const Tensor& b_out) {
  S3D_CHECK(m >= 1, "canonical_row: M must be >= 1, got ", m);
  Tensor x = Tensor::empty({m, v0.numel()}, DType::BF16, v0.device());
  kernels::broadcast_row(v0, x);
  Tensor y = Tensor::empty({m, w_out.size(0)}, DType::BF16, v0.device());
  projection(x, w_out, &b_out, y);
  Tensor row = Tensor::empty({1, w_out.size(0)}, DType::BF16, v0.device());
  row.copy_from(y.rows(0, 1));
  return row;
}

void restore_cached_rows(const SLatFlowModel& model, const std::vector<Tensor>& value_rows,
                         Qualification& q) {
  q.cached_rows.clear();
  if (q.m == 0 || !q.rows_checked) return;
  const Projection proj = [](const Tensor& x, const Tensor& w, const Tensor* b, Tensor& y) {
    gemm::linear(x, w, b, y);
  };
  for (int i = 0; i < model.config().num_blocks; ++i) {
    const Linear& to_out = model.weights().blocks[static_cast<size_t>(i)].cross_attn.to_out;
    q.cached_rows.push_back(canonical_row(proj, value_rows[static_cast<size_t>(i)], q.m,
                                          to_out.weight, to_out.bias));
  }
}

std::string validity_problem(const contract::Fingerprint& taken_fp, uint64_t taken_version,
                             const contract::Fingerprint& fp, uint64_t version) {
  if (version != taken_version)
    return cat("taken for weights version ", taken_version, ", the model has ", version,
               " (weights reloaded): build the null context again");
  if (fp.to_json() != taken_fp.to_json())
    return cat("taken in another environment (", taken_fp.gpu_name, ", cuBLASLt ",
               taken_fp.cublaslt, ", engine ", taken_fp.engine_version, "), running in (",
               fp.gpu_name, ", cuBLASLt ", fp.cublaslt, ", engine ", fp.engine_version,
               "): build the null context again");
  return "";
}

std::string Qualification::invalid_reason(const contract::Fingerprint& fp,
                                          uint64_t version) const {
  if (!ran) return "qualification did not run";
  return validity_problem(fingerprint, weights_version, fp, version);
}

std::string Qualification::summary() const {
  std::string passed, failed;
  for (const auto& c : candidates) {
    std::string& s = c.passed ? passed : failed;
    s += (s.empty() ? "" : ", ") + std::to_string(c.m);
  }
  std::string head = m > 0 ? cat("M=", m) : std::string("no M passed");
  return cat(head, " (passed: ", passed.empty() ? "none" : passed,
             "; failed: ", failed.empty() ? "none" : failed, ")");
}

Qualification qualify_null_context(const SLatFlowModel& model,
                                   const std::vector<Tensor>& value_rows,
                                   const QualificationOptions& o, bool check_rows,
                                   bool check_slices) {
  const ModelConfig& cfg = model.config();
  check_arguments(cfg, value_rows, o, check_rows);
  Qualification q;
  q.ran = true;
  q.options = o;
  q.options.projection = nullptr;
  q.options.tamper_cached_row = nullptr;
  q.fingerprint = contract::environment_fingerprint();
  q.weights_version = model.weights_version();
  q.rows_checked = check_rows;
  q.slices_checked = check_slices && o.batched;
  q.slices_ok = q.slices_checked;
  const Checks k = make_checks(o, cfg, model.device(), check_rows, q.slices_checked);

  std::vector<int64_t> ms = o.candidate_m;
  std::sort(ms.begin(), ms.end());
  ms.erase(std::unique(ms.begin(), ms.end()), ms.end());
  for (int64_t m : ms) q.candidates.push_back(CandidateResult{m, true, ""});
  std::map<int64_t, std::vector<Tensor>> rows_by_m;
  auto slice_fail = [&](const std::string& what) {
    if (what.empty()) return;
    if (q.slices_ok) q.slice_failure = what;
    q.slices_ok = false;
  };

  for (int i = 0; i < cfg.num_blocks; ++i) {
    const CrossAttentionWeights& w = model.weights().blocks[static_cast<size_t>(i)].cross_attn;
    const Tensor& v0 = value_rows[static_cast<size_t>(i)];
    BlockReferences refs;
    for (int64_t n : o.token_counts) slice_fail(check_token_count(k, i, n, w, v0, refs));
    if (q.slices_checked)
      for (int64_t l : o.context_rows) slice_fail(check_context_rows(k, i, l, w.to_kv));
    if (check_rows) judge_candidates(k, i, w, v0, refs, q.candidates, rows_by_m);
  }
  for (const auto& cand : q.candidates) {
    if (cand.passed) {
      q.m = cand.m;
      q.cached_rows = rows_by_m[cand.m];
      break;
    }
  }
  return q;
}

}  // namespace s3d::model
