// Calls of an Engine from inside its own request (include/sparse3d/engine.h): a step
// callback, EngineOptions::log and the message sink run while the request holds the
// engine's lock, on the request's thread. Read-only calls made there answer (the request is
// paused in the callback); calls that would start work or change the engine throw an Error
// naming the call at once, instead of waiting forever for the lock their own thread holds.
// Calls from other threads still wait for the request. Every request here runs on a helper
// thread that the test waits for at most a minute: a call that deadlocks ends the test
// program with a message rather than hanging ctest.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "engine_test_util.h"
#include "sparse3d/sparse3d.h"
#include "../model_inputs.h"

namespace {

namespace fs = std::filesystem;
using sparse3d::DType;
using sparse3d::Device;

const std::string& kTiny = s3d::test::kTinyCheckpoint;
using s3d::test::view;

// Runs fn on another thread and waits for it at most 60 s (a request here takes well under
// a second). A thread blocked on a mutex cannot be ended, so on time-out the program exits:
// the deadlock is a failure, not a hang.
void within_a_minute(const char* what, const std::function<void()>& fn) {
  auto done = std::make_shared<std::promise<void>>();
  std::future<void> finished = done->get_future();
  std::thread([done, &fn] {
    try {
      fn();
      done->set_value();
    } catch (...) {
      done->set_exception(std::current_exception());
    }
  }).detach();
  if (finished.wait_for(std::chrono::seconds(60)) != std::future_status::ready) {
    std::fprintf(stderr, "%s: not finished after 60 s: a call of the engine from inside its own "
                 "request deadlocked\n", what);
    std::fflush(stderr);
    std::_Exit(1);
  }
  finished.get();  // the thread's exception, if any
}

// The message of the Error fn throws ("" when it throws none).
std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const sparse3d::Error& e) {
    return e.what();
  }
  return "";
}

const char* const kInside = "called from inside a callback (a step callback or the log) of a "
                            "request running on the same engine";

struct EngineReentrancy : ::testing::Test {
  void SetUp() override {
    cache = (fs::temp_directory_path() /
             ("sparse3d_reentrancy_" + std::to_string(getpid()) + "_" +
              ::testing::UnitTest::GetInstance()->current_test_info()->name()))
                .string();
    fs::remove_all(cache);
    in = s3d::testing::synthetic_inputs({40}, 9, 64, 32, 3);
  }
  void TearDown() override { fs::remove_all(cache); }

  sparse3d::EngineOptions options(const std::string& path = "") const {
    return s3d::test::cpu_options(cache, path);
  }
  // 2 steps, CFG on both (so the null context is probed and qualified: log lines).
  sparse3d::SampleRequest request(uint64_t seed = 1) {
    sparse3d::SampleRequest r;
    r.coords = view(in.coords);
    r.batch = in.batch;
    r.cond = view(in.cond);
    r.seed = seed;
    r.sampler = sparse3d::SamplerSettings::protocol();
    r.sampler.steps = 2;
    return r;
  }
  sparse3d::ForwardRequest forward_request() {
    sparse3d::ForwardRequest f;
    noise = sparse3d::draw_noise(2, 40, 32);
    f.x = noise.view;
    f.t = {&t1000, DType::F32, Device::CPU, 0, {1}};
    f.coords = view(in.coords);
    f.cond = view(in.cond);
    return f;
  }

  // What each mutating call says when made from inside a request of `e`.
  std::vector<std::string> mutating_calls(sparse3d::Engine& e) {
    sparse3d::SampleRequest r = request();
    sparse3d::ForwardRequest f = forward_request();
    return {error_of([&] { e.sample(r); }), error_of([&] { e.forward(f); }),
            error_of([&] { e.warm_up({40}, 9); }), error_of([&] { e.offload(); }),
            error_of([&] { e.reload(); }), error_of([&] { e.reset_counters(); })};
  }
  static void expect_refused(const std::vector<std::string>& messages) {
    const char* names[] = {"sample()", "forward()", "warm_up()", "offload()", "reload()",
                           "reset_counters()"};
    ASSERT_EQ(messages.size(), 6u);
    for (size_t i = 0; i < messages.size(); ++i) {
      EXPECT_EQ(messages[i].rfind(names[i], 0), 0u) << messages[i];
      EXPECT_NE(messages[i].find(kInside), std::string::npos) << messages[i];
    }
  }

  std::string cache;
  s3d::sampler::Inputs in;
  sparse3d::Array noise;
  float t1000 = 1000.0f;
};

TEST_F(EngineReentrancy, ReadOnlyCallsAnswerFromAStepCallback) {
  sparse3d::Engine e(kTiny, options());
  std::vector<uint64_t> requests;
  std::vector<std::string> fits;
  std::vector<size_t> qualified, fingerprint;
  std::vector<bool> resident;
  std::vector<int> out_channels;
  std::vector<std::string> plans;
  sparse3d::SampleRequest r = request();
  r.on_step = [&](const sparse3d::StepInfo&) {
    requests.push_back(e.counters().requests);
    fits.push_back(e.fits(40, 1, 9, e.plan().flags()));
    qualified.push_back(e.qualification().size());
    fingerprint.push_back(e.fingerprint().size());
    resident.push_back(e.residency().resident);
    out_channels.push_back(e.model().out_channels);
    plans.push_back(e.plan().label());
    EXPECT_EQ(e.device(), Device::CPU);
  };
  within_a_minute("read-only calls from a step callback", [&] { e.sample(r); });
  // Both steps answered, with the values of the request in flight (it is counted when it
  // returns; it probed the null context of its L = 9 before the loop).
  EXPECT_EQ(requests, (std::vector<uint64_t>{0, 0}));
  EXPECT_EQ(fits, (std::vector<std::string>{"", ""}));
  EXPECT_EQ(qualified, (std::vector<size_t>{1, 1}));
  EXPECT_EQ(fingerprint.size(), 2u);
  EXPECT_GT(fingerprint[0], 0u);
  EXPECT_EQ(fingerprint[0], e.fingerprint().size());
  EXPECT_EQ(resident, (std::vector<bool>{true, true}));
  EXPECT_EQ(out_channels, (std::vector<int>{32, 32}));
  EXPECT_EQ(plans, (std::vector<std::string>{e.plan().label(), e.plan().label()}));
  EXPECT_EQ(e.counters().requests, 1u);
}

TEST_F(EngineReentrancy, MutatingCallsFromAStepCallbackThrowAtOnce) {
  sparse3d::Engine e(kTiny, options());
  std::vector<std::string> messages;
  sparse3d::SampleRequest r = request();
  r.on_step = [&](const sparse3d::StepInfo& s) {
    if (s.index == 0) messages = mutating_calls(e);
  };
  within_a_minute("mutating calls from a step callback", [&] { e.sample(r); });
  expect_refused(messages);
  // Nothing was changed by the refused calls, and the engine serves the next request.
  EXPECT_EQ(e.counters().requests, 1u);
  EXPECT_TRUE(e.residency().resident);
  EXPECT_EQ(e.residency().offloads, 0u);
  sparse3d::SampleRequest again = request();
  within_a_minute("a request after the refused calls", [&] { e.sample(again); });
  EXPECT_EQ(e.counters().requests, 2u);
}

TEST_F(EngineReentrancy, TheLogCallsTheEngineDuringARequestAndAnOffload) {
  sparse3d::Engine* self = nullptr;  // set once constructed: the constructor logs too
  std::vector<std::string> lines;
  std::vector<uint64_t> requests;
  std::vector<std::vector<std::string>> refused;
  sparse3d::EngineOptions o = options();
  o.log = [&](const std::string& line) {
    lines.push_back(line);
    if (self == nullptr) return;
    requests.push_back(self->counters().requests);
    EXPECT_TRUE(self->fits(40, 1, 9, self->plan().flags()).empty());
    self->qualification();
    self->residency();
    self->fingerprint();
    refused.push_back(mutating_calls(*self));
  };
  sparse3d::Engine e(kTiny, o);
  self = &e;
  const size_t startup = lines.size();
  sparse3d::SampleRequest r = request();
  within_a_minute("the log during a request", [&] { e.sample(r); });
  // A fresh cache: the request probed and qualified the null context, and logged both.
  ASSERT_GT(lines.size(), startup);
  ASSERT_EQ(refused.size(), lines.size() - startup);
  for (const auto& messages : refused) expect_refused(messages);
  // offload() logs while it holds the lock too.
  within_a_minute("the log during offload()", [&] { e.offload(); });
  EXPECT_NE(lines.back().find("weights offloaded"), std::string::npos) << lines.back();
  expect_refused(refused.back());
  EXPECT_FALSE(e.residency().resident);
  EXPECT_EQ(e.residency().offloads, 1u);  // the log's offload() was refused, not run
  self = nullptr;
}

TEST_F(EngineReentrancy, TheMessageSinkCallsTheEngine) {
  // Path beyond asks for CUDA graphs, which the CPU backend refuses: a fallback message,
  // sent from the request's thread while it holds the lock.
  sparse3d::Engine e(kTiny, options("beyond"));
  std::vector<std::string> texts;
  std::vector<size_t> fallbacks;
  std::vector<std::vector<std::string>> refused;
  sparse3d::set_message_sink([&](const sparse3d::Message& m) {
    texts.push_back(m.text);
    fallbacks.push_back(e.counters().fallbacks.size());
    refused.push_back(mutating_calls(e));
  });
  sparse3d::SampleRequest r = request();
  std::string failure;
  within_a_minute("the message sink during a request", [&] {
    try {
      e.sample(r);
    } catch (const std::exception& x) {
      failure = x.what();
    }
  });
  sparse3d::set_message_sink({});
  EXPECT_EQ(failure, "");
  ASSERT_EQ(texts.size(), 1u);
  EXPECT_EQ(texts[0], "cuda_graphs: the CPU backend has no CUDA graphs");
  EXPECT_EQ(fallbacks, (std::vector<size_t>{1}));  // counted before it was sent
  expect_refused(refused[0]);
}

TEST_F(EngineReentrancy, CallsFromOtherThreadsStillWaitForTheRequest) {
  sparse3d::Engine e(kTiny, options());
  std::future<uint64_t> other;
  bool waited = false;
  sparse3d::SampleRequest r = request();
  r.on_step = [&](const sparse3d::StepInfo& s) {
    if (s.index != 0) return;
    // Another thread's counters() waits for the request (one at a time), rather than reading
    // beside it or being refused.
    other = std::async(std::launch::async, [&] { return e.counters().requests; });
    waited = other.wait_for(std::chrono::milliseconds(300)) == std::future_status::timeout;
  };
  within_a_minute("another thread's call during a request", [&] {
    e.sample(r);
    EXPECT_EQ(other.get(), 1u);  // answered once the request had returned
  });
  EXPECT_TRUE(waited);
}

TEST_F(EngineReentrancy, FitsRefusesCountsThatDescribeNoRequest) {
  sparse3d::Engine e(kTiny, options());
  const sparse3d::FlagSet flags = e.plan().flags();
  EXPECT_EQ(error_of([&] { e.fits(-1, 1, 37, flags); }), "fits: tokens must be >= 1, got -1");
  EXPECT_EQ(error_of([&] { e.fits(0, 1, 37, flags); }), "fits: tokens must be >= 1, got 0");
  EXPECT_EQ(error_of([&] { e.fits(40, 0, 37, flags); }), "fits: batch must be >= 1, got 0");
  EXPECT_EQ(error_of([&] { e.fits(40, 1, 0, flags); }), "fits: cond_tokens must be >= 1, got 0");
  EXPECT_EQ(error_of([&] { e.fits(20, 21, 37, flags); }),
            "fits: 21 assets need at least one token each, got 20 tokens");
  EXPECT_EQ(e.fits(40, 1, 37, flags), "");
  EXPECT_EQ(e.fits(21, 21, 37, flags), "");
}

}  // namespace
