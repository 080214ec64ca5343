// How long a pipeline-register message takes between two devices: a latency plus the bytes
// over a bandwidth. The simulator (simulate.h) charges one message per register and direction
// per mini-batch: the partition's output activation forward, the gradient of that activation
// (the same shape, so the same bytes) backward.
//
// Presets (one direction of one link; the sources and assumptions are in docs/design.md,
// "The 2-GPU prediction"):
//   ideal    unlimited bandwidth, no latency: compute alone;
//   nvlink4  450 GB/s, 5 us  (H100 SXM: 18 NVLink 4 links x 25 GB/s per direction);
//   pcie5    50 GB/s, 10 us  (PCIe 5.0 x16: 64 GB/s raw per direction, ~80% effective);
//   pcie4    25 GB/s, 10 us  (PCIe 4.0 x16: 32 GB/s raw, ~80% effective);
//   pcie3    12 GB/s, 10 us  (PCIe 3.0 x16: 16 GB/s raw, ~75% effective).
// A custom link is "BANDWIDTH,LATENCY" in bytes/s and seconds, e.g. "25e9,10e-6".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace stalepipe::sim {

struct LinkModel {
  std::string name = "ideal";  // a preset's name, or "custom"
  double bandwidth_bytes_per_second = 0;  // 0: unlimited
  double latency_seconds = 0;

  // latency + bytes / bandwidth (just the latency when the bandwidth is unlimited).
  double message_seconds(int64_t bytes) const;
  // "nvlink4 (450 GB/s, 5 us)"; "custom (25 GB/s, 10 us)".
  std::string describe() const;
};

// A link of unlimited bandwidth whose every message takes `seconds`: the fixed transfer time
// per message (`simulate --transfer-ms`).
LinkModel fixed_link(double seconds);

// The presets above, in order (ideal first).
const std::vector<LinkModel>& link_presets();

// A preset's name or "BANDWIDTH,LATENCY". Throws UsageError naming `field` and the fault: an
// unknown name (listing the presets), a number that does not parse, a bandwidth <= 0 or a
// latency < 0.
LinkModel parse_link(const std::string& text, const std::string& field);

}  // namespace stalepipe::sim
