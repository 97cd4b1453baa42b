// The one list of optimization flags and execution paths (include/sparse3d/flags.h). Every
// flag's spelling comes from the SPARSE3D_FLAGS X-macro, so the enum, the CLI, the bench's
// result JSON and the reports cannot disagree about a name.
#include "sparse3d/flags.h"

#include <iterator>

#include "core/error.h"

namespace sparse3d {
namespace {

// Spellings in declaration order, indexed by the enum's value.
constexpr std::string_view kFlagNames[] = {
#define SPARSE3D_FLAG_NAME(name) #name,
    SPARSE3D_FLAGS(SPARSE3D_FLAG_NAME)
#undef SPARSE3D_FLAG_NAME
};
static_assert(std::size(kFlagNames) == kFlagCount);

constexpr std::string_view kBitwise = "bitwise";

FlagInfo entry(Flag f, std::string_view help, std::string_view contract, int calls_per_step) {
  return FlagInfo{f, kFlagNames[static_cast<int>(f)], help, contract, calls_per_step};
}

// The fp64-golden rule of the tolerance kernels (docs/CONTRACTS.md, "Tolerance kernels").
constexpr std::string_view kGoldenRule =
    "tolerance: per call, mean |fp64 - fast| <= 1.1 mean |fp64 - reference path|, no NaN/Inf; "
    "final latent rel L2 <= 2e-2 of pure_eager";

// calls_per_step counts for the full 30-block preset (one cross-attention per block); the
// fused-kernel counts are per denoise step in serial CFG (two forwards per step).

// How the loop runs: CFG batching, the null context, hoisted work, graphs.
std::vector<FlagInfo> loop_flags() {
  using F = Flag;
  return {
      entry(F::batched_cfg,
            "both CFG branches as one varlen batch of 2B assets (GEMM M doubles, launches "
            "halve); tolerance contract against serial CFG",
            "tolerance: latent rel L2 <= 3e-2 of the CPU latent against serial CFG (GEMMs at "
            "another M)",
            1),
      entry(F::null_context_exact,
            "symbolic null condition: the unconditional cross-attention (norm2, to_q, to_kv, "
            "SDPA) is not run; its output rows are v0 = V of the null condition, projected by "
            "the reference-shaped to_out; bitwise contract",
            kBitwise, 30),
      entry(F::null_context_cache,
            "the unconditional cross-attention output is the cached row c = to_out(v0), "
            "computed at start-up on a canonical M-row input and qualified bitwise; falls back "
            "to null_context_exact",
            kBitwise, 30),
      entry(F::cond_kv_cache,
            "the condition's to_kv projection (and K RMSNorm) once per request instead of "
            "every step; same GEMM shapes, bitwise contract",
            kBitwise, 30),
      entry(F::step_tables,
            "every step's t-only work (timestep embedding, t MLP, adaLN, each block's "
            "modulation) for the whole schedule in one call before the loop (the t-side GEMMs "
            "at M = steps x 2B), one contiguous buffer per step; tolerance contract: per step "
            "and block, relative L2 <= 2^-8 against the forward's own modulation (cuBLASLt may "
            "sum in another order at the larger M; bitwise on the CPU)",
            "tolerance: modulation rel L2 <= 2^-8 per step and block against the forward's "
            "own; final latent rel L2 <= 1e-2 (bitwise on the CPU)",
            134),
      entry(F::cuda_graphs,
            "per request, each step kind's forwards (both CFG branches and the CFG "
            "combination) captured as one CUDA graph after every kind ran once, replayed for "
            "the later steps from fixed input buffers and a private allocator pool; bitwise "
            "contract against the eager forwards",
            kBitwise, 1),
  };
}

// The engine's own kernels: the bitwise fused ones and their tolerance twins.
std::vector<FlagInfo> kernel_flags() {
  using F = Flag;
  return {
      entry(F::qk_rmsnorm_rope_inplace,
            "self-attention q/k per-head RMSNorm and RoPE in one kernel, in place in the "
            "packed QKV (no split, no temporaries, no restack); bitwise contract",
            kBitwise, 60),
      entry(F::modulated_layernorm,
            "LayerNorm + (1 + scale[b]) * h + shift[b] in one kernel, scale/shift read by "
            "batch index from the [B, 6C] modulation (no gathered [T, C] tensors); bitwise "
            "contract",
            kBitwise, 120),
      entry(F::gated_residual_add, "x + gate[b] * h in one kernel; bitwise contract", kBitwise,
            120),
      entry(F::qk_rmsnorm_cross_inplace,
            "cross-attention q per-head RMSNorm in place (K keeps the reference op: its layout "
            "is shared with the condition K/V cache); bitwise contract. Rejected (off in every "
            "path): no measurable gain in the H200 leave-one-out of 2026-11-29",
            kBitwise, 60),
      entry(F::gelu_tanh,
            "the standalone GELU as a wider kernel (two 16-byte chunks per thread); same "
            "rounding points, bitwise; no effect when gemm_gelu_epilogue is on (which replaces "
            "it in every path)",
            kBitwise, 60),
      entry(F::gemm_gelu_epilogue,
            "MLP fc1 with the cuBLASLt bias+GELU epilogue (one rounding instead of two): "
            "bounded error, not bitwise",
            "tolerance: per element |y' - y| <= 1.13 ulp(u) + ulp(max(|y|, |y'|)), rel L2 <= "
            "2^-8, fp64-golden rule; final latent rel L2 <= 2e-2 of pure_eager",
            60),
      entry(F::fast_modulated_layernorm,
            "modulated LayerNorm written for bandwidth: one warp per token row, the row read "
            "once into registers, fp32 statistics, one rounding per element (the bitwise "
            "modulated_layernorm keeps the reference's fp64 sums and four roundings)",
            kGoldenRule, 120),
      entry(F::fast_qk_rmsnorm_rope,
            "self-attention q/k RMSNorm + RoPE in place, written for bandwidth: 8 lanes per "
            "head, every load issued before the reduction, fp32 sum of squares, one rounding "
            "per element (the bitwise qk_rmsnorm_rope_inplace keeps fp64 sums and two "
            "roundings)",
            kGoldenRule, 60),
      entry(F::fast_qk_rmsnorm_cross,
            "cross-attention q RMSNorm in place with the fast kernel (fp32 sum of squares, "
            "one rounding); the condition's K keeps the reference op",
            kGoldenRule, 60),
  };
}

// The libraries' plans and the memory-bounded MLP.
std::vector<FlagInfo> library_and_memory_flags() {
  using F = Flag;
  return {
      entry(F::tuned_gemm,
            "every cuBLASLt GEMM shape searched once over the heuristic's candidate "
            "algorithms, timed, the fastest kept (persisted in the qualification cache); "
            "another algorithm sums in another order",
            "tolerance: rel L2 <= 1e-2 per GEMM against the default algorithm; final latent "
            "rel L2 <= 2e-2 of pure_eager",
            420),
      entry(F::tuned_attention,
            "every cuDNN SDPA graph built with each engine config cuDNN offers, timed, the "
            "fastest kept (persisted in the qualification cache)",
            "tolerance: rel L2 <= 1e-2 per attention against the default plan; final latent "
            "rel L2 <= 2e-2 of pure_eager",
            120),
      entry(F::chunked_mlp,
            "the MLP (norm, fc1 + GELU, fc2, gated residual) over token chunks of at most "
            "8,192 rows: the [T, 4C] hidden never exists whole; the GEMMs run at another M",
            "tolerance: rel L2 <= 1e-2 per block against the unchunked MLP; final latent rel "
            "L2 <= 2e-2 of pure_eager",
            60),
  };
}

std::vector<FlagInfo> make_flag_infos() {
  std::vector<FlagInfo> v = loop_flags();
  for (auto part : {kernel_flags(), library_and_memory_flags()})
    v.insert(v.end(), part.begin(), part.end());
  // info(f) indexes this list by the enum's value: a missing or misplaced entry is a bug.
  S3D_CHECK(v.size() == static_cast<size_t>(kFlagCount), "flag list: ", v.size(),
            " entries for ", kFlagCount, " flags");
  for (size_t i = 0; i < v.size(); ++i)
    S3D_CHECK(static_cast<size_t>(v[i].flag) == i, "flag list: entry ", i, " is ", v[i].name);
  return v;
}

template <class Items, class Name>
std::string join_names(const Items& items, Name name) {
  std::string s;
  for (const auto& item : items) s += std::string(s.empty() ? "" : ", ") + std::string(name(item));
  return s;
}

std::vector<PathInfo> make_paths() {
  using F = Flag;
  const FlagSet fusion = {F::qk_rmsnorm_rope_inplace, F::modulated_layernorm,
                          F::gated_residual_add, F::gemm_gelu_epilogue};
  const FlagSet combined = FlagSet(fusion).set(F::null_context_cache);
  const FlagSet beyond = FlagSet(combined)
                             .set(F::cond_kv_cache)
                             .set(F::batched_cfg)
                             .set(F::step_tables)
                             .set(F::cuda_graphs);
  // The searched plans (tuned_gemm, tuned_attention) are in no path: on the H200 they gained
  // nothing measurable over the libraries' heuristics (leave-one-out, 2026-11-30) and a search
  // costs a request its first sight of every new shape (docs/CONTRACTS.md, "First requests").
  const FlagSet fast_kernels = {F::fast_modulated_layernorm, F::fast_qk_rmsnorm_rope,
                                F::fast_qk_rmsnorm_cross};
  return {
      {"pure_eager", "every op its own kernel, at the rounding points of the PyTorch original",
       {}},
      {"kernel_fusion",
       "fused kernels + cuBLASLt bias+GELU epilogue (the accepted candidates; gelu_tanh and "
       "qk_rmsnorm_cross_inplace stay off)",
       fusion},
      {"prior_exact_null", "unconditional cross-attention removed, reference-shaped projection",
       {F::null_context_exact}},
      {"canonical_cache_null",
       "unconditional cross-attention = cached canonical row (qualified; else prior_exact_null)",
       {F::null_context_cache}},
      {"canonical_cache_combined", "kernel_fusion + canonical_cache_null", combined},
      {"beyond",
       "canonical_cache_combined + the condition K/V cache + batched CFG + step tables + "
       "per-request CUDA graphs",
       beyond},
      {"fast",
       "beyond + the tolerance kernels (fast_*)",
       FlagSet(beyond).set(fast_kernels)},
      {"low_memory",
       "fast without the memory-costly flags (batched CFG, condition K/V cache) and with the "
       "MLP in token chunks: the least device memory",
       FlagSet(beyond)
           .set(fast_kernels)
           .set(F::batched_cfg, false)
           .set(F::cond_kv_cache, false)
           .set(F::chunked_mlp)},
  };
}

}  // namespace

const std::vector<FlagInfo>& flag_infos() {
  static const std::vector<FlagInfo> infos = make_flag_infos();
  return infos;
}

const FlagInfo& info(Flag flag) {
  const auto i = static_cast<size_t>(flag);
  S3D_CHECK(i < flag_infos().size(), "optimization flag #", i, " does not exist (",
            kFlagCount, " flags)");
  return flag_infos()[i];
}

std::string_view name(Flag flag) { return info(flag).name; }

Flag parse_flag(std::string_view name) {
  for (const FlagInfo& f : flag_infos())
    if (f.name == name) return f.flag;
  // Earlier spellings, read in result files written before a flag took its op's name.
  if (name == "fast_head_rmsnorm") return Flag::fast_qk_rmsnorm_cross;
  s3d::fail("unknown optimization flag '", name, "' (known: ",
            join_names(flag_infos(), [](const FlagInfo& f) { return f.name; }), ")");
}

std::vector<Flag> FlagSet::flags() const {
  std::vector<Flag> v;
  for (const FlagInfo& f : flag_infos())
    if (on(f.flag)) v.push_back(f.flag);
  return v;
}

const std::vector<PathInfo>& execution_paths() {
  static const std::vector<PathInfo> paths = make_paths();
  return paths;
}

std::string_view default_path() { return "fast"; }

ExecutionPlan ExecutionPlan::of_path(std::string_view path) {
  for (const PathInfo& p : execution_paths()) {
    if (p.name != path) continue;
    ExecutionPlan plan;
    plan.path_ = std::string(p.name);
    plan.flags_ = p.flags;
    return plan;
  }
  s3d::fail("unknown execution path '", path, "' (known: ",
            join_names(execution_paths(), [](const PathInfo& p) { return p.name; }), ")");
}

ExecutionPlan ExecutionPlan::parse(std::string_view spec) {
  size_t cut = spec.find_first_of("+-");
  ExecutionPlan plan = of_path(spec.substr(0, cut));
  while (cut != std::string_view::npos) {
    const char sign = spec[cut];
    const size_t next = spec.find_first_of("+-", cut + 1);
    const std::string_view flag =
        spec.substr(cut + 1, next == std::string_view::npos ? next : next - cut - 1);
    plan.set(parse_flag(flag), sign == '+');
    cut = next;
  }
  return plan;
}

std::string ExecutionPlan::label() const {
  const FlagSet base = of_path(path_).flags();
  std::string s = path_;
  for (const FlagInfo& f : flag_infos()) {
    if (on(f.flag) == base.on(f.flag)) continue;
    s += on(f.flag) ? '+' : '-';
    s += f.name;
  }
  return s;
}

}  // namespace sparse3d
