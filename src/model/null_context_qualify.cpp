#include "model/null_context_qualify.h"

#include <algorithm>
#include <cstring>
#include <map>

#include "core/error.h"
#include "core/rng.h"
#include "ops/linear.h"
#include "kernels/elementwise.h"
#include "kernels/row_match.h"

namespace s3d::model {
namespace {

Projection projection_of(const QualificationOptions& o) {
  return o.projection ? o.projection
                      : Projection([plan = o.ops](const Tensor& x, const Linear& l, Tensor& y) {
                          ops::linear(plan, x, l, y);
                        });
}

std::vector<int64_t> sorted_candidates(const QualificationOptions& o) {
  std::vector<int64_t> ms = o.candidate_m;
  std::sort(ms.begin(), ms.end());
  ms.erase(std::unique(ms.begin(), ms.end()), ms.end());
  return ms;
}


// Random non-zero rows [rows, cols] on `dev`, made without an [rows, cols] host tensor: a
// block of at most kRandomBlock distinct Gaussian rows drawn on the host, repeated down the
// rows on the device (a GEMM computes each row alone, so variety beyond the block adds
// nothing to a slice check; the block is odd-sized so no tile boundary lines up with it).
constexpr int64_t kRandomBlock = 61;

Tensor random_rows(int64_t rows, int64_t cols, uint64_t seed, Device dev) {
  const int64_t distinct = std::min(rows, kRandomBlock);
  std::vector<float> v(static_cast<size_t>(distinct * cols));
  normal_fill(seed, 0, v.size(), v.data());
  Tensor block = Tensor::from_floats(v, {distinct, cols}, DType::BF16).to(dev);
  if (distinct == rows) return block;
  std::vector<int32_t> index(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) index[static_cast<size_t>(r)] = static_cast<int32_t>(r % distinct);
  Tensor out = Tensor::empty({rows, cols}, DType::BF16, dev);
  kernels::gather_rows(RowView::of(block), Tensor::from_ints(index, {rows}).to(dev), out);
  return out;
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

// What one slot of the comparison table answers (kernels/row_match.h).
enum class Question {
  Candidate,    // candidate `candidate`'s cached row vs every reference row of `shape`
  Agreement,    // the reference rows of `shape` vs its first one
  OutSlice,     // to_out [N] vs the conditional half of to_out [2N]
  QSlice,       // to_q [N] vs the conditional half of to_q [2N]
  KvSlice,      // to_kv [L] vs the real half of to_kv [2L]
};

struct Slot {
  Question question;
  int block = 0;
  size_t candidate = 0;
  int64_t cols = 0;
  std::string shape;  // "to_out [3664, 1536] (serial CFG)", "to_q [300] vs [600]"
};

// The comparisons of one run, queued on the model's device into one slot table and read
// back with a single small copy once every block has been queued.
struct Checks {
  Checks(const QualificationOptions& options, Device device) : o(options), dev(device) {}

  const QualificationOptions& o;
  Projection proj;
  Device dev;
  int64_t C = 0;
  bool rows = false;    // search M (reference rows of to_out)
  bool slices = false;  // batched-CFG slice checks of to_q and to_kv
  std::map<int64_t, Tensor> cond_rows, other_rows, kv_rows;
  std::vector<Slot> slots;
  Tensor table;

  Tensor project(const Tensor& x, const Linear& l) const {
    Tensor y = Tensor::empty({x.size(0), l.out_features()}, DType::BF16, dev);
    proj(x, l, y);
    return y;
  }
  int64_t add(Slot s) {
    slots.push_back(std::move(s));
    return static_cast<int64_t>(slots.size()) - 1;
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
  k.proj = projection_of(o);
  k.C = cfg.model_channels;
  k.rows = check_rows;
  k.slices = check_slices;
  for (int64_t n : o.token_counts) {
    if (o.batched && (k.rows || k.slices))
      k.cond_rows[n] = random_rows(n, k.C, o.seed ^ (uint64_t(n) << 8), dev);
    if (k.slices) k.other_rows[n] = random_rows(n, k.C, o.seed ^ (uint64_t(n) << 9) ^ 1, dev);
  }
  if (k.slices)
    for (int64_t l : o.context_rows)
      k.kv_rows[l] = random_rows(l, cfg.cond_channels, o.seed ^ (uint64_t(l) << 10) ^ 2, dev);
  return k;
}

// The reference rows `refs` (the unconditional rows of one to_out projection) against every
// candidate row of block i (`wants`, [K, C]) and against their own first row.
void queue_reference(Checks& k, int i, const RowView& refs, const RowView& wants,
                     const std::string& shape) {
  const int64_t first = static_cast<int64_t>(k.slots.size());
  for (int64_t c = 0; c < wants.rows; ++c)
    k.add(Slot{Question::Candidate, i, static_cast<size_t>(c), k.C, shape});
  kernels::first_row_mismatch(refs, wants, k.table, first);
  const int64_t agree = k.add(Slot{Question::Agreement, i, 0, k.C, shape});
  kernels::first_row_mismatch(refs, RowView{refs.base, refs.offset, 1, refs.cols, refs.stride},
                              k.table, agree);
}

// The checks of block i at N tokens per CFG branch: the reference rows of to_out at [N, C]
// (serial) and [2N, C] (batched, with the [N] to_out its conditional slice), and to_q's
// [N] vs [2N] slice.
void queue_token_count(Checks& k, int i, int64_t n, const CrossAttentionWeights& w,
                       const Tensor& v0, const RowView& wants) {
  const int64_t C = k.C;
  if (k.rows && k.o.serial) {
    Tensor x = Tensor::empty({n, C}, DType::BF16, k.dev);
    kernels::broadcast_row(v0, x);
    Tensor y = k.project(x, w.to_out);
    queue_reference(k, i, RowView::of(y), wants, cat("to_out [", n, ", ", C, "] (serial CFG)"));
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
    queue_reference(k, i, RowView::of(y2.rows(n, 2 * n)), wants, shape);
    // The cache path projects the conditional rows alone: a cache-only condition.
    Tensor y1 = k.project(k.cond_rows.at(n), w.to_out);
    const int64_t s = k.add(Slot{Question::OutSlice, i, 0, C,
                                 cat("to_out [", n, "] is not the conditional slice of ", shape)});
    kernels::first_mismatch(RowView::of(y1), RowView::of(y2.rows(0, n)), k.table, s);
  }
  if (!k.slices) return;
  const Tensor& cond = k.cond_rows.at(n);
  Tensor q2 = k.project(stacked(cond, k.other_rows.at(n)), w.to_q);
  Tensor q1 = k.project(cond, w.to_q);
  const int64_t s = k.add(Slot{Question::QSlice, i, 0, q1.size(1),
                               cat("to_q [", n, "] vs [", 2 * n, "]")});
  kernels::first_mismatch(RowView::of(q1), RowView::of(q2.rows(0, n)), k.table, s);
}

// to_kv's [L] vs [2L] slice of block i (the reference batched condition: the real rows, then
// the zero condition).
void queue_context_rows(Checks& k, int i, int64_t l, const Linear& to_kv) {
  const Tensor& real = k.kv_rows.at(l);
  Tensor zeros = Tensor::zeros(real.shape(), DType::BF16, k.dev);
  Tensor y2 = k.project(stacked(real, zeros), to_kv);
  Tensor y1 = k.project(real, to_kv);
  const int64_t s = k.add(Slot{Question::KvSlice, i, 0, y1.size(1),
                               cat("to_kv [", l, "] vs [", 2 * l, "]")});
  kernels::first_mismatch(RowView::of(y1), RowView::of(y2.rows(0, l)), k.table, s);
}

// The verdicts from the answers (the slot table on the host), in block order: the first
// failure per candidate and the first slice failure are the ones reported.
void judge(const Checks& k, const Tensor& answers, int blocks, bool check_rows,
           Qualification& q) {
  std::map<int, std::string> broken;  // block -> why no cached row can match its references
  for (size_t s = 0; s < k.slots.size(); ++s) {
    const Slot& slot = k.slots[s];
    const kernels::Mismatch d = kernels::read_mismatch(answers, static_cast<int64_t>(s), slot.cols);
    if (!d.found()) continue;
    switch (slot.question) {
      case Question::Agreement:
        if (!broken.count(slot.block))
          broken[slot.block] = cat("block ", slot.block, " ", slot.shape, ": the reference's "
                                   "unconditional rows differ among themselves (", d.describe(),
                                   "), so no single cached row reproduces them");
        break;
      case Question::OutSlice:
        if (!broken.count(slot.block))
          broken[slot.block] = cat("block ", slot.block, " ", slot.shape, ": ", d.describe());
        break;
      case Question::KvSlice:
        if (q.kv_failure.empty())
          q.kv_failure = cat("block ", slot.block, " ", slot.shape, ": ", d.describe());
        [[fallthrough]];
      case Question::QSlice:
        if (q.slices_ok)
          q.slice_failure = cat("block ", slot.block, " ", slot.shape, ": ", d.describe());
        q.slices_ok = false;
        break;
      case Question::Candidate:
        break;
    }
  }
  // A candidate fails at the first block whose references it does not reproduce, or whose
  // references no single row can reproduce.
  for (int i = 0; i < blocks && check_rows; ++i) {
    for (size_t c = 0; c < q.candidates.size(); ++c) {
      CandidateResult& cand = q.candidates[c];
      if (!cand.passed) continue;
      if (broken.count(i)) {
        cand.passed = false;
        cand.failure = broken[i];
        continue;
      }
      for (size_t s = 0; s < k.slots.size(); ++s) {
        const Slot& slot = k.slots[s];
        if (slot.block != i || slot.question != Question::Candidate || slot.candidate != c)
          continue;
        const kernels::Mismatch d =
            kernels::read_mismatch(answers, static_cast<int64_t>(s), slot.cols);
        if (!d.found()) continue;
        cand.passed = false;
        cand.failure = cat("block ", i, " ", slot.shape, ": the reference differs from the "
                           "cached row at ", d.describe(), " (reference vs cached)");
        break;
      }
    }
  }
}

}  // namespace

CandidateRows make_candidate_rows(const Transformer& model,
                                  const std::vector<Tensor>& value_rows,
                                  const QualificationOptions& o) {
  CandidateRows c;
  c.ms = sorted_candidates(o);
  const Projection proj = projection_of(o);
  const auto K = static_cast<int64_t>(c.ms.size());
  const int64_t C = model.config().model_channels;
  for (int i = 0; i < model.config().num_blocks; ++i) {
    const Linear& to_out = model.weights().blocks[static_cast<size_t>(i)].cross_attn.to_out;
    const Tensor& v0 = value_rows[static_cast<size_t>(i)];
    Tensor table = Tensor::empty({K, C}, DType::BF16, model.device());
    for (int64_t k = 0; k < K; ++k) {
      const int64_t m = c.ms[static_cast<size_t>(k)];
      Tensor row = canonical_row(proj, v0, m, to_out);
      if (o.tamper_cached_row) o.tamper_cached_row(i, row);
      RowView dst = RowView::of(table.rows(k, k + 1));
      kernels::copy_rows(RowView::of(row), dst);
      c.by_m[m].push_back(row);
    }
    c.tables.push_back(table);
  }
  return c;
}

bool bits_equal(const Tensor& a, const Tensor& b) {
  if (a.dtype() != DType::BF16 || b.dtype() != DType::BF16 || a.shape() != b.shape()) return false;
  Tensor ha = a.to(Device::CPU), hb = b.to(Device::CPU);
  return std::memcmp(ha.data(), hb.data(), ha.nbytes()) == 0;
}

Tensor canonical_row(const Projection& projection, const Tensor& v0, int64_t m,
                     const Linear& to_out) {
  S3D_CHECK(m >= 1, "canonical_row: M must be >= 1, got ", m);
  Tensor x = Tensor::empty({m, v0.numel()}, DType::BF16, v0.device());
  kernels::broadcast_row(v0, x);
  Tensor y = Tensor::empty({m, to_out.out_features()}, DType::BF16, v0.device());
  projection(x, to_out, y);
  Tensor row = Tensor::empty({1, to_out.out_features()}, DType::BF16, v0.device());
  row.copy_from(y.rows(0, 1));
  return row;
}

void restore_cached_rows(const ops::OpPlan& plan, const Transformer& model,
                         const std::vector<Tensor>& value_rows, Qualification& q) {
  q.cached_rows.clear();
  if (q.m == 0 || !q.rows_checked) return;
  const Projection proj = [&plan](const Tensor& x, const Linear& l, Tensor& y) {
    ops::linear(plan, x, l, y);
  };
  for (int i = 0; i < model.config().num_blocks; ++i) {
    const Linear& to_out = model.weights().blocks[static_cast<size_t>(i)].cross_attn.to_out;
    q.cached_rows.push_back(canonical_row(proj, value_rows[static_cast<size_t>(i)], q.m, to_out));
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

Qualification qualify_null_context(const Transformer& model,
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
  q.options.candidates = nullptr;
  q.fingerprint = contract::context_fingerprint();
  q.weights_version = model.weights_version();
  q.rows_checked = check_rows;
  q.slices_checked = check_slices && o.batched;
  q.slices_ok = q.slices_checked;
  Checks k = make_checks(o, cfg, model.device(), check_rows, q.slices_checked);
  q.kv_checked = q.slices_checked && !o.context_rows.empty();

  const std::vector<int64_t> ms = sorted_candidates(o);
  // Without the rows checked (the exact path's qualification of batched CFG: its slices
  // alone) no candidate M has a verdict, so none is listed and none is chosen.
  if (check_rows)
    for (int64_t m : ms) q.candidates.push_back(CandidateResult{m, true, ""});
  CandidateRows made;
  const CandidateRows* rows = o.candidates;
  if (check_rows && (rows == nullptr || rows->ms != ms)) {
    made = make_candidate_rows(model, value_rows, o);
    rows = &made;
  }

  // Upper bound of the slots: per block and token count K + 2 (serial), K + 3 (batched), 1
  // (to_q); per block and context length 1.
  const auto K = static_cast<int64_t>(ms.size());
  const auto n_counts = static_cast<int64_t>(o.token_counts.size());
  const int64_t per_block =
      n_counts * (2 * K + 6) + static_cast<int64_t>(o.context_rows.size()) + 1;
  k.table = kernels::mismatch_slots(per_block * cfg.num_blocks, model.device());
  for (int i = 0; i < cfg.num_blocks; ++i) {
    const CrossAttentionWeights& w = model.weights().blocks[static_cast<size_t>(i)].cross_attn;
    const Tensor& v0 = value_rows[static_cast<size_t>(i)];
    const RowView table = check_rows ? RowView::of(rows->tables[static_cast<size_t>(i)]) : RowView{};
    for (int64_t n : o.token_counts) queue_token_count(k, i, n, w, v0, table);
    if (q.slices_checked)
      for (int64_t l : o.context_rows) queue_context_rows(k, i, l, w.to_kv);
  }

  // One copy of the answers, then the verdicts.
  judge(k, k.table.to(Device::CPU), cfg.num_blocks, check_rows, q);
  for (const auto& cand : q.candidates) {
    if (cand.passed) {
      q.m = cand.m;
      q.cached_rows = rows->by_m.at(cand.m);
      break;
    }
  }
  return q;
}

}  // namespace s3d::model
