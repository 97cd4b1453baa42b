// Checks of the bench figures shared by their tests: well-formed XML (a small parser, itself
// tested on bad input), and a layout check that every text, marker and bar lies inside the
// canvas and that no two texts overlap, with text sizes from svg.h's width estimate.
#pragma once

#include <algorithm>
#include <cctype>
#include <cmath>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "bench/svg.h"
#include "core/error.h"

namespace s3d::bench::svgtest {

inline bool valid_entity(const std::string& s, size_t amp) {
  const size_t semi = s.find(';', amp);
  if (semi == std::string::npos) return false;
  static const std::set<std::string> known = {"amp", "lt", "gt", "quot", "apos"};
  const std::string name = s.substr(amp + 1, semi - amp - 1);
  return known.count(name) || std::regex_match(name, std::regex("#[0-9]+|#x[0-9a-fA-F]+"));
}

// "" when `xml` is one well-formed element (after an optional declaration): every tag
// closed in order, attributes quoted, no raw '<' or stray '&' in text or values;
// otherwise what is wrong and where.
inline std::string xml_problem(const std::string& xml) {
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

inline size_t count(const std::string& hay, const std::string& needle) {
  size_t n = 0;
  for (size_t p = hay.find(needle); p != std::string::npos; p = hay.find(needle, p + 1)) ++n;
  return n;
}

// The value of attribute `name` in the tag `tag`, or NAN.
inline double attr(const std::string& tag, const std::string& name) {
  std::smatch m;
  if (!std::regex_search(tag, m, std::regex("\\s" + name + "=\"(-?[0-9.]+)\""))) return NAN;
  return std::stod(m[1].str());
}

struct Box {
  double x0, y0, x1, y1;
  std::string what;
};

// The box of every <text>: the estimated advance width, ascent 0.8 and descent 0.25 of the
// font size, turned for rotate(-90).
inline std::vector<Box> text_boxes(const std::string& svg) {
  std::vector<Box> boxes;
  const std::regex text_re("<text([^>]*)>([^<]*)</text>");
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), text_re);
       it != std::sregex_iterator(); ++it) {
    const std::string tag = (*it)[1].str(), content = (*it)[2].str();
    const double x = attr(tag, "x"), y = attr(tag, "y");
    double size = attr(tag, "font-size");
    if (std::isnan(size)) size = 12;
    const double w = text_width(content, size);
    double start = x;
    if (tag.find("text-anchor=\"middle\"") != std::string::npos) start = x - w / 2;
    if (tag.find("text-anchor=\"end\"") != std::string::npos) start = x - w;
    // Turned by -90 degrees about the anchor, the text runs upwards from y + (x - start).
    if (tag.find("rotate(-90") != std::string::npos)
      boxes.push_back({x - 0.8 * size, y + (x - start) - w, x + 0.25 * size, y + (x - start),
                       content});
    else
      boxes.push_back({start, y - 0.8 * size, start + w, y + 0.25 * size, content});
  }
  return boxes;
}

// "" when every text, circle and rect of `svg` lies inside its canvas and no two texts
// overlap; otherwise the first problem.
inline std::string layout_problem(const std::string& svg) {
  std::smatch m;
  if (!std::regex_search(svg, m, std::regex("viewBox=\"0 0 ([0-9.]+) ([0-9.]+)\"")))
    return "no viewBox";
  const double width = std::stod(m[1].str()), height = std::stod(m[2].str());
  auto inside = [&](double x0, double y0, double x1, double y1) {
    return x0 >= -0.01 && y0 >= -0.01 && x1 <= width + 0.01 && y1 <= height + 0.01;
  };
  const std::vector<Box> boxes = text_boxes(svg);
  for (const auto& b : boxes)
    if (!inside(b.x0, b.y0, b.x1, b.y1))
      return cat("text '", b.what, "' [", b.x0, ", ", b.y0, ", ", b.x1, ", ", b.y1,
                 "] leaves the ", width, " x ", height, " canvas");
  for (size_t i = 0; i < boxes.size(); ++i)
    for (size_t j = i + 1; j < boxes.size(); ++j) {
      const Box &a = boxes[i], &b = boxes[j];
      const double ox = std::min(a.x1, b.x1) - std::max(a.x0, b.x0);
      const double oy = std::min(a.y1, b.y1) - std::max(a.y0, b.y0);
      if (ox > 0.5 && oy > 0.5) return cat("texts '", a.what, "' and '", b.what, "' overlap");
    }
  const std::regex circle("<circle([^>]*)>");
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), circle); it != std::sregex_iterator();
       ++it) {
    const std::string tag = (*it)[1].str();
    const double cx = attr(tag, "cx"), cy = attr(tag, "cy"), r = attr(tag, "r");
    if (!inside(cx - r, cy - r, cx + r, cy + r))
      return cat("a marker at ", cx, ", ", cy, " leaves the canvas");
  }
  const std::regex rect("<rect([^>]*)>");
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), rect); it != std::sregex_iterator();
       ++it) {
    const std::string tag = (*it)[1].str();
    const double x = attr(tag, "x"), y = attr(tag, "y"), w = attr(tag, "width"),
                 h = attr(tag, "height");
    if (std::isnan(x) || std::isnan(w)) continue;  // e.g. width="100%"
    if (!inside(x, y, x + w, y + h)) return cat("a rect at ", x, ", ", y, " leaves the canvas");
  }
  return "";
}

}  // namespace s3d::bench::svgtest
