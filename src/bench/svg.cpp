#include "bench/svg.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <sstream>

#include "bench/format.h"
#include "core/error.h"

namespace s3d::bench {
namespace {

// Layout, px. Every panel's plot area has the same width; its left edge moves right for
// wider tick or category labels, and the canvas widens for a wider legend.
constexpr double kMinWidth = 860;
constexpr double kMargin = 16;        // canvas edge to any text
constexpr double kMinLeft = 80;       // canvas edge to the plot area, at least
constexpr double kPlotWidth = 540;
constexpr double kLineHeight = 300;   // plot area of a line chart
constexpr double kPad = 8;            // inside a line chart's frame, around the data
constexpr double kLegendGap = 24;     // plot area (or bar labels) to the legend
constexpr double kPanelGap = 28;
constexpr double kBar = 14, kBarGap = 3, kGroupGap = 14, kBarEnds = 10;
constexpr double kTitleSize = 16, kHeadingSize = 13, kTextSize = 12, kSmallSize = 11;

// Tableau 10: distinct on white and for the common colour-vision deficiencies. Series past
// the tenth reuse a colour, dashed (lines) or lighter (bars).
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

int ticks_of(const Axis& a) { return static_cast<int>(std::llround((a.hi - a.lo) / a.step)); }

std::string tick_label(double v, const Axis& a) {
  return a.decimals == 0 ? group_digits(std::llround(v)) : fixed(v, a.decimals);
}

// Every n-th tick label, the smallest n at which neighbouring labels keep a gap.
int label_stride(const Axis& a, double px_per_step) {
  double widest = 0;
  for (int i = 0; i <= ticks_of(a); ++i)
    widest = std::max(widest, text_width(tick_label(a.lo + i * a.step, a), kTextSize));
  int stride = 1;
  while (stride * px_per_step < widest + 8 && stride < ticks_of(a)) ++stride;
  return stride;
}

std::string px(double v) { return fixed(v, 2); }

std::string colour_of(const Series& s, size_t position) {
  const size_t i = s.colour >= 0 ? static_cast<size_t>(s.colour) : position;
  return kColours[i % kNumColours];
}
bool second_round(const Series& s, size_t position) {
  return (s.colour >= 0 ? static_cast<size_t>(s.colour) : position) >= kNumColours;
}

// One <text>; the anchor comes last so that a label's text follows text-anchor="...">.
void text(std::ostringstream& o, double x, double y, const std::string& content, double size,
          const char* anchor, const std::string& extra = "") {
  o << "<text x=\"" << px(x) << "\" y=\"" << px(y) << "\" font-size=\"" << fixed(size, 0) << '"'
    << extra << " text-anchor=\"" << anchor << "\">" << xml_escape(content) << "</text>\n";
}

void line(std::ostringstream& o, double x1, double y1, double x2, double y2,
          const std::string& extra = "") {
  o << "<line x1=\"" << px(x1) << "\" y1=\"" << px(y1) << "\" x2=\"" << px(x2) << "\" y2=\""
    << px(y2) << '"' << extra << "/>\n";
}

std::string legend_name(const Series& s) {
  return s.name + (s.points.empty() ? " (no data)" : "");
}

double legend_width(const Panel& p) {
  double w = 0;
  for (const auto& s : p.series) w = std::max(w, text_width(legend_name(s), kTextSize));
  return p.series.empty() ? 0 : 30 + w;
}

double legend_height(const Panel& p) { return 20.0 * static_cast<double>(p.series.size()); }

void check_points(const Panel& p) {
  for (const auto& s : p.series)
    for (const auto& [x, y] : s.points) {
      S3D_CHECK(std::isfinite(x) && std::isfinite(y), "plot: series '", s.name,
                "' has a non-finite point (", x, ", ", y, ")");
      if (!p.categories.empty())
        S3D_CHECK(x >= 0 && x < static_cast<double>(p.categories.size()) && x == std::floor(x),
                  "plot: series '", s.name, "' has a bar outside the ", p.categories.size(),
                  " categories (", x, ")");
    }
}

bool any_point(const Panel& p) {
  for (const auto& s : p.series)
    if (!s.points.empty()) return true;
  return false;
}

std::string value_text(double v, const Panel& p) {
  if (p.unit.empty()) return fixed(v, p.decimals);
  return fixed(v, p.decimals) + (p.unit == "%" || p.unit == "x" ? "" : " ") + p.unit;
}

// ---- Line chart --------------------------------------------------------------------------

struct LineLayout {
  Axis ax, ay;
  double left;  // plot area's left edge
};

LineLayout line_layout(const Panel& p) {
  double xlo = INFINITY, xhi = -INFINITY, ylo = 0, yhi = 0;
  for (const auto& s : p.series)
    for (const auto& [x, y] : s.points) {
      xlo = std::min(xlo, x), xhi = std::max(xhi, x);
      ylo = std::min(ylo, y), yhi = std::max(yhi, y);
    }
  if (!any_point(p)) xlo = 0, xhi = 1, yhi = 1;
  LineLayout l{nice_axis(xlo, xhi), nice_axis(ylo, yhi), 0};
  double widest = 0;
  for (int i = 0; i <= ticks_of(l.ay); ++i)
    widest = std::max(widest, text_width(tick_label(l.ay.lo + i * l.ay.step, l.ay), kTextSize));
  l.left = std::max(kMinLeft, kMargin + 28 + widest);
  return l;
}

double line_width_needed(const Panel& p) {
  const double legend = legend_width(p);
  return line_layout(p).left + kPlotWidth + (legend > 0 ? kLegendGap + legend : 0) + kMargin;
}

// Draws the chart with its plot area's top at `top`; returns the bottom of what it drew.
double draw_line_chart(std::ostringstream& o, const Panel& p, double top) {
  const LineLayout l = line_layout(p);
  const Axis &ax = l.ax, &ay = l.ay;
  const double left = l.left, right = left + kPlotWidth, bottom = top + kLineHeight;
  auto sx = [&](double x) {
    return left + kPad + (x - ax.lo) / (ax.hi - ax.lo) * (kPlotWidth - 2 * kPad);
  };
  auto sy = [&](double y) {
    return bottom - (y - ay.lo) / (ay.hi - ay.lo) * (kLineHeight - kPad);
  };
  o << "<g stroke=\"#dddddd\">\n";
  for (int i = 0; i <= ticks_of(ax); ++i) {
    const double x = sx(ax.lo + i * ax.step);
    line(o, x, top, x, bottom);
  }
  for (int i = 0; i <= ticks_of(ay); ++i) {
    const double y = sy(ay.lo + i * ay.step);
    line(o, left, y, right, y);
  }
  o << "</g>\n<g fill=\"#333333\">\n";
  const int stride = label_stride(ax, (kPlotWidth - 2 * kPad) / ticks_of(ax));
  for (int i = 0; i <= ticks_of(ax); i += stride)
    text(o, sx(ax.lo + i * ax.step), bottom + 18, tick_label(ax.lo + i * ax.step, ax), kTextSize,
         "middle");
  for (int i = 0; i <= ticks_of(ay); ++i)
    text(o, left - 8, sy(ay.lo + i * ay.step) + 4, tick_label(ay.lo + i * ay.step, ay),
         kTextSize, "end");
  text(o, (left + right) / 2, bottom + 40, p.x_label, kTextSize, "middle");
  const double ly = (top + bottom) / 2, lx = kMargin + 12;
  text(o, lx, ly, p.y_label, kTextSize, "middle",
       " transform=\"rotate(-90 " + px(lx) + ' ' + px(ly) + ")\"");
  o << "</g>\n";
  o << "<rect x=\"" << px(left) << "\" y=\"" << px(top) << "\" width=\"" << px(kPlotWidth)
    << "\" height=\"" << px(kLineHeight) << "\" fill=\"none\" stroke=\"#333333\"/>\n";
  if (!any_point(p))
    text(o, (left + right) / 2, (top + bottom) / 2, "no data", kTextSize, "middle",
         " fill=\"#999999\"");

  const double lx0 = right + kLegendGap;
  for (size_t i = 0; i < p.series.size(); ++i) {
    const Series& s = p.series[i];
    const std::string colour = colour_of(s, i);
    const std::string dash = second_round(s, i) ? " stroke-dasharray=\"6 3\"" : "";
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
        << colour << "\"><title>" << xml_escape(s.name) << ": " << group_digits(std::llround(x))
        << ' ' << xml_escape(p.x_unit) << ", " << xml_escape(value_text(y, p))
        << "</title></circle>\n";
    const double ly0 = top + 10 + 20.0 * static_cast<double>(i);
    line(o, lx0, ly0, lx0 + 24, ly0, " stroke=\"" + colour + "\" stroke-width=\"2\"" + dash);
    text(o, lx0 + 30, ly0 + 4, legend_name(s), kTextSize, "start");
    o << "</g>\n";
  }
  return std::max(bottom + 48, top + legend_height(p));
}

// ---- Bar chart ---------------------------------------------------------------------------

struct BarLayout {
  Axis av;
  double left, height, reserve;  // reserve: room right of the plot area for value labels
};

double group_height(const Panel& p) {
  const double n = static_cast<double>(std::max<size_t>(1, p.series.size()));
  return n * (kBar + kBarGap) - kBarGap;
}

BarLayout bar_layout(const Panel& p) {
  double lo = 0, hi = 0;
  for (const auto& s : p.series)
    for (const auto& [c, v] : s.points) lo = std::min(lo, v), hi = std::max(hi, v);
  if (!any_point(p)) hi = 1;
  BarLayout l{nice_axis(lo, hi), 0, 0, 0};
  double widest = 0;
  for (const auto& c : p.categories) widest = std::max(widest, text_width(c, kTextSize));
  l.left = std::max(kMinLeft, kMargin + widest + 10);
  const double groups = static_cast<double>(std::max<size_t>(1, p.categories.size()));
  l.height = 2 * kBarEnds + groups * group_height(p) + (groups - 1) * kGroupGap;
  auto sx = [&](double v) { return l.left + (v - l.av.lo) / (l.av.hi - l.av.lo) * kPlotWidth; };
  // A bar's label starts right of its end, or of zero for a negative bar (its row is empty
  // there), so that it never meets the category labels.
  for (const auto& s : p.series) {
    if (s.points.empty()) continue;
    for (size_t c = 0; c < p.categories.size(); ++c) {
      const auto it = std::find_if(s.points.begin(), s.points.end(),
                                   [&](const auto& pt) { return pt.first == double(c); });
      const std::string label = it == s.points.end() ? "not measured" : value_text(it->second, p);
      const double start = sx(it == s.points.end() ? 0 : std::max(0.0, it->second)) + 4;
      l.reserve = std::max(l.reserve, start + text_width(label, kSmallSize) + 4 -
                                          (l.left + kPlotWidth));
    }
  }
  return l;
}

double bar_width_needed(const Panel& p) {
  const BarLayout l = bar_layout(p);
  const double legend = legend_width(p);
  return l.left + kPlotWidth + l.reserve + (legend > 0 ? kLegendGap + legend : 0) + kMargin;
}

double draw_bar_chart(std::ostringstream& o, const Panel& p, double top) {
  const BarLayout l = bar_layout(p);
  const Axis& av = l.av;
  const double left = l.left, right = left + kPlotWidth, bottom = top + l.height;
  auto sx = [&](double v) { return left + (v - av.lo) / (av.hi - av.lo) * kPlotWidth; };
  o << "<g stroke=\"#dddddd\">\n";
  for (int i = 0; i <= ticks_of(av); ++i) {
    const double x = sx(av.lo + i * av.step);
    line(o, x, top, x, bottom);
  }
  o << "</g>\n<g fill=\"#333333\">\n";
  const int stride = label_stride(av, kPlotWidth / ticks_of(av));
  for (int i = 0; i <= ticks_of(av); i += stride)
    text(o, sx(av.lo + i * av.step), bottom + 18, tick_label(av.lo + i * av.step, av), kTextSize,
         "middle");
  text(o, (left + right) / 2, bottom + 40, p.y_label, kTextSize, "middle");
  const double gh = group_height(p);
  for (size_t c = 0; c < p.categories.size(); ++c) {
    const double gy = top + kBarEnds + static_cast<double>(c) * (gh + kGroupGap);
    text(o, left - 8, gy + gh / 2 + 4, p.categories[c], kTextSize, "end");
  }
  o << "</g>\n";
  o << "<rect x=\"" << px(left) << "\" y=\"" << px(top) << "\" width=\"" << px(kPlotWidth)
    << "\" height=\"" << px(l.height) << "\" fill=\"none\" stroke=\"#333333\"/>\n";
  if (av.lo < 0) line(o, sx(0), top, sx(0), bottom, " stroke=\"#333333\"");
  if (!any_point(p))
    text(o, (left + right) / 2, (top + bottom) / 2 + 4, "no data", kTextSize, "middle",
         " fill=\"#999999\"");

  const double lx0 = right + l.reserve + kLegendGap;
  for (size_t i = 0; i < p.series.size(); ++i) {
    const Series& s = p.series[i];
    const std::string colour = colour_of(s, i);
    const std::string light = second_round(s, i) ? " fill-opacity=\"0.5\"" : "";
    o << "<g>\n";
    for (size_t c = 0; c < p.categories.size() && !s.points.empty(); ++c) {
      const double y = top + kBarEnds + static_cast<double>(c) * (gh + kGroupGap) +
                       static_cast<double>(i) * (kBar + kBarGap);
      const auto it = std::find_if(s.points.begin(), s.points.end(),
                                   [&](const auto& pt) { return pt.first == double(c); });
      if (it == s.points.end()) {
        text(o, sx(0) + 4, y + kBar / 2 + 4, "not measured", kSmallSize, "start",
             " fill=\"#999999\"");
        continue;
      }
      const double v = it->second, x0 = sx(std::min(0.0, v)), x1 = sx(std::max(0.0, v));
      o << "<rect x=\"" << px(x0) << "\" y=\"" << px(y) << "\" width=\"" << px(x1 - x0)
        << "\" height=\"" << px(kBar) << "\" fill=\"" << colour << '"' << light << "><title>"
        << xml_escape(s.name) << ", " << xml_escape(p.categories[c]) << ": "
        << xml_escape(value_text(v, p)) << "</title></rect>\n";
      text(o, x1 + 4, y + kBar / 2 + 4, value_text(v, p), kSmallSize, "start",
           " fill=\"#333333\"");
    }
    const double ly0 = top + 10 + 20.0 * static_cast<double>(i);
    o << "<rect x=\"" << px(lx0 + 6) << "\" y=\"" << px(ly0 - 6) << "\" width=\"12\" "
      << "height=\"12\" fill=\"" << colour << '"' << light << "/>\n";
    text(o, lx0 + 30, ly0 + 4, legend_name(s), kTextSize, "start");
    o << "</g>\n";
  }
  return std::max(bottom + 48, top + legend_height(p));
}

// ---- Text --------------------------------------------------------------------------------

// Advance widths in em, close to DejaVu Sans (wider than Arial/Helvetica, so an estimate
// that fits DejaVu fits those as well).
double char_em(unsigned char c) {
  if (c >= '0' && c <= '9') return 0.64;
  switch (c) {
    case ' ': case '.': case ',': case ':': case ';': case '\'': case '!': case '|':
      return 0.34;
    case 'i': case 'j': case 'l':
      return 0.28;
    case 'f': case 't': case 'r': case 'I': case 'J':
      return 0.42;
    case '(': case ')': case '[': case ']': case '{': case '}': case '/': case '\\':
    case '-': case '"':
      return 0.40;
    case 'm': case 'w': case 'M': case 'W': case '%': case '@':
      return 1.0;
    case '_': case '*': case '^': case '`':
      return 0.52;
    case '=': case '+': case '<': case '>': case '~': case '#': case '&':
      return 0.84;
    default:
      break;
  }
  if (c >= 'A' && c <= 'Z') return 0.76;
  if (c >= 0x80) return 0.7;  // a lead byte (continuation bytes are skipped)
  return 0.62;
}

}  // namespace

double text_width(const std::string& s, double font_size) {
  double em = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if ((c & 0xC0) == 0x80) continue;
    if (c == '&') {  // one of xml_escape's entities counts as the character it stands for
      const size_t semi = s.find(';', i);
      const std::string e = semi == std::string::npos ? "" : s.substr(i + 1, semi - i - 1);
      const char shown = e == "lt"     ? '<'
                         : e == "gt"   ? '>'
                         : e == "quot" ? '"'
                         : e == "apos" ? '\''
                         : e == "amp"  ? '&'
                                       : '\0';
      if (shown != '\0') {
        em += char_em(static_cast<unsigned char>(shown));
        i = semi;
        continue;
      }
    }
    em += char_em(c);
  }
  return em * font_size;
}

std::vector<std::string> wrap_text(const std::string& s, double font_size, double max_width) {
  std::vector<std::string> lines;
  std::string current;
  std::istringstream words(s);
  for (std::string w; words >> w;) {
    const std::string candidate = current.empty() ? w : current + ' ' + w;
    if (!current.empty() && text_width(candidate, font_size) > max_width) {
      lines.push_back(current);
      current = w;
    } else {
      current = candidate;
    }
  }
  if (!current.empty()) lines.push_back(current);
  return lines;
}

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

std::string figure_svg(const std::vector<std::string>& title, const std::vector<Panel>& panels) {
  double width = kMinWidth;
  for (const auto& p : panels) {
    check_points(p);
    width = std::max(width, p.categories.empty() ? line_width_needed(p) : bar_width_needed(p));
  }
  width = std::ceil(width);
  const double text_room = width - 2 * kMargin;

  std::ostringstream body;
  double y = 8;
  for (size_t i = 0; i < title.size(); ++i) {
    const double size = i == 0 ? kTitleSize : kTextSize;
    for (const auto& l : wrap_text(title[i], size, text_room)) {
      y += i == 0 ? 22 : 17;
      text(body, width / 2, y, l, size, "middle", i == 0 ? " font-weight=\"bold\"" : "");
    }
  }
  y += 12;
  for (const auto& p : panels) {
    y += kPanelGap - 12;
    for (const auto& l : wrap_text(p.heading, kHeadingSize, text_room)) {
      y += 18;
      text(body, kMargin, y, l, kHeadingSize, "start", " font-weight=\"bold\"");
    }
    const double top = y + 12;
    y = p.categories.empty() ? draw_line_chart(body, p, top) : draw_bar_chart(body, p, top);
    for (const auto& n : p.notes)
      for (const auto& l : wrap_text(n, kSmallSize, text_room)) {
        y += 16;
        text(body, kMargin, y, l, kSmallSize, "start", " fill=\"#555555\"");
      }
    y += 12;
  }
  const double height = std::ceil(y + kMargin);

  std::ostringstream o;
  o << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
    << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << height
    << "\" viewBox=\"0 0 " << width << ' ' << height
    << "\" font-family=\"sans-serif\" font-size=\"12\">\n"
    << "<rect x=\"0\" y=\"0\" width=\"" << width << "\" height=\"" << height
    << "\" fill=\"white\"/>\n"
    << body.str() << "</svg>\n";
  return o.str();
}

std::string latency_plot_svg(const std::vector<Series>& series, const std::string& title) {
  const Panel p{.heading = {},
                .x_label = "active tokens",
                .y_label = "denoise latency (s)",
                .unit = "s",
                .decimals = 3,
                .categories = {},
                .series = series,
                .notes = {}};
  std::vector<std::string> lines;
  if (!title.empty()) lines.push_back(title);
  return figure_svg(lines, {p});
}

}  // namespace s3d::bench
