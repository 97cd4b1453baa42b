#include "core/fallback.h"

#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <utility>

#include "core/context.h"
#include "core/error.h"

namespace s3d {
namespace {

struct Registry {
  std::mutex mu;
  std::map<std::pair<std::string, std::string>, uint64_t> counts;
};

Registry& registry() { return current_context().state<Registry>(); }

// The process-wide message sink. Held through a shared_ptr that a delivery copies: a sink
// replaced while a message is on its way lives until that delivery returns.
struct Sink {
  std::mutex mu;
  std::shared_ptr<const sparse3d::MessageSink> fn;  // null: write_to_stderr
};

Sink& sink() {
  static Sink* s = new Sink;  // never destroyed: messages may come during static destruction
  return *s;
}

}  // namespace

void send_message(const sparse3d::Message& message) {
  std::shared_ptr<const sparse3d::MessageSink> fn;
  {
    std::lock_guard<std::mutex> lock(sink().mu);
    fn = sink().fn;
  }
  if (fn) {
    (*fn)(message);
  } else {
    sparse3d::write_to_stderr(message);
  }
}

void record_fallback(sparse3d::Flag flag, const std::string& reason) {
  // Keyed by the flag's name, so that the counters sort (and print) by name.
  record_fallback(std::string(sparse3d::name(flag)), reason);
}

void record_fallback(const std::string& optimization, const std::string& reason) {
  Registry& r = registry();
  bool first = false;
  {
    std::lock_guard<std::mutex> lock(r.mu);
    first = r.counts[{optimization, reason}]++ == 0;
  }
  if (!first) return;
  sparse3d::Message m;
  m.level = sparse3d::MessageLevel::Warning;
  m.kind = "fallback";
  m.text = optimization + ": " + reason;
  m.optimization = optimization;
  m.reason = reason;
  send_message(m);
}

std::vector<FallbackCount> fallback_counts() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<FallbackCount> out;
  for (const auto& [key, n] : r.counts) out.push_back(FallbackCount{key.first, key.second, n});
  return out;
}

void reset_fallbacks() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.counts.clear();
}

void add_fallback_counts(const std::vector<FallbackCount>& counts) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  for (const auto& c : counts) r.counts[{c.optimization, c.reason}] += c.count;
}

std::string format_fallbacks(const std::vector<FallbackCount>& counts) {
  if (counts.empty()) return "  none\n";
  std::string s;
  for (const auto& c : counts)
    s += cat("  ", c.optimization, ": ", c.reason, " (", c.count, "x)\n");
  return s;
}

}  // namespace s3d

namespace sparse3d {

MessageSink set_message_sink(MessageSink sink) {
  auto fresh = sink ? std::make_shared<const MessageSink>(std::move(sink)) : nullptr;
  std::shared_ptr<const MessageSink> old;
  {
    std::lock_guard<std::mutex> lock(s3d::sink().mu);
    old = std::exchange(s3d::sink().fn, std::move(fresh));
  }
  return old ? *old : MessageSink();
}

void write_to_stderr(const Message& message) {
  std::fprintf(stderr, "%s: %s\n", message.kind.c_str(), message.text.c_str());
  std::fflush(stderr);
}

}  // namespace sparse3d
