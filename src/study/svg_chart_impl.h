// Minimal SVG charts for the study's results (no plotting dependency).
#pragma once

#include <string>
#include <vector>

namespace stalepipe::study::detail {

struct Series {
  std::string label;
  std::vector<double> x, y;
  // Optional: half-width of the spread per point, drawn as error bars (or, for lines with a
  // spread at every point, as a band).
  std::vector<double> y_spread;
};

// Lines with markers (draw_lines) or markers only, with axes, ticks, a legend and labels.
std::string svg_chart(const std::string& title, const std::string& x_label,
                      const std::string& y_label, const std::vector<Series>& series,
                      bool draw_lines);

}  // namespace stalepipe::study::detail
