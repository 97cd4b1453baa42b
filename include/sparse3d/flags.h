// sparse3d public API: optimization flags and execution paths (docs/CONTRACTS.md, "Execution paths" and "Flags").
//
// Every optimization is one Flag. A path is a named FlagSet (pure_eager = none, ...,
// beyond = all accepted ones). This list is the only place flags are spelled: the CLI's
// --enable/--disable, the bench's path specs ("beyond-cuda_graphs"), result JSON and the
// engine all read it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace sparse3d {

// X(name): the flag's enumerator and its spelling everywhere (CLI, JSON, reports).
#define SPARSE3D_FLAGS(X)        \
  X(batched_cfg)                 \
  X(null_context_exact)          \
  X(null_context_cache)          \
  X(cond_kv_cache)               \
  X(step_tables)                 \
  X(cuda_graphs)                 \
  X(qk_rmsnorm_rope_inplace)     \
  X(modulated_layernorm)         \
  X(gated_residual_add)          \
  X(qk_rmsnorm_cross_inplace)    \
  X(gelu_tanh)                   \
  X(gemm_gelu_epilogue)          \
  X(fast_modulated_layernorm)    \
  X(fast_qk_rmsnorm_rope)        \
  X(fast_qk_rmsnorm_cross)       \
  X(tuned_gemm)                  \
  X(tuned_attention)             \
  X(chunked_mlp)

enum class Flag : uint8_t {
#define SPARSE3D_FLAG_ENUM(name) name,
  SPARSE3D_FLAGS(SPARSE3D_FLAG_ENUM)
#undef SPARSE3D_FLAG_ENUM
};

inline constexpr int kFlagCount = 0
#define SPARSE3D_FLAG_COUNT(name) +1
    SPARSE3D_FLAGS(SPARSE3D_FLAG_COUNT)
#undef SPARSE3D_FLAG_COUNT
    ;

struct FlagInfo {
  Flag flag;
  std::string_view name;
  std::string_view help;      // one line: what it does
  std::string_view contract;  // "bitwise" or the tolerance it is held to
  int calls_per_step = 0;     // calls per denoise step it changes (full preset), 0 = n/a
};

// Every flag, in declaration order.
const std::vector<FlagInfo>& flag_infos();
const FlagInfo& info(Flag flag);
std::string_view name(Flag flag);
// Throws Error naming the known flags when `name` is not one. An earlier spelling is read
// as the flag's name now (fast_head_rmsnorm: fast_qk_rmsnorm_cross).
Flag parse_flag(std::string_view name);

class FlagSet {
 public:
  FlagSet() = default;
  FlagSet(std::initializer_list<Flag> flags) {
    for (Flag f : flags) set(f);
  }
  bool on(Flag f) const { return (bits_ >> static_cast<int>(f)) & 1u; }
  FlagSet& set(Flag f, bool value = true) {
    const uint32_t bit = 1u << static_cast<int>(f);
    bits_ = value ? bits_ | bit : bits_ & ~bit;
    return *this;
  }
  // Every flag of `other` on as well.
  FlagSet& set(const FlagSet& other) {
    bits_ |= other.bits_;
    return *this;
  }
  bool any() const { return bits_ != 0; }
  std::vector<Flag> flags() const;  // the flags that are on, in declaration order
  uint32_t bits() const { return bits_; }
  bool operator==(const FlagSet& o) const { return bits_ == o.bits_; }
  bool operator!=(const FlagSet& o) const { return bits_ != o.bits_; }

 private:
  uint32_t bits_ = 0;
};

struct PathInfo {
  std::string_view name;
  std::string_view help;  // one line
  FlagSet flags;          // on in this path
};

// Every execution path, from the reference (pure_eager) to the fastest (fast).
const std::vector<PathInfo>& execution_paths();
// The fastest path whose contracts hold on a GPU (what `sparse3d run` uses by default).
std::string_view default_path();

// A path plus edits: "beyond-cuda_graphs", "pure_eager+batched_cfg".
class ExecutionPlan {
 public:
  // Throws Error naming the known paths/flags for an unknown one.
  static ExecutionPlan of_path(std::string_view path);
  static ExecutionPlan parse(std::string_view spec);

  ExecutionPlan& enable(Flag f) { flags_.set(f, true); return *this; }
  ExecutionPlan& disable(Flag f) { flags_.set(f, false); return *this; }
  ExecutionPlan& set(Flag f, bool on) { flags_.set(f, on); return *this; }
  bool on(Flag f) const { return flags_.on(f); }
  const FlagSet& flags() const { return flags_; }
  const std::string& path() const { return path_; }
  // Canonical spelling: the path, then "+flag" for each flag the path lacks and "-flag" for
  // each it has that is off. parse(label()) gives the same plan.
  std::string label() const;

 private:
  std::string path_;
  FlagSet flags_;
};

// A fast path refused at run time, with why and how often (Engine::counters(); the bench's
// result files). Here rather than in engine.h so that every layer counting them uses the type.
struct FallbackCount {
  std::string optimization;  // the refused flag's name (name(Flag)), e.g. null_context_cache
  std::string reason;        // why, in words a user can act on
  uint64_t count = 0;
};

}  // namespace sparse3d
