// Number formatting shared by the report writers: fixed decimals so that the same result
// always gives the same bytes.
#pragma once

#include <cstdint>
#include <string>

namespace s3d::bench {

// `v` with exactly `decimals` digits after the point; never "-0.00".
std::string fixed(double v, int decimals);
// 30227 -> "30,227".
std::string group_digits(int64_t v);

}  // namespace s3d::bench
