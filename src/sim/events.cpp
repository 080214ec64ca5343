#include "stalepipe/sim/events.h"

#include <algorithm>
#include <cstdio>
#include <limits>

#include <nlohmann/json.hpp>

namespace stalepipe::sim {
namespace {

std::string escape_xml(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

}  // namespace

std::string to_chrome_trace(const std::vector<OpEvent>& events) {
  double origin = std::numeric_limits<double>::infinity();
  for (const auto& e : events) origin = std::min(origin, e.start_seconds);
  nlohmann::json list = nlohmann::json::array();
  for (const auto& e : events) {
    list.push_back({{"name", e.sum ? "S" + std::to_string(e.op.step) : schedule::to_string(e.op)},
                    {"cat", e.sum                                       ? "sum"
                            : e.op.kind == schedule::OpKind::kForward  ? "forward"
                            : e.op.kind == schedule::OpKind::kBackward ? "backward"
                                                                       : "update"},
                    {"ph", "X"},
                    {"ts", (e.start_seconds - origin) * 1e6},
                    {"dur", (e.end_seconds - e.start_seconds) * 1e6},
                    {"pid", 1},
                    {"tid", e.worker + 1},
                    {"args", {{"step", e.op.step}}}});
  }
  int workers = 0;
  for (const auto& e : events) workers = std::max(workers, e.worker + 1);
  for (int k = 0; k < workers; ++k) {  // name the rows "worker k"
    list.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 1}, {"tid", k + 1},
                    {"args", {{"name", "worker " + std::to_string(k + 1)}}}});
  }
  return nlohmann::json{{"traceEvents", list}, {"displayTimeUnit", "ms"}}.dump() + "\n";
}

namespace {

// One event's box (and label) at [x0, x0 + w] in the row at y; t0: the diagram's origin.
std::string event_svg(const OpEvent& e, double x0, double w, double y, double box, double t0) {
  char buf[512];
  std::string svg;
  if (e.sum) {
    std::snprintf(buf, sizeof buf,
                  "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" fill=\"#9a9a9a\">"
                  "<title>sum of %lld's gradient with the replicas %.3f-%.3f ms</title></rect>\n",
                  x0, y, w, box, static_cast<long long>(e.op.step), (e.start_seconds - t0) * 1e3,
                  (e.end_seconds - t0) * 1e3);
    svg += buf;
    return svg;
  }
  if (e.op.kind == schedule::OpKind::kUpdate) {
    std::snprintf(buf, sizeof buf,
                  "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" fill=\"#333\">"
                  "<title>%s</title></rect>\n",
                  x0, y, std::max(w, 1.0), box, schedule::to_string(e.op).c_str());
    svg += buf;
    return svg;
  }
  const bool fwd = e.op.kind == schedule::OpKind::kForward;
  std::snprintf(buf, sizeof buf,
                "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" fill=\"%s\" "
                "stroke=\"white\" stroke-width=\"0.5\"><title>%s %.3f-%.3f ms</title></rect>\n",
                x0, y, w, box, fwd ? "#4c78a8" : "#f58518", schedule::to_string(e.op).c_str(),
                (e.start_seconds - t0) * 1e3, (e.end_seconds - t0) * 1e3);
  svg += buf;
  const std::string label = std::to_string(e.op.step);
  const double font = std::min(11.0, w / (0.65 * static_cast<double>(label.size()) + 0.3));
  if (font >= 5) {  // the label shrinks with its box; boxes too narrow stay unlabelled
    std::snprintf(buf, sizeof buf,
                  "<text x=\"%.2f\" y=\"%.1f\" text-anchor=\"middle\" fill=\"white\" "
                  "font-size=\"%.1f\">%s</text>\n",
                  x0 + w / 2, y + box / 2 + font / 3, font, label.c_str());
    svg += buf;
  }
  return svg;
}

}  // namespace

std::string space_time_svg(const std::vector<OpEvent>& events, int num_workers,
                           const std::string& title) {
  for (const auto& e : events) num_workers = std::max(num_workers, e.worker + 1);
  num_workers = std::max(num_workers, 1);
  double t0 = std::numeric_limits<double>::infinity(), t1 = -t0;
  for (const auto& e : events) {
    t0 = std::min(t0, e.start_seconds);
    t1 = std::max(t1, e.end_seconds);
  }
  if (events.empty()) t0 = 0, t1 = 1;
  const double span = std::max(t1 - t0, 1e-12);
  // Wide enough that a typical box can carry its mini-batch number.
  std::vector<size_t> ops_per_worker(num_workers, 0);
  for (const auto& e : events) {
    if (e.op.kind != schedule::OpKind::kUpdate) ++ops_per_worker[e.worker];
  }
  const size_t most = *std::max_element(ops_per_worker.begin(), ops_per_worker.end());
  const double left = 80, top = 40, row = 36, box = 28;
  const double width = std::clamp(24.0 * static_cast<double>(most), 1200.0, 24000.0);
  const double height = top + row * num_workers + 40;
  auto x = [&](double t) { return left + (t - t0) / span * width; };
  char buf[512];
  std::string svg;
  std::snprintf(buf, sizeof buf,
                "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
                "font-family=\"sans-serif\" font-size=\"11\">\n"
                "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
                "<text x=\"%.0f\" y=\"20\" font-size=\"14\">%s</text>\n",
                left + width + 20, height, left, escape_xml(title).c_str());
  svg += buf;
  for (int k = 0; k < num_workers; ++k) {
    std::snprintf(buf, sizeof buf,
                  "<text x=\"8\" y=\"%.1f\">worker %d</text>\n"
                  "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ccc\"/>\n",
                  top + row * k + box / 2 + 4, k + 1, left, top + row * k + box, left + width,
                  top + row * k + box);
    svg += buf;
  }
  for (const auto& e : events) {
    const double x0 = x(e.start_seconds);
    svg += event_svg(e, x0, std::max(x(e.end_seconds) - x0, 0.5), top + row * e.worker, box, t0);
  }
  std::snprintf(buf, sizeof buf,
                "<text x=\"%.0f\" y=\"%.0f\">0</text><text x=\"%.0f\" y=\"%.0f\" "
                "text-anchor=\"end\">%.3f ms</text>\n"
                "<text x=\"%.0f\" y=\"%.0f\" fill=\"#4c78a8\">forward</text>"
                "<text x=\"%.0f\" y=\"%.0f\" fill=\"#f58518\">backward</text>"
                "<text x=\"%.0f\" y=\"%.0f\" fill=\"#333\">update</text>"
                "<text x=\"%.0f\" y=\"%.0f\" fill=\"#9a9a9a\">replicas' gradient sum</text>\n</svg>\n",
                left, height - 16, left + width, height - 16, span * 1e3, left + 200,
                height - 16, left + 280, height - 16, left + 370, height - 16, left + 440, height - 16);
  svg += buf;
  return svg;
}

}  // namespace stalepipe::sim
