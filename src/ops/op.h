// The op registry: every op of the block that has more than one implementation, one row each
// (docs/DESIGN.md, "Ops"). A row names the op, its reference (pure_eager's chain), its
// candidates in the order they are tried (each with its flag, its contract and, in the op's
// file, its support rule and kernel), its byte model and its test shapes. The model calls the
// op (ops::modulated_layernorm(...)), never a kernel; an OpPlan resolved once per request from
// its flags says which candidates the op may try; run_ladder() below is the one place that
// tries them, counts each refusal as a fallback of the refused candidate's flag and runs the
// reference when every candidate refused. The tests (tests/ops/) and `sparse3d bench-kernels`
// iterate the same table.
//
// Names: an op NAME is the function ops::NAME in src/ops/NAME.{h,cpp}; its reference is
// kernels::reference::NAME; a candidate is named by its flag, and its kernel is
// kernels::fused::FLAG (bitwise) or kernels::fast::NAME (tolerance).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "attention/attention.h"
#include "core/error.h"
#include "core/fallback.h"
#include "core/plan_search.h"
#include "core/tensor.h"
#include "sparse3d/flags.h"

namespace s3d::ops {

// The ops, in table order.
enum class OpId : uint8_t {
  modulated_layernorm,
  qk_rmsnorm_rope,
  qk_rmsnorm_cross,
  gated_residual_add,
  linear_gelu,
  linear,
  sdpa,
};
inline constexpr int kOpCount = 7;
// What a candidate promises against the op's reference on the same backend.
enum class Contract : uint8_t {
  Bitwise,    // the same bits
  Tolerance,  // within `tolerance` relative L2 (and the op's own finer rule, docs/CONTRACTS.md)
};

// One candidate of an op whose call operands are A: its support rule and its kernel.
template <class A>
struct Impl {
  std::string (*unsupported)(const A&);
  void (*run)(A&);
};

// A tag per operand type: a candidate records the type its Impl takes, and whoever reads the
// Impl back (run_ladder, CaseOf) checks it, so a row cannot hand one op's kernel another op's
// operands.
template <class A>
const void* operands_tag() {
  static constexpr char tag = 0;
  return &tag;
}

// One candidate, in one record: its flag (and name), its contract, the kernel it runs and,
// over the op's operand type, the rule that refuses operands and the call. Made by
// candidate<A>() in the op's file; an op may have any number.
struct CandidateInfo {
  sparse3d::Flag flag;     // the candidate's name is its flag's
  Contract contract = Contract::Bitwise;
  double tolerance = 0;    // relative L2 against the reference; 0 for bitwise
  std::string_view kernel; // the function that implements it, e.g. "kernels::fused::..."
  std::shared_ptr<const void> impl;  // an Impl<A>, A the op's operand type
  const void* operands = nullptr;    // operands_tag<A>()
};

template <class A>
CandidateInfo candidate(sparse3d::Flag flag, Contract contract, double tolerance,
                        std::string_view kernel, std::string (*unsupported)(const A&),
                        void (*run)(A&)) {
  return CandidateInfo{flag, contract, tolerance, kernel,
                       std::make_shared<const Impl<A>>(Impl<A>{unsupported, run}),
                       operands_tag<A>()};
}

// The model dimensions one call of an op is built at (tests, the kernel bench).
struct OpShape {
  int64_t tokens = 0;
  int heads = 0, head_dim = 0;
  int batch = 1;           // assets (rows of the modulation)
  int64_t hidden = 0;      // the MLP width (linear_gelu)
  int64_t channels() const { return int64_t{heads} * head_dim; }
};

// One call's operands, owning its tensors, random and reproducible from (shape, seed) on
// either device: what the tests and the kernel bench run the candidates on.
class OpCase {
 public:
  static constexpr int kReference = -1;
  virtual ~OpCase() = default;
  // Why candidate k (an index into OpInfo::candidates) refuses these operands, or "".
  virtual std::string unsupported(int k) = 0;
  // Resets the inputs an in-place candidate overwrote and poisons the output, then runs
  // candidate k alone (kReference: the reference), no ladder, no counting.
  virtual void run(int k) = 0;
  // Runs candidate k again without the reset (in-place candidates work on what the last run
  // left): what the kernel bench times, so that no restore copy is counted.
  virtual void rerun(int k) = 0;
  // Resets and poisons as run(), then calls the op itself (its ladder) under `plan`.
  virtual void run_op(const class OpPlan& plan) = 0;
  // The last run's result (the tensor the op returns or writes).
  virtual Tensor result() const = 0;
};

struct OpInfo {
  OpId id;
  std::string_view name;       // = the function ops::NAME and the file src/ops/NAME.cpp
  std::string_view summary;    // one line: what the op computes
  std::string_view reference;  // what the reference runs (pure_eager's chain)
  std::vector<CandidateInfo> candidates;  // tried in this order: the fastest first
  // Compulsory bytes of one call (every input read once, every output written once).
  double (*bytes)(const OpShape&) = nullptr;
  // The shapes every candidate is tested at (odd token counts, widths some candidate
  // refuses, so that each rung of the ladder runs).
  std::vector<OpShape> test_shapes;
  std::unique_ptr<OpCase> (*make_case)(const OpShape&, Device, uint64_t seed) = nullptr;
};

// Every op, in OpId order.
const std::vector<OpInfo>& op_table();
const OpInfo& op_info(OpId id);
// The row whose name is `name`; throws naming the known ops.
const OpInfo& find_op(std::string_view name);

// The candidates each op may try under a set of flags, in try order: resolved once per
// request (model::Request::use_flags) and read by every call of the op.
class OpPlan {
 public:
  OpPlan() = default;  // every op runs its reference
  // `store`: where the searched candidates (tuned_gemm, tuned_attention) keep their choices
  // (the engine's qualification cache; null: nowhere but this process). Reads
  // SPARSE3D_SDPA_IMPLEMENTATION (auto, unified or composite; unset: auto) for the sdpa op.
  static OpPlan resolve(const sparse3d::FlagSet& flags, plan_search::Store* store = nullptr);
  const sparse3d::FlagSet& flags() const { return flags_; }
  // The indices into op_info(id).candidates of the candidates this plan lets the op try.
  int count(OpId id) const { return static_cast<int>(order_[static_cast<size_t>(id)].size()); }
  int candidate(OpId id, int i) const {
    return order_[static_cast<size_t>(id)][static_cast<size_t>(i)];
  }
  plan_search::Store* plan_store() const { return store_; }
  attention::Implementation sdpa_implementation() const { return sdpa_implementation_; }

 private:
  sparse3d::FlagSet flags_;
  std::array<std::vector<uint16_t>, kOpCount> order_{};
  plan_search::Store* store_ = nullptr;
  attention::Implementation sdpa_implementation_ = attention::Implementation::Auto;
};

// Candidate k of op `id`, whose operands are A: its rule and kernel.
template <class A>
const Impl<A>& impl_of(OpId id, int k) {
  const CandidateInfo& c = op_info(id).candidates[static_cast<size_t>(k)];
  S3D_CHECK(c.operands == operands_tag<A>(), "op table: candidate ", sparse3d::name(c.flag),
            " of ", op_info(id).name, " was made for other operands");
  return *static_cast<const Impl<A>*>(c.impl.get());
}

// The ladder: the plan's candidates of `id` in order; the first whose rule accepts the
// operands runs; each that refuses counts one fallback of its flag (core/fallback.h), with
// the rule's reason; the reference runs when none ran.
template <class A>
void run_ladder(OpId id, const OpPlan& plan, void (*reference)(A&), A& a) {
  for (int i = 0; i < plan.count(id); ++i) {
    const int k = plan.candidate(id, i);
    const Impl<A>& impl = impl_of<A>(id, k);
    const std::string why = impl.unsupported(a);
    if (why.empty()) {
      impl.run(a);
      return;
    }
    record_fallback(op_info(id).candidates[static_cast<size_t>(k)].flag, why);
  }
  reference(a);
}

// An OpCase over the op's own candidates (its row's) and reference and operand type A: a case
// supplies its operands, the reset before each run, the result and the call of the op.
template <class A>
class CaseOf : public OpCase {
 public:
  CaseOf(OpId id, void (*reference)(A&)) : id_(id), reference_(reference) {}
  std::string unsupported(int k) override {
    A a = operands();
    return impl_of<A>(id_, k).unsupported(a);
  }
  void run(int k) override {
    reset();
    rerun(k);
  }
  void rerun(int k) override {
    A a = operands();
    if (k == kReference) {
      reference_(a);
    } else {
      impl_of<A>(id_, k).run(a);
    }
    result_ = output(a);
  }
  void run_op(const OpPlan& plan) override {
    reset();
    A a = operands();
    result_ = call_op(plan, a);
  }
  Tensor result() const override { return result_; }

 protected:
  virtual A operands() = 0;
  // Restores what an in-place candidate overwrote; poisons what a candidate writes.
  virtual void reset() = 0;
  // The result of a run on operands a.
  virtual Tensor output(const A& a) const = 0;
  // Calls the op's entry point (ops::NAME) on a; returns its result.
  virtual Tensor call_op(const OpPlan& plan, A& a) = 0;

 private:
  OpId id_;
  void (*reference_)(A&);
  Tensor result_;
};

// OpInfo::make_case for a case class C constructed from (shape, device, seed).
template <class C>
std::unique_ptr<OpCase> make_case_of(const OpShape& shape, Device device, uint64_t seed) {
  return std::make_unique<C>(shape, device, seed);
}

// The test shapes of the per-head q/k ops: head_dim 16 and 24 (every candidate runs), 12 (not
// 16-byte chunks: every candidate refuses), 264 (past 8 lanes' registers: the tolerance
// kernels refuse, the bitwise ones run); odd token counts, one token.
std::vector<OpShape> head_test_shapes();

// i32 [tokens]: token t belongs to asset t * batch / tokens (the assets in order, as a packed
// request holds them).
Tensor spread_batch_index(int64_t tokens, int batch, Device device);

// A host-generated tensor of N(0, 1) * scale + offset values (counter-based, so the same
// (shape, seed) gives the same values on either device), moved to `device`.
Tensor random_tensor(const Shape& shape, DType dtype, Device device, uint64_t seed,
                     float scale = 1.0f, float offset = 0.0f);

}  // namespace s3d::ops
