// The latency-vs-tokens plot of `sparse3d bench`, as a self-contained SVG (no fonts, no
// scripts, no libraries), byte-for-byte the same for the same input.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace s3d::bench {

struct Series {
  std::string name;
  std::vector<std::pair<double, double>> points;  // (active tokens, seconds)
};

// One polyline with a marker per point for each series, in distinct colours, with a
// legend, 1-2-5 ticks and the title. Series without points appear in the legend only;
// a single point or equal values still get a non-empty axis range. Throws on a
// non-finite coordinate.
std::string latency_plot_svg(const std::vector<Series>& series, const std::string& title);

// `s` with & < > " ' replaced by their entities, for text and attribute values.
std::string xml_escape(const std::string& s);

}  // namespace s3d::bench
