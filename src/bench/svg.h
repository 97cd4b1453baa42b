// The figures of `sparse3d bench` as self-contained SVG (no fonts, no scripts, no
// libraries), byte-for-byte the same for the same input. Hand-written on purpose:
// docs/BENCHMARK.md, "Figures", says why.
//
// A figure is a title block over one or more panels stacked vertically. A panel is a line
// chart (numeric x: tokens, batch size) or a horizontal bar chart (one group per category,
// one bar per series), each with its legend on the right. The layout is computed from
// estimated text widths, so long names widen the canvas or wrap instead of being clipped.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace s3d::bench {

struct Series {
  std::string name;
  // Line chart: (x, y). Bar chart: (category index, value).
  std::vector<std::pair<double, double>> points;
  // Index into the palette (so that one path keeps its colour in every panel); -1: the
  // series' position in its panel.
  int colour = -1;
};

struct Panel {
  std::string heading;            // above the chart; wrapped to the canvas
  std::string x_label, y_label;   // axis titles (bar chart: y_label is the value axis')
  std::string unit;               // after values in bar labels and tooltips ("s", "GiB", "%")
  int decimals = 2;               // of bar labels and tooltips
  std::string x_unit = "tokens";  // after x in tooltips of a line chart
  // Empty: a line chart whose y axis starts at zero. Otherwise a horizontal bar chart with
  // these category labels, top to bottom; its value axis includes zero.
  std::vector<std::string> categories;
  std::vector<Series> series;
  std::vector<std::string> notes;  // lines under the chart
};

// Title lines (the first larger), then the panels. Series without points appear in the
// legend only, marked "(no data)"; a panel without any point says "no data". A line chart
// with a single point or equal values still gets a non-empty axis range. Throws on a
// non-finite coordinate or a bar whose category index is out of range.
std::string figure_svg(const std::vector<std::string>& title, const std::vector<Panel>& panels);

// One line chart of request latency against active tokens under a one-line title.
std::string latency_plot_svg(const std::vector<Series>& series, const std::string& title);

// The width in px of `text` at `font_size` in a common sans-serif face, estimated from
// per-character widths on the wide side (DejaVu Sans), so that what fits by this estimate
// fits when rendered. xml_escape's entities count as their character.
double text_width(const std::string& text, double font_size);

// `text` broken at spaces into lines of at most `max_width` px (a single word wider than
// that gets a line of its own).
std::vector<std::string> wrap_text(const std::string& text, double font_size, double max_width);

// `s` with & < > " ' replaced by their entities, for text and attribute values.
std::string xml_escape(const std::string& s);

}  // namespace s3d::bench
