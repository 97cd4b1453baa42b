#include "bench/format.h"

#include <cstdio>
#include <string>

namespace s3d::bench {

std::string fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  std::string s = buf;
  // A tiny negative value rounds to "-0.00"; a reader would take it for a sign that matters.
  if (s.front() == '-' && s.find_first_not_of("-0.") == std::string::npos) s.erase(0, 1);
  return s;
}

std::string group_digits(int64_t v) {
  std::string digits = std::to_string(v < 0 ? -static_cast<uint64_t>(v) : v);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return v < 0 ? "-" + out : out;
}

}  // namespace s3d::bench
