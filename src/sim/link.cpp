#include "stalepipe/sim/link.h"

#include <cmath>
#include <cstdlib>

#include "stalepipe/common/error.h"

namespace stalepipe::sim {
namespace {

// Parses a whole finite number; false if `text` is not one.
bool parse_number(const std::string& text, double& value) {
  if (text.empty()) return false;
  char* end = nullptr;
  value = std::strtod(text.c_str(), &end);
  return end == text.c_str() + text.size() && std::isfinite(value);
}

std::string preset_names() {
  std::string names;
  for (const auto& link : link_presets()) names += (names.empty() ? "" : ", ") + link.name;
  return names;
}

}  // namespace

double LinkModel::message_seconds(int64_t bytes) const {
  const double transfer = bandwidth_bytes_per_second > 0 ? static_cast<double>(bytes) / bandwidth_bytes_per_second : 0;
  return latency_seconds + transfer;
}

std::string LinkModel::describe() const {
  const std::string bandwidth =
      bandwidth_bytes_per_second > 0 ? c10::str(bandwidth_bytes_per_second / 1e9, " GB/s") : "unlimited";
  return c10::str(name, " (", bandwidth, ", ", latency_seconds * 1e6, " us)");
}

LinkModel fixed_link(double seconds) {
  LinkModel link;
  link.name = seconds == 0 ? "ideal" : "fixed";
  link.latency_seconds = seconds;
  return link;
}

const std::vector<LinkModel>& link_presets() {
  static const std::vector<LinkModel> presets = {{"ideal", 0, 0},
                                                 {"nvlink4", 450e9, 5e-6},
                                                 {"pcie5", 50e9, 10e-6},
                                                 {"pcie4", 25e9, 10e-6},
                                                 {"pcie3", 12e9, 10e-6}};
  return presets;
}

LinkModel parse_link(const std::string& text, const std::string& field) {
  for (const auto& link : link_presets()) {
    if (text == link.name) return link;
  }
  const auto comma = text.find(',');
  SP_CHECK_ARG(comma != std::string::npos, field, " ", text, ": not a link; expected one of ", preset_names(),
               " or BANDWIDTH,LATENCY in bytes/s and seconds, e.g. 25e9,10e-6");
  LinkModel link;
  link.name = "custom";
  const std::string bandwidth = text.substr(0, comma), latency = text.substr(comma + 1);
  SP_CHECK_ARG(parse_number(bandwidth, link.bandwidth_bytes_per_second) && link.bandwidth_bytes_per_second > 0,
               field, " ", text, ": the bandwidth '", bandwidth, "' must be a number of bytes/s > 0");
  SP_CHECK_ARG(parse_number(latency, link.latency_seconds) && link.latency_seconds >= 0, field, " ", text,
               ": the latency '", latency, "' must be a number of seconds >= 0");
  return link;
}

}  // namespace stalepipe::sim
