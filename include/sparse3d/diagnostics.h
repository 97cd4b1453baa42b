// sparse3d public API: measurements of the GPU the engine runs on, for benchmark reports
// (`sparse3d bench` computes its ideal time from them). measure_library_peaks needs a GPU and
// throws an Error on an engine without one. (The per-kernel bandwidths of `sparse3d
// bench-kernels` are the op registry's, not part of this API: docs/DESIGN.md, "Ops".)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sparse3d/engine.h"

namespace sparse3d {

// The libraries' bf16 rates at the engine model's shapes, measured now on its device: the
// best cuBLASLt GEMM of the two MLP shapes at M = max(tokens, 4096), and cuDNN SDPA
// self-attention over `tokens` tokens at the model's heads.
struct LibraryPeaks {
  double gemm_tflops = 0, attention_tflops = 0;
  std::string gemm_shape, attention_shape;
};
LibraryPeaks measure_library_peaks(Engine& engine, int64_t tokens);

// The cuBLASLt and cuDNN shapes this engine chose a searched plan for (flags tuned_gemm and
// tuned_attention; docs/CONTRACTS.md, "Searched plans"), in the order first seen: timed now
// ("searched") or restored from the qualification cache ("cache"). Empty when neither flag
// ran, and always on the CPU, which has no library plans (no error there).
struct SearchedPlan {
  std::string kind;    // "gemm" | "attention"
  std::string shape;   // as the cache keys it
  int candidates = 0;  // the library's list (at most 16)
  int timed = 0;       // of those, how many built, ran and were timed
  int index = 0;       // the chosen one, in the library's list
  double default_ms = 0, best_ms = 0;  // per call: the heuristic's first, the chosen
  std::string source;  // "searched" | "cache"
  double gain() const { return best_ms > 0 ? default_ms / best_ms : 1.0; }
};
std::vector<SearchedPlan> searched_plans(Engine& engine);

}  // namespace sparse3d
