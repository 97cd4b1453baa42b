// Number formatting and markdown tables shared by the report writers: fixed decimals so
// that the same result always gives the same bytes.
#pragma once

#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

namespace s3d::bench {

// `v` with exactly `decimals` digits after the point; never "-0.00".
std::string fixed(double v, int decimals);
// 30227 -> "30,227".
std::string group_digits(int64_t v);

inline constexpr const char* kDash = "-";  // a figure that was not measured, never 0
// A name inside a table cell: a '|' would open a new column.
std::string md(const std::string& s);
std::string ms(double seconds);                  // "1234.5" (milliseconds, one decimal)
std::string pct(double fraction, int decimals);  // "12.50%"
std::string times(double ratio);                 // "1.64x"
// One table row; a rule row aligns the first `text` columns left and the rest right.
void row(std::ostringstream& o, const std::vector<std::string>& cells);
void rule(std::ostringstream& o, size_t text, size_t numbers);

}  // namespace s3d::bench
