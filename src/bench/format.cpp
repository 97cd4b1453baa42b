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

std::string md(const std::string& s) {
  std::string out;
  for (char c : s)
    out += c == '|' ? std::string("\\|") : c == '\n' ? std::string(" ") : std::string(1, c);
  return out;
}

std::string ms(double seconds) { return fixed(seconds * 1e3, 1); }
std::string pct(double fraction, int decimals) { return fixed(fraction * 100, decimals) + "%"; }
std::string times(double ratio) { return fixed(ratio, 2) + "x"; }

void row(std::ostringstream& o, const std::vector<std::string>& cells) {
  o << '|';
  for (const auto& c : cells) o << ' ' << c << " |";
  o << '\n';
}

void rule(std::ostringstream& o, size_t text, size_t numbers) {
  o << '|';
  for (size_t i = 0; i < text + numbers; ++i) o << (i < text ? "---|" : "---:|");
  o << '\n';
}

}  // namespace s3d::bench
