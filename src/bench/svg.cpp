#include "bench/svg.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "bench/format.h"
#include "core/error.h"

namespace s3d::bench {
namespace {

// Canvas: the plot area leaves room for tick labels on the left and the legend on the right.
constexpr double kWidth = 860, kHeight = 500;
constexpr double kLeft = 80, kRight = 620, kTop = 50, kBottom = 430;

// Tableau 10: distinct on white and for the common colour-vision deficiencies. Series past
// the tenth reuse a colour with a dashed line.
const char* const kColours[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
constexpr size_t kNumColours = sizeof kColours / sizeof kColours[0];

struct Axis {
  double lo, hi, step;
  int decimals;  // enough to tell the ticks apart
};

// Widens [lo, hi] to multiples of a 1-2-5 step giving about six intervals. An empty
// range (one point, equal values) is first opened around its value so nothing divides by 0.
Axis nice_axis(double lo, double hi) {
  if (!(hi > lo)) {
    const double half = lo == 0 ? 1.0 : std::fabs(lo) * 0.5;
    lo = lo == 0 ? 0.0 : lo - half;
    hi = hi + half;
  }
  const double raw = (hi - lo) / 6.0;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = 10 * mag;
  for (double m : {1.0, 2.0, 5.0})
    if (m * mag >= raw * (1 - 1e-9)) {
      step = m * mag;
      break;
    }
  // The epsilon keeps a bound that is already a multiple from moving out by one step.
  lo = std::floor(lo / step + 1e-9) * step;
  hi = std::ceil(hi / step - 1e-9) * step;
  const int decimals = std::max(0, -static_cast<int>(std::floor(std::log10(step) + 1e-9)));
  return {lo, hi, step, decimals};
}

std::string tick_label(double v, const Axis& a) {
  return a.decimals == 0 ? group_digits(std::llround(v)) : fixed(v, a.decimals);
}

std::string px(double v) { return fixed(v, 2); }

}  // namespace

std::string xml_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string latency_plot_svg(const std::vector<Series>& series, const std::string& title) {
  // Data range; the y axis starts at zero so that bar-like comparisons by eye stay honest.
  double xlo = INFINITY, xhi = -INFINITY, ylo = 0, yhi = 0;
  bool any = false;
  for (const auto& s : series)
    for (const auto& [x, y] : s.points) {
      S3D_CHECK(std::isfinite(x) && std::isfinite(y), "latency plot: series '", s.name,
                "' has a non-finite point (", x, ", ", y, ")");
      xlo = std::min(xlo, x), xhi = std::max(xhi, x);
      ylo = std::min(ylo, y), yhi = std::max(yhi, y);
      any = true;
    }
  if (!any) xlo = 0, xhi = 1, yhi = 1;
  const Axis ax = nice_axis(xlo, xhi), ay = nice_axis(ylo, yhi);
  auto sx = [&](double x) { return kLeft + (x - ax.lo) / (ax.hi - ax.lo) * (kRight - kLeft); };
  auto sy = [&](double y) { return kBottom - (y - ay.lo) / (ay.hi - ay.lo) * (kBottom - kTop); };

  std::ostringstream o;
  o << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
    << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << kWidth << "\" height=\"" << kHeight
    << "\" viewBox=\"0 0 " << kWidth << ' ' << kHeight
    << "\" font-family=\"sans-serif\" font-size=\"12\">\n"
    << "<rect x=\"0\" y=\"0\" width=\"" << kWidth << "\" height=\"" << kHeight
    << "\" fill=\"white\"/>\n"
    << "<text x=\"" << px((kLeft + kRight) / 2) << "\" y=\"28\" text-anchor=\"middle\" "
    << "font-size=\"16\">" << xml_escape(title) << "</text>\n";

  // Grid, ticks and tick labels.
  o << "<g stroke=\"#dddddd\">\n";
  const int nx = static_cast<int>(std::llround((ax.hi - ax.lo) / ax.step));
  const int ny = static_cast<int>(std::llround((ay.hi - ay.lo) / ay.step));
  for (int i = 0; i <= nx; ++i) {
    const std::string x = px(sx(ax.lo + i * ax.step));
    o << "<line x1=\"" << x << "\" y1=\"" << px(kTop) << "\" x2=\"" << x << "\" y2=\""
      << px(kBottom) << "\"/>\n";
  }
  for (int i = 0; i <= ny; ++i) {
    const std::string y = px(sy(ay.lo + i * ay.step));
    o << "<line x1=\"" << px(kLeft) << "\" y1=\"" << y << "\" x2=\"" << px(kRight) << "\" y2=\""
      << y << "\"/>\n";
  }
  o << "</g>\n<g fill=\"#333333\">\n";
  for (int i = 0; i <= nx; ++i) {
    const double v = ax.lo + i * ax.step;
    o << "<text x=\"" << px(sx(v)) << "\" y=\"" << px(kBottom + 18) << "\" text-anchor=\"middle\">"
      << tick_label(v, ax) << "</text>\n";
  }
  for (int i = 0; i <= ny; ++i) {
    const double v = ay.lo + i * ay.step;
    o << "<text x=\"" << px(kLeft - 8) << "\" y=\"" << px(sy(v) + 4) << "\" text-anchor=\"end\">"
      << tick_label(v, ay) << "</text>\n";
  }
  o << "<text x=\"" << px((kLeft + kRight) / 2) << "\" y=\"" << px(kBottom + 45)
    << "\" text-anchor=\"middle\">active tokens</text>\n"
    << "<text x=\"22\" y=\"" << px((kTop + kBottom) / 2) << "\" text-anchor=\"middle\" "
    << "transform=\"rotate(-90 22 " << px((kTop + kBottom) / 2)
    << ")\">denoise latency (s)</text>\n</g>\n";
  o << "<rect x=\"" << px(kLeft) << "\" y=\"" << px(kTop) << "\" width=\"" << px(kRight - kLeft)
    << "\" height=\"" << px(kBottom - kTop) << "\" fill=\"none\" stroke=\"#333333\"/>\n";
  if (!any)
    o << "<text x=\"" << px((kLeft + kRight) / 2) << "\" y=\"" << px((kTop + kBottom) / 2)
      << "\" text-anchor=\"middle\" fill=\"#999999\">no data</text>\n";

  // One line and its markers per series; the legend to the right of the plot.
  for (size_t i = 0; i < series.size(); ++i) {
    const Series& s = series[i];
    const std::string colour = kColours[i % kNumColours];
    const std::string dash = i >= kNumColours ? " stroke-dasharray=\"6 3\"" : "";
    const std::string name = xml_escape(s.name);
    auto pts = s.points;
    std::stable_sort(pts.begin(), pts.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    o << "<g>\n";
    if (pts.size() >= 2) {
      o << "<polyline fill=\"none\" stroke=\"" << colour << "\" stroke-width=\"2\"" << dash
        << " points=\"";
      for (size_t k = 0; k < pts.size(); ++k)
        o << (k ? " " : "") << px(sx(pts[k].first)) << ',' << px(sy(pts[k].second));
      o << "\"/>\n";
    }
    for (const auto& [x, y] : pts)
      o << "<circle cx=\"" << px(sx(x)) << "\" cy=\"" << px(sy(y)) << "\" r=\"3.5\" fill=\""
        << colour << "\"><title>" << name << ": " << group_digits(std::llround(x)) << " tokens, "
        << fixed(y, 3) << " s</title></circle>\n";
    const double ly = kTop + 10 + 20.0 * static_cast<double>(i);
    o << "<line x1=\"" << px(kRight + 20) << "\" y1=\"" << px(ly) << "\" x2=\"" << px(kRight + 44)
      << "\" y2=\"" << px(ly) << "\" stroke=\"" << colour << "\" stroke-width=\"2\"" << dash
      << "/>\n<text x=\"" << px(kRight + 50) << "\" y=\"" << px(ly + 4) << "\">" << name
      << (pts.empty() ? " (no data)" : "") << "</text>\n</g>\n";
  }
  o << "</svg>\n";
  return o.str();
}

}  // namespace s3d::bench
