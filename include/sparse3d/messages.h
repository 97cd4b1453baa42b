// sparse3d public API: where the engine's messages go.
//
// The engine says little on its own: the first time a fast path is refused for a reason in
// an Engine (a fallback, docs/CONTRACTS.md "Fallback accounting"), it sends one message.
// By default a message is one line on stderr ("fallback: FLAG: REASON"), as the `sparse3d`
// command prints it; a program that has its own logging installs a sink instead (the Python
// package forwards them to its "sparse3d_engine" logger). Start-up lines are not messages:
// they go to EngineOptions::log.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace sparse3d {

enum class MessageLevel : uint8_t { Info, Warning };

struct Message {
  MessageLevel level = MessageLevel::Warning;
  std::string kind;  // what it is about: "fallback"
  std::string text;  // the line without the kind: "cuda_graphs: the CPU backend has no ..."
  // For a fallback: the refused flag's name and why (as Engine::counters() lists them).
  std::string optimization, reason;
};

// Called on the thread that sent the message (the thread running the request), possibly
// from several threads at once (one per Engine serving a request); it must not throw.
using MessageSink = std::function<void(const Message&)>;

// Installs the process-wide sink and returns the one it replaces; an empty sink restores
// the default, write_to_stderr. Thread-safe: a message being delivered while the sink is
// replaced goes to the old one.
MessageSink set_message_sink(MessageSink sink);

// The default sink: "KIND: TEXT\n" on stderr, flushed.
void write_to_stderr(const Message& message);

}  // namespace sparse3d
