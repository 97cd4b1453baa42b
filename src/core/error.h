// One error type for the whole engine. Messages name the input, what was expected and
// what was found, so that a user can act on them without reading the code.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

#include "sparse3d/types.h"

namespace s3d {

// The public error type (include/sparse3d/types.h) is the engine's one error type.
using Error = ::sparse3d::Error;

// Concatenates any streamable values into one string.
template <class... Args>
std::string cat(Args&&... args) {
  std::ostringstream os;
  (os << ... << std::forward<Args>(args));
  return os.str();
}

template <class... Args>
[[noreturn]] void fail(Args&&... args) {
  throw Error(cat(std::forward<Args>(args)...));
}

}  // namespace s3d

// Throws s3d::Error with the streamed message when `cond` is false.
#define S3D_CHECK(cond, ...)                   \
  do {                                         \
    if (!(cond)) ::s3d::fail(__VA_ARGS__);     \
  } while (0)
