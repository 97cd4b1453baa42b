// The op registry (src/ops/op.h), on the test device (tests/device_under_test.h): every
// candidate of every op meets its contract against the op's reference on every test shape
// of its row; the ladder tries the candidates in order, counts each refusal once with the
// rule's reason and runs the first that accepts; the table's names match the flags.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <set>
#include <string>

#include "contract/fallback.h"
#include "device_under_test.h"
#include "ops/op.h"
#include "sparse3d/flags.h"

namespace s3d {
namespace {

using ops::Contract;
using ops::OpCase;
using ops::OpInfo;
using ops::OpPlan;
using ops::OpShape;
using sparse3d::Flag;
using test::kTestDevice;

std::string describe(const OpInfo& op, const OpShape& s) {
  return cat(op.name, " at T ", s.tokens, " H ", s.heads, " D ", s.head_dim, " B ", s.batch,
             " hidden ", s.hidden, " on ", device_name(kTestDevice));
}

// Host copy of a result, as raw bits and as floats.
struct Result {
  std::vector<uint16_t> bits;
  std::vector<float> values;
};
Result read(const Tensor& t) {
  const Tensor h = t.to(Device::CPU);
  Result r;
  r.bits.resize(static_cast<size_t>(h.numel()));
  std::memcpy(r.bits.data(), h.data(), h.nbytes());
  r.values = h.to_floats();
  return r;
}

double rel_l2(const std::vector<float>& got, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = double(got[i]) - ref[i];
    num += d * d;
    den += double(ref[i]) * ref[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

size_t non_finite(const std::vector<float>& v) {
  size_t n = 0;
  for (float x : v) n += !std::isfinite(x);
  return n;
}

// The plan with the candidates of `op` at the given indices on, nothing else.
OpPlan plan_with(const OpInfo& op, std::initializer_list<int> ks) {
  sparse3d::FlagSet f;
  for (int k : ks) f.set(op.candidates[static_cast<size_t>(k)].flag);
  return OpPlan::resolve(f);
}

uint64_t fallbacks_of(Flag flag) {
  uint64_t n = 0;
  for (const auto& c : contract::fallback_counts())
    if (c.optimization == sparse3d::name(flag)) n += c.count;
  return n;
}

struct OpTable : ::testing::Test {
  void SetUp() override { contract::reset_fallbacks(); }
};

TEST_F(OpTable, EveryCandidateMeetsItsContractOnEveryTestShape) {
  S3D_TEST_DEVICE();
  int ran = 0, refused = 0;
  for (const OpInfo& op : ops::op_table()) {
    for (const OpShape& shape : op.test_shapes) {
      const std::string what = describe(op, shape);
      auto c = op.make_case(shape, kTestDevice, 7000 + shape.tokens);
      c->run(OpCase::kReference);
      const Result ref = read(c->result());
      ASSERT_EQ(non_finite(ref.values), 0u) << what << ": the reference left poison";
      for (size_t k = 0; k < op.candidates.size(); ++k) {
        const ops::CandidateInfo& cand = op.candidates[k];
        const std::string who = cat(what, ", candidate ", sparse3d::name(cand.flag));
        if (!c->unsupported(static_cast<int>(k)).empty()) {
          ++refused;
          continue;
        }
        ++ran;
        c->run(static_cast<int>(k));
        const Result got = read(c->result());
        ASSERT_EQ(got.values.size(), ref.values.size()) << who;
        EXPECT_EQ(non_finite(got.values), 0u) << who << ": unwritten or non-finite elements";
        if (cand.contract == Contract::Bitwise) {
          size_t differ = 0;
          for (size_t i = 0; i < got.bits.size(); ++i) differ += got.bits[i] != ref.bits[i];
          EXPECT_EQ(differ, 0u) << who << ": not bitwise the reference";
        } else {
          EXPECT_LE(rel_l2(got.values, ref.values), cand.tolerance) << who;
        }
      }
    }
  }
  // Each rung is exercised: the table's shapes include ones a candidate refuses.
  EXPECT_GT(ran, 0);
  EXPECT_GT(refused, 0);
  EXPECT_TRUE(contract::fallback_counts().empty()) << "a candidate run alone counted a fallback";
}

TEST_F(OpTable, TheLadderRunsTheFirstCandidateThatAcceptsAndCountsEachRefusal) {
  S3D_TEST_DEVICE();
  for (const OpInfo& op : ops::op_table()) {
    for (const OpShape& shape : op.test_shapes) {
      const std::string what = describe(op, shape);
      auto c = op.make_case(shape, kTestDevice, 8000 + shape.tokens);
      // Every candidate on: the ladder in table order.
      sparse3d::FlagSet all;
      for (const auto& cand : op.candidates) all.set(cand.flag);
      int first = OpCase::kReference;
      std::vector<std::string> why(op.candidates.size());
      for (size_t k = 0; k < op.candidates.size(); ++k) {
        why[k] = c->unsupported(static_cast<int>(k));
        if (why[k].empty()) {
          first = static_cast<int>(k);
          break;
        }
      }
      c->run(first);
      const Result want = read(c->result());
      contract::reset_fallbacks();
      c->run_op(OpPlan::resolve(all));
      const Result got = read(c->result());
      EXPECT_EQ(got.bits, want.bits) << what << ": the ladder did not run rung " << first;
      for (size_t k = 0; k < op.candidates.size(); ++k) {
        const bool tried_and_refused =
            (first == OpCase::kReference || static_cast<int>(k) < first) && !why[k].empty();
        EXPECT_EQ(fallbacks_of(op.candidates[k].flag), tried_and_refused ? 1u : 0u)
            << what << ", " << sparse3d::name(op.candidates[k].flag);
        if (!tried_and_refused) continue;
        for (const auto& f : contract::fallback_counts()) {
          if (f.optimization == sparse3d::name(op.candidates[k].flag)) {
            EXPECT_EQ(f.reason, why[k]) << what;
          }
        }
      }
      // No candidate on: the reference, nothing counted.
      contract::reset_fallbacks();
      c->run_op(OpPlan());
      const Result plain = read(c->result());
      c->run(OpCase::kReference);
      EXPECT_EQ(plain.bits, read(c->result()).bits) << what << ": no flag, not the reference";
      EXPECT_TRUE(contract::fallback_counts().empty()) << what;
      // Each candidate alone: it runs when it accepts, else the reference, counted once.
      for (size_t k = 0; k < op.candidates.size(); ++k) {
        contract::reset_fallbacks();
        c->run_op(plan_with(op, {static_cast<int>(k)}));
        const Result alone = read(c->result());
        c->run(why[k].empty() && c->unsupported(static_cast<int>(k)).empty()
                   ? static_cast<int>(k)
                   : OpCase::kReference);
        EXPECT_EQ(alone.bits, read(c->result()).bits)
            << what << ", " << sparse3d::name(op.candidates[k].flag) << " alone";
        EXPECT_EQ(fallbacks_of(op.candidates[k].flag),
                  c->unsupported(static_cast<int>(k)).empty() ? 0u : 1u)
            << what;
      }
    }
  }
}

TEST(OpTableNames, OpsAndCandidatesAreNamedAsTheirFlagsAndFunctions) {
  std::set<std::string> ops_seen;
  std::set<Flag> flags_seen;
  for (const OpInfo& op : ops::op_table()) {
    EXPECT_TRUE(ops_seen.insert(std::string(op.name)).second) << op.name << " twice";
    EXPECT_EQ(&ops::find_op(op.name), &op);
    EXPECT_EQ(&ops::op_info(op.id), &op);
    EXPECT_FALSE(op.test_shapes.empty()) << op.name;
    for (const auto& cand : op.candidates) {
      const std::string flag(sparse3d::name(cand.flag));
      EXPECT_TRUE(flags_seen.insert(cand.flag).second) << flag << " in two ops";
      // A tolerance candidate is the op's fast_ kernel; a bitwise one its fused:: kernel,
      // named by the flag (gemm_gelu_epilogue: the library's epilogue, no kernel of ours).
      if (cand.contract == Contract::Tolerance && flag.rfind("fast_", 0) == 0) {
        EXPECT_EQ(flag, cat("fast_", op.name));
        EXPECT_EQ(cand.kernel, cat("kernels::fast::", op.name));
        EXPECT_GT(cand.tolerance, 0.0);
      } else if (cand.contract == Contract::Bitwise) {
        EXPECT_EQ(cand.kernel, cat("kernels::fused::", flag));
        EXPECT_EQ(cand.tolerance, 0.0);
      }
    }
  }
  EXPECT_THROW(ops::find_op("layer_norm"), Error);
}

TEST(OpTableNames, APlanKeepsTheTableOrderWhateverTheFlagsOrder) {
  const OpInfo& op = ops::op_info(ops::OpId::modulated_layernorm);
  const OpPlan p = OpPlan::resolve({Flag::modulated_layernorm, Flag::fast_modulated_layernorm,
                                    Flag::cuda_graphs});
  ASSERT_EQ(p.count(op.id), 2);
  EXPECT_EQ(op.candidates[static_cast<size_t>(p.candidate(op.id, 0))].flag,
            Flag::fast_modulated_layernorm);
  EXPECT_EQ(op.candidates[static_cast<size_t>(p.candidate(op.id, 1))].flag,
            Flag::modulated_layernorm);
  EXPECT_EQ(p.count(ops::OpId::gated_residual_add), 0);
  EXPECT_EQ(OpPlan().count(op.id), 0);
}

}  // namespace
}  // namespace s3d
