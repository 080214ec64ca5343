// Minimal SVG charts for the study's results (no plotting dependency).
#pragma once

#include <string>
#include <vector>

namespace stalepipe::study::detail {

struct Series {
  std::string label;
  std::vector<double> x, y;
  std::vector<double> y_spread;  // optional: half-width of an error bar per point
};

// Lines with markers (draw_lines) or markers only, with axes, ticks, a legend and labels.
std::string svg_chart(const std::string& title, const std::string& x_label,
                      const std::string& y_label, const std::vector<Series>& series,
                      bool draw_lines);

}  // namespace stalepipe::study::detail
