#include "svg_chart_impl.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

namespace stalepipe::study::detail {
namespace {

constexpr double kWidth = 720, kHeight = 440;
constexpr double kLeft = 70, kRight = 200, kTop = 40, kBottom = 55;
const char* const kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                               "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

std::string escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else if (c == '&') out += "&amp;";
    else out += c;
  }
  return out;
}

// A "nice" tick step for a range, so axes read 0.80 0.85 0.90 rather than 0.8132 ...
double tick_step(double span) {
  const double raw = span / 5;
  const double power = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0}) {
    if (raw <= m * power) return m * power;
  }
  return 10 * power;
}

// The data range (padded) and its mapping to the plot area.
struct Frame {
  double x0, x1, y0, y1;
  double plot_w = kWidth - kLeft - kRight, plot_h = kHeight - kTop - kBottom;
  double px(double x) const { return kLeft + (x - x0) / (x1 - x0) * plot_w; }
  double py(double y) const { return kTop + (1 - (y - y0) / (y1 - y0)) * plot_h; }
};

Frame frame_of(const std::vector<Series>& series) {
  double x0 = std::numeric_limits<double>::max(), x1 = -x0, y0 = x0, y1 = -x0;
  for (const auto& s : series) {
    for (size_t i = 0; i < s.x.size(); ++i) {
      const double spread = i < s.y_spread.size() ? s.y_spread[i] : 0;
      x0 = std::min(x0, s.x[i]);
      x1 = std::max(x1, s.x[i]);
      y0 = std::min(y0, s.y[i] - spread);
      y1 = std::max(y1, s.y[i] + spread);
    }
  }
  if (x0 > x1) x0 = 0, x1 = 1, y0 = 0, y1 = 1;
  if (x1 - x0 < 1e-12) x0 -= 0.5, x1 += 0.5;
  if (y1 - y0 < 1e-12) y0 -= 0.5, y1 += 0.5;
  const double x_pad = 0.04 * (x1 - x0), y_pad = 0.05 * (y1 - y0);
  return Frame{x0 - x_pad, x1 + x_pad, y0 - y_pad, y1 + y_pad};
}

void draw_axes(std::ostringstream& svg, const Frame& f) {
  for (int axis = 0; axis < 2; ++axis) {
    const double lo = axis ? f.y0 : f.x0, hi = axis ? f.y1 : f.x1;
    const double step = tick_step(hi - lo);
    for (double v = std::ceil(lo / step) * step; v <= hi + 1e-9; v += step) {
      std::ostringstream label;
      const double tick = std::round(v / step * 1000) / 1000 * step;
      label << (std::abs(tick) < 1e-9 * step ? 0.0 : tick);  // never "-0"
      if (axis == 0) {
        svg << "<line x1='" << f.px(v) << "' y1='" << kTop + f.plot_h << "' x2='" << f.px(v) << "' y2='"
            << kTop + f.plot_h + 5 << "' stroke='#444'/><text x='" << f.px(v) << "' y='"
            << kTop + f.plot_h + 18 << "' text-anchor='middle'>" << label.str() << "</text>\n";
      } else {
        svg << "<line x1='" << kLeft << "' y1='" << f.py(v) << "' x2='" << kLeft + f.plot_w << "' y2='"
            << f.py(v) << "' stroke='#ddd'/><text x='" << kLeft - 6 << "' y='" << f.py(v) + 4
            << "' text-anchor='end'>" << label.str() << "</text>\n";
      }
    }
  }
}

// Series k: its band or error bars, line, markers and legend entry.
void draw_series(std::ostringstream& svg, const Frame& f, const Series& s, size_t k, bool draw_lines) {
  const char* color = kColors[k % (sizeof kColors / sizeof *kColors)];
  const bool band = draw_lines && s.x.size() > 1 && s.y_spread.size() == s.x.size();
  if (band) {  // the spread as a shaded band around the line
    svg << "<polygon fill='" << color << "' fill-opacity='0.18' stroke='none' points='";
    for (size_t i = 0; i < s.x.size(); ++i) svg << f.px(s.x[i]) << "," << f.py(s.y[i] + s.y_spread[i]) << " ";
    for (size_t i = s.x.size(); i-- > 0;) svg << f.px(s.x[i]) << "," << f.py(s.y[i] - s.y_spread[i]) << " ";
    svg << "'/>\n";
  }
  if (draw_lines && s.x.size() > 1) {
    svg << "<polyline fill='none' stroke='" << color << "' stroke-width='2' points='";
    for (size_t i = 0; i < s.x.size(); ++i) svg << f.px(s.x[i]) << "," << f.py(s.y[i]) << " ";
    svg << "'/>\n";
  }
  for (size_t i = 0; i < s.x.size(); ++i) {
    if (!band && i < s.y_spread.size() && s.y_spread[i] > 0) {
      svg << "<line x1='" << f.px(s.x[i]) << "' y1='" << f.py(s.y[i] - s.y_spread[i]) << "' x2='" << f.px(s.x[i])
          << "' y2='" << f.py(s.y[i] + s.y_spread[i]) << "' stroke='" << color << "'/>\n";
    }
    svg << "<circle cx='" << f.px(s.x[i]) << "' cy='" << f.py(s.y[i]) << "' r='3.5' fill='" << color << "'/>\n";
  }
  const double ly = kTop + 14 + 18 * static_cast<double>(k);
  svg << "<rect x='" << kWidth - kRight + 12 << "' y='" << ly - 9 << "' width='12' height='12' fill='" << color
      << "'/><text x='" << kWidth - kRight + 30 << "' y='" << ly + 1 << "'>" << escape(s.label) << "</text>\n";
}

}  // namespace

std::string svg_chart(const std::string& title, const std::string& x_label,
                      const std::string& y_label, const std::vector<Series>& series,
                      bool draw_lines) {
  const Frame f = frame_of(series);
  std::ostringstream svg;
  svg.precision(6);
  svg << "<svg xmlns='http://www.w3.org/2000/svg' width='" << kWidth << "' height='" << kHeight
      << "' font-family='sans-serif' font-size='12'>\n"
      << "<rect width='100%' height='100%' fill='white'/>\n"
      << "<text x='" << kWidth / 2 << "' y='22' text-anchor='middle' font-size='15'>" << escape(title) << "</text>\n"
      << "<rect x='" << kLeft << "' y='" << kTop << "' width='" << f.plot_w << "' height='" << f.plot_h
      << "' fill='none' stroke='#444'/>\n";
  draw_axes(svg, f);
  svg << "<text x='" << kLeft + f.plot_w / 2 << "' y='" << kHeight - 12 << "' text-anchor='middle'>"
      << escape(x_label) << "</text>\n"
      << "<text transform='translate(16," << kTop + f.plot_h / 2 << ") rotate(-90)' text-anchor='middle'>"
      << escape(y_label) << "</text>\n";
  for (size_t k = 0; k < series.size(); ++k) draw_series(svg, f, series[k], k, draw_lines);
  svg << "</svg>\n";
  return svg.str();
}

}  // namespace stalepipe::study::detail
