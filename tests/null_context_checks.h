// Shared by the null-context tests of both backends (tests/device/test_null_context.cpp, the
// CPU's and the GPU's own): raw-bit comparison of tensors (int16 view of bf16, int32 view of
// fp32), "this execution path gives pure_eager's bits" over a whole sampler run (final latent
// and the first step's conditional and unconditional outputs) for one path or every one, and
// the qualification's report.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "contract/fallback.h"
#include "core/tensor.h"
#include "model/null_context.h"
#include "sampler/sampler.h"
#include "sparse3d/flags.h"

namespace s3d::testing {

inline ::testing::AssertionResult same_bits(const Tensor& a, const Tensor& b, const char* what) {
  if (!a.defined() && !b.defined()) return ::testing::AssertionSuccess();
  if (a.defined() != b.defined() || a.shape() != b.shape() || a.dtype() != b.dtype())
    return ::testing::AssertionFailure() << what << ": " << (a.defined() ? a.describe() : "none")
                                         << " vs " << (b.defined() ? b.describe() : "none");
  Tensor ha = a.to(Device::CPU), hb = b.to(Device::CPU);
  const auto* pa = static_cast<const unsigned char*>(ha.data());
  const auto* pb = static_cast<const unsigned char*>(hb.data());
  const size_t es = dtype_size(a.dtype());
  int64_t differing = 0, first = -1;
  for (int64_t i = 0; i < a.numel(); ++i) {
    if (std::memcmp(pa + i * es, pb + i * es, es) == 0) continue;
    if (first < 0) first = i;
    ++differing;
  }
  if (differing == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": " << differing << " of " << a.numel()
                                       << " elements differ, the first at " << first << " ("
                                       << ha.to_floats()[first] << " vs "
                                       << hb.to_floats()[first] << ")";
}

// Null-context options that qualify both the canonical cache and the batched-CFG slices at
// the given token counts, with L condition tokens.
inline model::NullContextOptions qualified_options(int L, std::vector<int64_t> tokens) {
  model::NullContextOptions o;
  o.context_tokens = L;
  o.qualify_cache = true;
  o.qualify_slices = true;
  o.qualification.token_counts = std::move(tokens);
  o.qualification.context_rows = {L};
  return o;
}

// The reference run for a plan's CFG mode: pure_eager, plus batched_cfg if the plan has it.
inline sampler::Output reference_run(const model::Transformer& m, const sampler::Inputs& in,
                                     sampler::SamplerOptions base, bool batched) {
  base.flags.set(sparse3d::Flag::batched_cfg, batched);
  return sampler::sample(m, in, base, true);
}

inline void expect_same_bits_as(const sampler::Output& ref, const model::Transformer& m,
                                const sampler::Inputs& in, sampler::SamplerOptions base,
                                const std::string& spec, const model::NullContext* nc) {
  base.apply(sparse3d::ExecutionPlan::parse(spec));
  base.null_context = nc;
  sampler::Output got = sampler::sample(m, in, base, true);
  EXPECT_TRUE(same_bits(ref.latent, got.latent, "latent")) << spec;
  EXPECT_TRUE(same_bits(ref.first_v_cond, got.first_v_cond, "first v_cond")) << spec;
  EXPECT_TRUE(same_bits(ref.first_v_uncond, got.first_v_uncond, "first v_uncond")) << spec;
}

// Every null-context and K/V-cache combination, serial and batched.
inline const std::vector<std::string>& null_context_specs() {
  static const std::vector<std::string> specs = {
      "prior_exact_null",
      "prior_exact_null+batched_cfg",
      "canonical_cache_null",
      "canonical_cache_null+batched_cfg",
      "pure_eager+cond_kv_cache",
      "pure_eager+batched_cfg+cond_kv_cache",
      "canonical_cache_null+cond_kv_cache",
      "canonical_cache_null+batched_cfg+cond_kv_cache",
      "prior_exact_null+batched_cfg+cond_kv_cache",
  };
  return specs;
}

inline bool spec_is_batched(const std::string& spec) {
  return sparse3d::ExecutionPlan::parse(spec).on(sparse3d::Flag::batched_cfg);
}

// Every spec of null_context_specs() against pure_eager (per CFG mode) on the inputs, bitwise.
inline void expect_every_path_bitwise(const model::Transformer& m, const sampler::Inputs& in,
                                      const sampler::SamplerOptions& o,
                                      const model::NullContext& nc, const std::string& label) {
  sampler::Output ref[2] = {reference_run(m, in, o, false), reference_run(m, in, o, true)};
  for (const auto& spec : null_context_specs()) {
    SCOPED_TRACE(label + " " + spec);
    expect_same_bits_as(ref[spec_is_batched(spec) ? 1 : 0], m, in, o, spec, &nc);
  }
}

// The qualification outcome as the bench report will quote it, and which path ran; a cache
// that did not qualify must have been refused and counted, never used silently.
inline void report_qualification(const model::NullContext& nc, const std::string& label) {
  std::printf("[%s] %s", label.c_str(), nc.report().c_str());
  std::printf("[%s] fallbacks:\n%s", label.c_str(),
              contract::format_fallbacks(contract::fallback_counts()).c_str());
  ::testing::Test::RecordProperty(label + "_qualified_m", std::to_string(nc.qualification().m));
  if (nc.qualification().m == 0) {
    bool counted = false;
    for (const auto& f : contract::fallback_counts())
      counted |= f.optimization == "null_context_cache";
    EXPECT_TRUE(counted) << label << ": the cache did not qualify, but no fallback was counted";
  }
}

}  // namespace s3d::testing
