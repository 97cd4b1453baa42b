// The latency plot: well-formed XML (checked by a small parser below, itself tested on bad
// input), escaped names, one marker per point, 1-2-5 ticks, degenerate inputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <regex>
#include <set>

#include "bench/svg.h"
#include "io_test_util.h"

namespace s3d::bench {
namespace {

bool valid_entity(const std::string& s, size_t amp) {
  const size_t semi = s.find(';', amp);
  if (semi == std::string::npos) return false;
  static const std::set<std::string> known = {"amp", "lt", "gt", "quot", "apos"};
  const std::string name = s.substr(amp + 1, semi - amp - 1);
  return known.count(name) || std::regex_match(name, std::regex("#[0-9]+|#x[0-9a-fA-F]+"));
}

// "" when `xml` is one well-formed element (after an optional declaration): every tag
// closed in order, attributes quoted, no raw '<' or stray '&' in text or values;
// otherwise what is wrong and where.
std::string xml_problem(const std::string& xml) {
  std::vector<std::string> open;
  int roots = 0;
  for (size_t i = 0; i < xml.size();) {
    if (xml[i] != '<') {
      if (xml[i] == '&' && !valid_entity(xml, i)) return cat("stray '&' at ", i);
      if (open.empty() && !std::isspace(static_cast<unsigned char>(xml[i])))
        return cat("text outside the root at ", i);
      ++i;
      continue;
    }
    if (xml.compare(i, 2, "<?") == 0) {
      const size_t end = xml.find("?>", i);
      if (end == std::string::npos || i != 0) return cat("bad declaration at ", i);
      i = end + 2;
      continue;
    }
    if (xml.compare(i, 2, "</") == 0) {
      const size_t end = xml.find('>', i);
      if (end == std::string::npos) return cat("unterminated end tag at ", i);
      const std::string name = xml.substr(i + 2, end - i - 2);
      if (open.empty() || open.back() != name)
        return cat("</", name, "> closes nothing open at ", i);
      open.pop_back();
      i = end + 1;
      continue;
    }
    // Start tag: name, then name="value" pairs, then '>' or '/>'.
    size_t j = i + 1;
    while (j < xml.size() &&
           (std::isalnum(static_cast<unsigned char>(xml[j])) || xml[j] == '-' || xml[j] == ':'))
      ++j;
    const std::string name = xml.substr(i + 1, j - i - 1);
    if (name.empty()) return cat("'<' without a tag name at ", i);
    bool self_closing = false;
    for (;;) {
      while (j < xml.size() && std::isspace(static_cast<unsigned char>(xml[j]))) ++j;
      if (j >= xml.size()) return cat("unterminated <", name, ">");
      if (xml[j] == '>') break;
      if (xml.compare(j, 2, "/>") == 0) {
        self_closing = true;
        ++j;
        break;
      }
      const size_t eq = xml.find('=', j);
      if (eq == std::string::npos || eq + 1 >= xml.size() || xml[eq + 1] != '"')
        return cat("unquoted attribute in <", name, "> at ", j);
      const size_t close = xml.find('"', eq + 2);
      if (close == std::string::npos) return cat("unterminated attribute in <", name, ">");
      for (size_t k = eq + 2; k < close; ++k) {
        if (xml[k] == '<') return cat("'<' inside an attribute of <", name, ">");
        if (xml[k] == '&' && !valid_entity(xml, k)) return cat("stray '&' in <", name, ">");
      }
      j = close + 1;
    }
    if (open.empty() && ++roots > 1) return cat("second root <", name, ">");
    if (!self_closing) open.push_back(name);
    i = j + 1;
  }
  if (!open.empty()) return cat("<", open.back(), "> never closed");
  return roots == 1 ? "" : "no root element";
}

size_t count(const std::string& hay, const std::string& needle) {
  size_t n = 0;
  for (size_t p = hay.find(needle); p != std::string::npos; p = hay.find(needle, p + 1)) ++n;
  return n;
}

TEST(BenchSvg, CheckerRejectsMalformedXml) {
  EXPECT_EQ(xml_problem("<svg><g/><text a=\"1\">x &amp; y</text></svg>"), "");
  EXPECT_NE(xml_problem("<svg><g></svg>"), "");
  EXPECT_NE(xml_problem("<svg>"), "");
  EXPECT_NE(xml_problem("<svg><text>a & b</text></svg>"), "");
  EXPECT_NE(xml_problem("<svg a=\"<\"/>"), "");
  EXPECT_NE(xml_problem("<svg a=1/>"), "");
  EXPECT_NE(xml_problem("<svg/><svg/>"), "");
  EXPECT_NE(xml_problem(""), "");
  EXPECT_NE(xml_problem("<svg></g></svg>"), "");
}

TEST(BenchSvg, EscapesXmlSpecialCharacters) {
  EXPECT_EQ(xml_escape("a<b & \"c\" 'd'>"), "a&lt;b &amp; &quot;c&quot; &apos;d&apos;&gt;");
  EXPECT_EQ(xml_escape("pure_eager"), "pure_eager");
}

const std::vector<Series> kTwoPaths = {
    {"pure<eager> & \"co\"", {{3664, 0.9}, {30227, 12.9}, {12000, 4.1}}},
    {"beyond", {{3664, 0.5}, {30227, 9.0}}}};

TEST(BenchSvg, PlotIsWellFormedWithEveryPointAndEscapedNames) {
  const std::string svg = latency_plot_svg(kTwoPaths, "latency <H200> & co");
  EXPECT_EQ(xml_problem(svg), "");
  EXPECT_EQ(count(svg, "<circle"), 5u);
  EXPECT_EQ(count(svg, "<polyline"), 2u);
  EXPECT_NE(svg.find("pure&lt;eager&gt; &amp; &quot;co&quot;"), std::string::npos);
  EXPECT_EQ(svg.find("pure<eager>"), std::string::npos);
  EXPECT_NE(svg.find(">latency &lt;H200&gt; &amp; co</text>"), std::string::npos);
  EXPECT_NE(svg.find(">active tokens</text>"), std::string::npos);
  EXPECT_NE(svg.find(">denoise latency (s)</text>"), std::string::npos);
  EXPECT_NE(svg.find(">beyond</text>"), std::string::npos);  // legend
  // The first polyline is sorted by tokens: 3664, 12000, 30227.
  std::smatch m;
  ASSERT_TRUE(std::regex_search(svg, m, std::regex("<polyline[^>]*points=\"([^\"]*)\"")));
  EXPECT_EQ(count(m[1].str(), ","), 3u);
  // Same input, same bytes.
  EXPECT_EQ(svg, latency_plot_svg(kTwoPaths, "latency <H200> & co"));
}

TEST(BenchSvg, TicksAreRound125Steps) {
  const std::string svg = latency_plot_svg(kTwoPaths, "t");
  // x: 3,664..30,227 -> steps of 5,000 from 0 to 35,000; y: 0..12.9 -> steps of 5 to 15.
  for (const char* label : {">0<", ">5,000<", ">30,000<", ">35,000<", ">5<", ">10<", ">15<"})
    EXPECT_NE(svg.find(label), std::string::npos) << label;
  EXPECT_EQ(svg.find(">40,000<"), std::string::npos);
  EXPECT_EQ(svg.find(">20<"), std::string::npos);
  // Sub-unit latencies get decimals: 0..0.9 -> steps of 0.2.
  const std::string small = latency_plot_svg({{"p", {{1000, 0.3}, {2000, 0.9}}}}, "t");
  for (const char* label : {">0.0<", ">0.2<", ">0.8<", ">1.0<"})
    EXPECT_NE(small.find(label), std::string::npos) << label;
  // Every coordinate has two decimals.
  std::regex coord("c[xy]=\"(-?[0-9]+\\.[0-9]{2})\"");
  EXPECT_EQ(static_cast<size_t>(std::distance(std::sregex_iterator(svg.begin(), svg.end(), coord),
                                              std::sregex_iterator())),
            2 * count(svg, "<circle"));
}

// The tick labels of one axis, in order: y labels are right-aligned, x labels centred.
std::vector<double> tick_values(const std::string& svg, const std::string& anchor) {
  std::vector<double> v;
  std::regex label("text-anchor=\"" + anchor + "\">([-0-9.,]+)</text>");
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), label); it != std::sregex_iterator();
       ++it) {
    std::string text = (*it)[1].str();
    text.erase(std::remove(text.begin(), text.end(), ','), text.end());
    v.push_back(std::stod(text));
  }
  return v;
}

// Evenly spaced labels whose step is 1, 2 or 5 times a power of ten, covering [lo, hi].
void expect_125_ticks(const std::vector<double>& ticks, double lo, double hi) {
  ASSERT_GE(ticks.size(), 3u);
  EXPECT_LE(ticks.size(), 12u);
  const double step = ticks[1] - ticks[0];
  for (size_t i = 1; i < ticks.size(); ++i) EXPECT_NEAR(ticks[i] - ticks[i - 1], step, step * 1e-6);
  const double mantissa = step / std::pow(10.0, std::floor(std::log10(step) + 1e-9));
  EXPECT_TRUE(std::fabs(mantissa - 1) < 1e-6 || std::fabs(mantissa - 2) < 1e-6 ||
              std::fabs(mantissa - 5) < 1e-6)
      << "step " << step;
  EXPECT_LE(ticks.front(), lo);
  EXPECT_GE(ticks.back(), hi);
  EXPECT_GT(ticks.front(), lo - step);  // no empty interval beyond the data
  EXPECT_LT(ticks.back(), hi + step);
}

TEST(BenchSvg, TickStepsAreOneTwoFiveForManyRanges) {
  const std::vector<std::pair<double, double>> ranges = {
      {3664, 30227}, {1000, 1900}, {0.013, 0.37}, {2.1, 2.6}, {12, 98}, {40000, 49152}, {1, 1.3}};
  for (const auto& [lo, hi] : ranges) {
    SCOPED_TRACE(cat(lo, "..", hi));
    const std::string svg = latency_plot_svg({{"p", {{lo, lo}, {hi, hi}}}}, "t");
    expect_125_ticks(tick_values(svg, "middle"), lo, hi);
    expect_125_ticks(tick_values(svg, "end"), 0, hi);  // the y axis starts at zero
  }
}

TEST(BenchSvg, DistinctColoursPerSeries) {
  std::vector<Series> many;
  for (int i = 0; i < 10; ++i)
    many.push_back({cat("p", i), {{1000.0 * (i + 1), 1.0 + i}, {2e4, 2.0 + i}}});
  const std::string svg = latency_plot_svg(many, "t");
  std::set<std::string> colours;
  std::regex stroke("<polyline fill=\"none\" stroke=\"(#[0-9a-f]{6})\"");
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), stroke); it != std::sregex_iterator();
       ++it)
    colours.insert((*it)[1].str());
  EXPECT_EQ(colours.size(), 10u);
}

void expect_clean(const std::string& svg) {
  EXPECT_EQ(xml_problem(svg), "");
  for (const char* bad : {"nan", "inf", "NaN"}) EXPECT_EQ(svg.find(bad), std::string::npos) << bad;
}

TEST(BenchSvg, DegenerateInputs) {
  // One point: a marker, no line, and a non-empty range on both axes.
  std::string svg = latency_plot_svg({{"one", {{5000, 2.0}}}}, "t");
  expect_clean(svg);
  EXPECT_EQ(count(svg, "<circle"), 1u);
  EXPECT_EQ(count(svg, "<polyline"), 0u);
  // Equal values on both axes, and all-zero latencies.
  svg = latency_plot_svg({{"flat", {{5000, 2.0}, {5000, 2.0}}}, {"zero", {{5000, 0}, {6000, 0}}}},
                         "t");
  expect_clean(svg);
  EXPECT_EQ(count(svg, "<circle"), 4u);
  svg = latency_plot_svg({{"zeros", {{0, 0}, {0, 0}}}}, "t");
  expect_clean(svg);
  // A series without points is in the legend only; no series at all says so.
  svg = latency_plot_svg({{"empty", {}}, {"p", {{1, 1}}}}, "t");
  expect_clean(svg);
  EXPECT_NE(svg.find(">empty (no data)</text>"), std::string::npos);
  EXPECT_EQ(count(svg, "<circle"), 1u);
  svg = latency_plot_svg({}, "");
  expect_clean(svg);
  EXPECT_NE(svg.find(">no data</text>"), std::string::npos);
  EXPECT_EQ(count(svg, "<circle"), 0u);
}

TEST(BenchSvg, NonFinitePointsAreErrors) {
  EXPECT_ERROR(latency_plot_svg({{"p", {{1, std::nan("")}}}}, "t"), "series 'p'", "non-finite");
  EXPECT_ERROR(latency_plot_svg({{"q", {{INFINITY, 1}}}}, "t"), "series 'q'");
}

}  // namespace
}  // namespace s3d::bench
