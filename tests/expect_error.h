// EXPECT_ERROR(statement, "needle", ...): the statement throws s3d::Error
// naming every needle. Shared by the CPU tests and the GPU suite.
#pragma once

#include <gtest/gtest.h>

#include <initializer_list>
#include <string>

#include "core/error.h"

namespace s3d::test {

// Passes when `f` throws s3d::Error whose message contains every one of
// `needles`.
template <class F>
::testing::AssertionResult error_contains(F&& f, std::initializer_list<std::string> needles) {
  try {
    f();
  } catch (const s3d::Error& e) {
    std::string msg = e.what();
    for (const auto& n : needles)
      if (msg.find(n) == std::string::npos)
        return ::testing::AssertionFailure()
               << "error \"" << msg << "\" does not mention \"" << n << "\"";
    return ::testing::AssertionSuccess() << msg;
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "threw a non-s3d exception: " << e.what();
  }
  return ::testing::AssertionFailure() << "did not throw";
}

#define EXPECT_ERROR(stmt, ...) \
  EXPECT_TRUE(::s3d::test::error_contains([&] { (void)(stmt); }, {__VA_ARGS__}))

}  // namespace s3d::test
