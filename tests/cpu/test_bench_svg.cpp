// The figure renderer: well-formed XML (checked by svg_test_util.h's parser, itself tested
// on bad input), escaped names, one marker per point, 1-2-5 ticks, degenerate inputs, bar
// charts, and a layout with nothing outside the canvas and no overlapping text.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <regex>
#include <set>

#include "bench/svg.h"
#include "io_test_util.h"
#include "svg_test_util.h"

namespace s3d::bench {
namespace {

using svgtest::count;
using svgtest::layout_problem;
using svgtest::xml_problem;

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


TEST(BenchSvg, LayoutCheckerFindsClippingAndOverlap) {
  const std::string head =
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"200\" height=\"100\" "
      "viewBox=\"0 0 200 100\">";
  EXPECT_EQ(layout_problem(head + "<text x=\"10\" y=\"20\" font-size=\"12\" "
                                  "text-anchor=\"start\">ok</text></svg>"),
            "");
  // Runs past the right edge.
  EXPECT_NE(layout_problem(head + "<text x=\"190\" y=\"20\" font-size=\"12\" "
                                  "text-anchor=\"start\">too long here</text></svg>"),
            "");
  // Centred on the left edge.
  EXPECT_NE(layout_problem(head + "<text x=\"5\" y=\"20\" font-size=\"12\" "
                                  "text-anchor=\"middle\">centred</text></svg>"),
            "");
  // A rotated label whose length leaves the canvas at the top.
  EXPECT_NE(layout_problem(head + "<text x=\"20\" y=\"30\" font-size=\"12\" "
                                  "transform=\"rotate(-90 20 30)\" text-anchor=\"middle\">"
                                  "a rather long axis label</text></svg>"),
            "");
  EXPECT_NE(layout_problem(head + "<text x=\"10\" y=\"20\" font-size=\"12\" text-anchor=\"start\">"
                                  "one</text><text x=\"20\" y=\"24\" font-size=\"12\" "
                                  "text-anchor=\"start\">two</text></svg>"),
            "");
  EXPECT_NE(layout_problem(head + "<circle cx=\"199\" cy=\"50\" r=\"3.5\"/></svg>"), "");
  EXPECT_NE(layout_problem(head + "<rect x=\"150\" y=\"10\" width=\"60\" height=\"5\"/></svg>"),
            "");
}

TEST(BenchSvg, TextWidthEstimateAndWrapping) {
  EXPECT_DOUBLE_EQ(text_width("", 12), 0);
  EXPECT_GT(text_width("WWWW", 12), text_width("iiii", 12));
  EXPECT_NEAR(text_width("a &amp; b", 10), text_width("a & b", 10), 1e-9);
  EXPECT_NEAR(text_width("R&D; x", 10), text_width("R", 10) + text_width("&D; x", 10), 1e-9);
  EXPECT_GT(text_width("R&D; x", 10), text_width("R& x", 10));  // not an entity
  // Digits are as wide as in DejaVu Sans (0.636 em), not narrower.
  EXPECT_GE(text_width("0123456789", 10), 63.0);
  const auto lines = wrap_text("one two three four five six seven", 12, 60);
  ASSERT_GT(lines.size(), 2u);
  for (const auto& l : lines) EXPECT_LE(text_width(l, 12), 60) << l;
  EXPECT_EQ(wrap_text("unbreakable_long_word", 12, 10),
            std::vector<std::string>{"unbreakable_long_word"});
  EXPECT_TRUE(wrap_text("", 12, 100).empty());
}

// A line chart with long series names, many series and a long title stays on its canvas.
TEST(BenchSvg, LongNamesWidenTheCanvasAndLongTitlesWrap) {
  std::vector<Series> many;
  for (int i = 0; i < 12; ++i)
    many.push_back({cat("canonical_cache_combined-qk_rmsnorm_cross_inplace-", i),
                    {{3664, 0.7 + i}, {30227, 13.0 + i}, {11833, 3.1 + i}}});
  std::string title;
  for (int i = 0; i < 30; ++i) title += "word" + std::to_string(i) + " ";
  const std::string svg = latency_plot_svg(many, title);
  EXPECT_EQ(xml_problem(svg), "");
  EXPECT_EQ(layout_problem(svg), "");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(svg, m, std::regex("viewBox=\"0 0 ([0-9]+) ")));
  EXPECT_GT(std::stod(m[1].str()), 860);
  EXPECT_GE(count(svg, "font-weight=\"bold\""), 2u);  // the title took two lines
  EXPECT_EQ(count(svg, "<polyline"), 12u);
  // Series past the tenth are dashed.
  EXPECT_EQ(count(svg, "stroke-dasharray"), 2u * 2);  // line and legend, two series
}

// The committed 49,152-token report drew one dot on the frame of an empty line chart; its
// points now sit inside the frame, and a single value reads as a bar.
TEST(BenchSvg, MarkersStayInsideThePlotFrame) {
  const std::string svg = latency_plot_svg({{"fast", {{49152, 29.873}}}}, "t");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(svg, m, std::regex("<rect x=\"([0-9.]+)\" y=\"([0-9.]+)\" "
                                                   "width=\"([0-9.]+)\" height=\"([0-9.]+)\" "
                                                   "fill=\"none\"")));
  const double x0 = std::stod(m[1]), y0 = std::stod(m[2]);
  const double x1 = x0 + std::stod(m[3]), y1 = y0 + std::stod(m[4]);
  ASSERT_TRUE(std::regex_search(
      svg, m, std::regex("<circle cx=\"([0-9.]+)\" cy=\"([0-9.]+)\" r=\"([0-9.]+)\"")));
  const double cx = std::stod(m[1]), cy = std::stod(m[2]), r = std::stod(m[3]);
  EXPECT_GE(cx - r, x0);
  EXPECT_LE(cx + r, x1);
  EXPECT_GE(cy - r, y0) << "the marker crosses the top of the frame";
  EXPECT_LE(cy + r, y1);
}

Panel bars(std::vector<std::string> categories, std::vector<Series> series) {
  Panel p;
  p.heading = "bars";
  p.y_label = "value (s)";
  p.unit = "s";
  p.decimals = 3;
  p.categories = std::move(categories);
  p.series = std::move(series);
  return p;
}

TEST(BenchSvg, BarChartHasOneLabelledBarPerValue) {
  const Panel p = bars({"a00-sphere-49152 (49,152 tokens)"},
                       {{"fast", {{0, 29.873}}}, {"low_memory", {{0, 29.906}}}});
  const std::string svg = figure_svg({"title", "subtitle"}, {p});
  EXPECT_EQ(xml_problem(svg), "");
  EXPECT_EQ(layout_problem(svg), "");
  EXPECT_EQ(count(svg, "<polyline"), 0u);
  EXPECT_EQ(count(svg, "<circle"), 0u);
  EXPECT_EQ(count(svg, "<title>fast, a00-sphere-49152 (49,152 tokens): 29.873 s</title>"), 1u);
  EXPECT_EQ(count(svg, "<title>low_memory, a00-sphere-49152 (49,152 tokens): 29.906 s</title>"),
            1u);
  EXPECT_NE(svg.find(">29.873 s</text>"), std::string::npos);  // the value beside its bar
  EXPECT_NE(svg.find(">a00-sphere-49152 (49,152 tokens)</text>"), std::string::npos);
  EXPECT_NE(svg.find(">value (s)</text>"), std::string::npos);
  EXPECT_NE(svg.find(">low_memory</text>"), std::string::npos);  // legend
  // The value axis starts at zero and covers the longest bar.
  EXPECT_NE(svg.find("text-anchor=\"middle\">0</text>"), std::string::npos);
  EXPECT_NE(svg.find("text-anchor=\"middle\">30</text>"), std::string::npos);
}

TEST(BenchSvg, BarChartWithNegativeValuesMissingBarsAndManyCategories) {
  std::vector<std::string> cats;
  for (int i = 0; i < 9; ++i) cats.push_back(cat("qk_rmsnorm_rope_inplace_flag_", i));
  Series a{"default (3 assets)", {}}, b{"long-tail (1 asset)", {}};
  for (int i = 0; i < 9; ++i) a.points.push_back({double(i), 3.0 - i});
  b.points.push_back({0, -0.25});  // the others are not measured
  Panel p = bars(cats, {a, b});
  p.unit = "%";
  p.decimals = 2;
  p.notes = {"a note under the chart that is long enough to need wrapping on a narrow canvas, "
             "which it gets rather than running off the right edge of the figure at all"};
  const std::string svg = figure_svg({"t"}, {p});
  EXPECT_EQ(xml_problem(svg), "");
  EXPECT_EQ(layout_problem(svg), "");
  EXPECT_EQ(count(svg, "not measured</text>"), 8u);
  EXPECT_NE(svg.find(">-5.00%</text>"), std::string::npos);
  EXPECT_NE(svg.find(">-0.25%</text>"), std::string::npos);
  // The axis reaches below zero, and zero has its own line.
  EXPECT_NE(svg.find("text-anchor=\"middle\">-6</text>"), std::string::npos);
  const std::regex zero_line("<line [^>]*stroke=\"#333333\"/>");
  EXPECT_EQ(std::distance(std::sregex_iterator(svg.begin(), svg.end(), zero_line),
                          std::sregex_iterator()),
            1);
}

TEST(BenchSvg, BarOutsideItsCategoriesIsAnError) {
  EXPECT_ERROR(figure_svg({"t"}, {bars({"one"}, {{"p", {{1, 2.0}}}})}), "series 'p'",
               "outside the 1 categories");
  EXPECT_ERROR(figure_svg({"t"}, {bars({"one"}, {{"p", {{0, NAN}}}})}), "non-finite");
}

TEST(BenchSvg, PanelsStackAndKeepTheirColours) {
  Panel lines;
  lines.heading = "first";
  lines.x_label = "active tokens";
  lines.y_label = "s";
  lines.series = {{"beyond", {{1000, 1}, {2000, 2}, {3000, 3}}, 2}};
  const Panel b = bars({"one"}, {{"beyond", {{0, 3.0}}, 2}});
  const std::string svg = figure_svg({"t"}, {lines, b, bars({}, {})});
  EXPECT_EQ(xml_problem(svg), "");
  EXPECT_EQ(layout_problem(svg), "");
  EXPECT_EQ(count(svg, ">first</text>"), 1u);
  EXPECT_EQ(count(svg, ">bars</text>"), 2u);
  EXPECT_EQ(count(svg, ">no data</text>"), 1u);
  // Colour 2 of the palette in both panels: the polyline, three markers and the legend's
  // line; the bar and the legend's swatch.
  EXPECT_EQ(count(svg, "#2ca02c"), 7u);
}

}  // namespace
}  // namespace s3d::bench
