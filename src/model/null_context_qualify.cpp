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
    const std::string p = "blocks." + std::to_string(i) + ".cross_attn.";
    q.cached_rows.push_back(canonical_row(proj, value_rows[static_cast<size_t>(i)], q.m,
                                          model.parameter(p + "to_out.weight"),
                                          model.parameter(p + "to_out.bias")));
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
  const int64_t C = cfg.model_channels, Cc = cfg.cond_channels;
  const Device dev = model.device();
  S3D_CHECK(value_rows.size() == static_cast<size_t>(cfg.num_blocks), "qualify_null_context: ",
            value_rows.size(), " value rows for ", cfg.num_blocks, " blocks");
  S3D_CHECK(!check_rows || !o.candidate_m.empty(), "qualify_null_context: no candidate M given");
  S3D_CHECK(!o.token_counts.empty(), "qualify_null_context: no token count given");
  for (int64_t n : o.token_counts)
    S3D_CHECK(n >= 1, "qualify_null_context: token counts must be >= 1, got ", n);
  for (int64_t n : o.context_rows)
    S3D_CHECK(n >= 1, "qualify_null_context: context rows must be >= 1, got ", n);
  const Projection proj = o.projection ? o.projection
                                       : Projection([](const Tensor& x, const Tensor& w,
                                                       const Tensor* b, Tensor& y) {
                                           gemm::linear(x, w, b, y);
                                         });
  auto project = [&](const Tensor& x, const Tensor& w, const Tensor& b) {
    Tensor y = Tensor::empty({x.size(0), w.size(0)}, DType::BF16, dev);
    proj(x, w, &b, y);
    return y;
  };

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

  std::vector<int64_t> ms = o.candidate_m;
  std::sort(ms.begin(), ms.end());
  ms.erase(std::unique(ms.begin(), ms.end()), ms.end());
  for (int64_t m : ms) q.candidates.push_back(CandidateResult{m, true, ""});
  std::map<int64_t, std::vector<Tensor>> rows_by_m;

  // Random non-zero conditional rows, made once per shape and shared by every layer.
  std::map<int64_t, Tensor> cond_rows, other_rows, kv_rows;
  for (int64_t n : o.token_counts) {
    cond_rows[n] = random_rows(n, C, o.seed ^ (uint64_t(n) << 8), dev);
    if (q.slices_checked) other_rows[n] = random_rows(n, C, o.seed ^ (uint64_t(n) << 9) ^ 1, dev);
  }
  if (q.slices_checked)
    for (int64_t l : o.context_rows) kv_rows[l] = random_rows(l, Cc, o.seed ^ (uint64_t(l) << 10) ^ 2, dev);
  auto slice_fail = [&](const std::string& what) {
    if (q.slices_ok) q.slice_failure = what;
    q.slices_ok = false;
  };

  for (int i = 0; i < cfg.num_blocks; ++i) {
    const std::string p = "blocks." + std::to_string(i) + ".cross_attn.";
    const Tensor& w_out = model.parameter(p + "to_out.weight");
    const Tensor& b_out = model.parameter(p + "to_out.bias");
    const Tensor& v0 = value_rows[static_cast<size_t>(i)];
    std::vector<ReferenceRow> refs;
    std::string broken;  // reference rows that differ among themselves: no M can pass
    auto add_reference = [&](const Tensor& y, int64_t begin, const std::string& shape) {
      Tensor h = y.to(Device::CPU);
      const uint16_t* first = row_bits(h, begin);
      std::string d = rows_differ(h, begin, h.size(0), first);
      if (!d.empty() && broken.empty())
        broken = cat("block ", i, " ", shape, ": the reference's unconditional rows differ among "
                     "themselves (", d, "), so no single cached row reproduces them");
      refs.push_back(ReferenceRow{shape, std::vector<uint16_t>(first, first + C)});
    };

    for (int64_t n : o.token_counts) {
      if (check_rows && o.serial) {
        Tensor x = Tensor::empty({n, C}, DType::BF16, dev);
        kernels::broadcast_row(v0, x);
        add_reference(project(x, w_out, b_out), 0, cat("to_out [", n, ", ", C, "] (serial CFG)"));
      }
      if (o.batched && check_rows) {
        // The reference batched projection: conditional rows first, then the v0 rows.
        Tensor x2 = Tensor::empty({2 * n, C}, DType::BF16, dev);
        RowView top = RowView::of(x2.rows(0, n));
        kernels::copy_rows(RowView::of(cond_rows[n]), top);
        Tensor bottom = x2.rows(n, 2 * n);
        kernels::broadcast_row(v0, bottom);
        Tensor y2 = project(x2, w_out, b_out);
        const std::string shape = cat("to_out [", 2 * n, ", ", C, "] (batched CFG)");
        if (check_rows) add_reference(y2, n, shape);
        // The cache path projects the conditional rows alone: a cache-only condition.
        if (check_rows) {
          std::string d = slice_differs(project(cond_rows[n], w_out, b_out), y2.rows(0, n));
          if (!d.empty() && broken.empty())
            broken = cat("block ", i, " to_out [", n, "] is not the conditional slice of ",
                         shape, ": ", d);
        }
      }
      if (q.slices_checked) {
        const Tensor& w_q = model.parameter(p + "to_q.weight");
        const Tensor& b_q = model.parameter(p + "to_q.bias");
        Tensor y2 = project(stacked(cond_rows[n], other_rows[n]), w_q, b_q);
        std::string d = slice_differs(project(cond_rows[n], w_q, b_q), y2.rows(0, n));
        if (!d.empty())
          slice_fail(cat("block ", i, " to_q [", n, "] vs [", 2 * n, "]: ", d));
      }
    }
    if (q.slices_checked) {
      const Tensor& w_kv = model.parameter(p + "to_kv.weight");
      const Tensor& b_kv = model.parameter(p + "to_kv.bias");
      for (int64_t l : o.context_rows) {
        // The reference batched condition: the real rows, then the zero condition.
        Tensor zeros = Tensor::zeros({l, Cc}, DType::BF16, dev);
        Tensor y2 = project(stacked(kv_rows[l], zeros), w_kv, b_kv);
        std::string d = slice_differs(project(kv_rows[l], w_kv, b_kv), y2.rows(0, l));
        if (!d.empty())
          slice_fail(cat("block ", i, " to_kv [", l, "] vs [", 2 * l, "]: ", d));
      }
    }

    if (!check_rows) continue;
    for (auto& cand : q.candidates) {
      Tensor row = canonical_row(proj, v0, cand.m, w_out, b_out);
      if (o.tamper_cached_row) o.tamper_cached_row(i, row);
      rows_by_m[cand.m].push_back(row);
      if (!cand.passed) continue;
      if (!broken.empty()) {
        cand.passed = false;
        cand.failure = broken;
        continue;
      }
      Tensor h = row.to(Device::CPU);
      for (const auto& ref : refs) {
        std::string d = rows_differ(h, 0, 1, ref.bits.data());
        if (d.empty()) continue;
        cand.passed = false;
        cand.failure = cat("block ", i, " ", ref.shape, ": cached row vs reference ", d);
        break;
      }
    }
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
