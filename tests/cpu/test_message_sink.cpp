// The message sink (sparse3d/messages.h): fallbacks reach an installed sink once per key
// and context, the previous sink comes back, and an empty sink restores stderr.
#include <gtest/gtest.h>

#include <algorithm>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/fallback.h"
#include "sparse3d/messages.h"

namespace {

struct Collected {
  std::mutex mu;
  std::vector<sparse3d::Message> messages;
};

sparse3d::MessageSink collect_into(Collected& c) {
  return [&c](const sparse3d::Message& m) {
    std::lock_guard<std::mutex> lock(c.mu);
    c.messages.push_back(m);
  };
}

TEST(MessageSink, AFallbackReachesTheInstalledSinkOncePerKey) {
  s3d::reset_fallbacks();
  Collected c;
  sparse3d::MessageSink before = sparse3d::set_message_sink(collect_into(c));
  s3d::record_fallback(sparse3d::Flag::cuda_graphs, "no graphs on this backend");
  s3d::record_fallback(sparse3d::Flag::cuda_graphs, "no graphs on this backend");
  s3d::record_fallback(sparse3d::Flag::cuda_graphs, "another reason");
  sparse3d::MessageSink mine = sparse3d::set_message_sink(before);
  ASSERT_TRUE(static_cast<bool>(mine));
  ASSERT_EQ(c.messages.size(), 2u);  // the repeated key is counted, not sent again
  EXPECT_EQ(c.messages[0].kind, "fallback");
  EXPECT_EQ(c.messages[0].level, sparse3d::MessageLevel::Warning);
  EXPECT_EQ(c.messages[0].reason, "no graphs on this backend");
  EXPECT_NE(c.messages[0].text.find("no graphs on this backend"), std::string::npos);
  EXPECT_EQ(c.messages[1].reason, "another reason");
  EXPECT_EQ(c.messages[0].optimization, c.messages[1].optimization);
  // All three are counted.
  int64_t total = 0;
  for (const auto& f : s3d::fallback_counts()) total += f.count;
  EXPECT_EQ(total, 3);
  s3d::reset_fallbacks();
}

TEST(MessageSink, AnEmptySinkRestoresStderr) {
  s3d::reset_fallbacks();
  Collected c;
  sparse3d::MessageSink before = sparse3d::set_message_sink(collect_into(c));
  sparse3d::set_message_sink({});  // back to the default
  testing::internal::CaptureStderr();
  s3d::record_fallback(sparse3d::Flag::cuda_graphs, "to stderr");
  const std::string err = testing::internal::GetCapturedStderr();
  sparse3d::set_message_sink(before);
  EXPECT_TRUE(c.messages.empty());
  EXPECT_NE(err.find("fallback: "), std::string::npos) << err;
  EXPECT_NE(err.find("to stderr"), std::string::npos) << err;
  s3d::reset_fallbacks();
}

TEST(MessageSink, MessagesFromSeveralThreadsAllArrive) {
  Collected c;
  sparse3d::MessageSink before = sparse3d::set_message_sink(collect_into(c));
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i)
    threads.emplace_back([i] {
      sparse3d::Message m;
      m.kind = "test";
      m.text = "thread " + std::to_string(i);
      s3d::send_message(m);
    });
  for (auto& t : threads) t.join();
  sparse3d::set_message_sink(before);
  ASSERT_EQ(c.messages.size(), 4u);
  std::vector<std::string> texts;
  for (const auto& m : c.messages) texts.push_back(m.text);
  std::sort(texts.begin(), texts.end());
  EXPECT_EQ(texts, (std::vector<std::string>{"thread 0", "thread 1", "thread 2", "thread 3"}));
}

}  // namespace
