// Searched library plans (flags tuned_gemm and tuned_attention, docs/CONTRACTS.md "Searched
// plans"): instead of the heuristic's first cuBLASLt algorithm or cuDNN execution plan, each
// shape's candidates are timed once on the call's own operands and the fastest is kept.
//
// This header is what gemm and attention share: the call's Search (which the op table's
// `linear` and `attention` rows pass down), the store a choice is persisted in (the engine's
// qualification cache implements it), the timing rule, and the report of every searched shape.
// The CPU backend has no library plans: nothing here has an effect there.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace s3d::plan_search {

// At most this many candidates are timed per shape: the libraries' heuristics rank their
// lists, and past the first dozen or so the entries are rarely faster but cost start-up time.
constexpr int kMaxCandidates = 16;
// Per candidate: untimed calls (clocks, caches, lazy module loads), then timed calls
// averaged between two events on the call's stream.
constexpr int kWarmupCalls = 2;
constexpr int kTimedCalls = 10;
// A candidate replaces the default only when it is faster by more than this fraction:
// below it, the difference is within run-to-run noise and the choice would flip between
// processes for nothing.
constexpr double kMinGain = 0.02;

enum class Kind { Gemm, Attention };
const char* kind_name(Kind k);  // "gemm" | "attention"

// What a search decided for one shape: the chosen candidate by its index in the library's
// list (deterministic for a fixed library, GPU and shape), and the two per-call times.
struct Choice {
  int index = 0;
  int candidates = 0;        // how many the library offered (at most kMaxCandidates)
  int timed = 0;             // how many ran and were timed (the others failed to build/run)
  std::string variant;       // attention: the cuDNN SDPA implementation ("unified", ...)
  double default_ms = 0;     // the heuristic's first candidate, per call
  double best_ms = 0;        // the chosen one, per call
};

// Where a choice came from.
enum class Source { Searched, Cache };
const char* source_name(Source s);  // "searched" | "cache"

// One line of the report: a searched (or restored) shape.
struct Row {
  Kind kind = Kind::Gemm;
  std::string shape;
  Choice choice;
  Source source = Source::Searched;
  double gain() const;  // default_ms / best_ms (1 when not measured)
};

// Persistence of choices, keyed by (kind, shape) under the environment the implementation
// knows (the engine's: contract::context_fingerprint()).
class Store {
 public:
  virtual ~Store() = default;
  virtual std::optional<Choice> find_plan(Kind kind, const std::string& shape) = 0;
  virtual void store_plan(Kind kind, const std::string& shape, const Choice& choice) = 0;
  // A found choice the library could not use (its list is shorter than the stored index, or
  // the plan does not build): counted like a refused cache entry; the shape is searched again.
  virtual void refuse_plan(Kind kind, const std::string& shape, const std::string& why) = 0;
};

// One call's search: whether it searches its library plan (flag tuned_gemm or
// tuned_attention, resolved into the request's op plan: src/ops, rows `linear` and
// `attention`), and where a choice is kept (the engine's qualification cache; null: nowhere
// but this process). Passed with the call, never read from the context.
struct Search {
  bool on = false;
  Store* store = nullptr;
};

// Whether work on `stream` is being captured into a CUDA graph (a search cannot time there).
bool capturing(cudaStream_t stream);

// Per-call milliseconds of `launch` on `stream`: kWarmupCalls untimed, then kTimedCalls
// between two events. `launch` returns false when the candidate refuses to run (nothing is
// timed then: nullopt). Synchronises the stream; never call it during a capture.
std::optional<double> time_per_call(const std::function<bool()>& launch, cudaStream_t stream);

// The index a search keeps: the fastest of `ms` (negative: not timed), unless it beats the
// default (index `default_index`) by no more than kMinGain. -1 when nothing was timed.
int choose(const std::vector<double>& ms, int default_index);

// The current context's report: one row per (kind, shape), in the order first searched; a
// shape searched again replaces its row.
void record(const Row& row);
std::vector<Row> report();
void reset_report();

// The report as an aligned text table (header + one line per row), "" when empty.
std::string format_report(const std::vector<Row>& rows);

}  // namespace s3d::plan_search
