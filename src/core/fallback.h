// Fallback counters (docs/CONTRACTS.md): every time a fast path is refused and a slower exact
// path runs instead, the counter keyed by (flag, reason) of the current context (one per
// Engine, core/context.h) goes up. The first hit of each key is sent as a message (the sink
// of sparse3d/messages.h: stderr by default, the Python package's logger); `run` and
// `bench` print the counters at the end, so that a fast path that silently stopped applying
// shows up as a line, not as a latency regression nobody explains. In core so that every
// layer that can refuse a fast path (kernels, gemm, model, sampler) counts it the same way.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sparse3d/flags.h"
#include "sparse3d/messages.h"

namespace s3d {

using FallbackCount = sparse3d::FallbackCount;

// Counts one fallback of `flag`; sends the message "fallback: FLAG: REASON" (send_message)
// the first time the key is seen in the current context. Thread-safe.
void record_fallback(sparse3d::Flag flag, const std::string& reason);
// The same for an optimization that is an engine option, not a flag (sequence_parallel:
// EngineOptions::devices), counted and reported the same way under its name.
void record_fallback(const std::string& optimization, const std::string& reason);

// Delivers `message` to the process-wide sink (sparse3d::set_message_sink). Call it holding
// no lock: a sink may wait for another (the Python package's takes the interpreter's lock).
void send_message(const sparse3d::Message& message);

// The current context's counters so far, sorted by (optimization, reason).
std::vector<FallbackCount> fallback_counts();

// Adds `counts` to the current context's counters without sending messages (their first
// hits were sent where they were counted): how the engine gathers what its further devices'
// contexts counted during a request split over them.
void add_fallback_counts(const std::vector<FallbackCount>& counts);

// Forgets the current context's counters (and which keys were logged).
void reset_fallbacks();

// "  null_context_cache: no candidate M ... (3x)" per counter, or "  none"; for run and bench.
std::string format_fallbacks(const std::vector<FallbackCount>& counts);

}  // namespace s3d
