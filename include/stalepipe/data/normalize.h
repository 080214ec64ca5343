// Per-channel input normalisation: x = (pixel / 255 - mean[c]) / std[c].
#pragma once

#include <vector>

#include "stalepipe/data/dataset.h"

namespace stalepipe {
namespace data {

// One entry per channel, in units of pixel/255. Both empty means "no normalisation".
struct Normalization {
  std::vector<double> mean;
  std::vector<double> std;

  bool empty() const { return mean.empty() && std.empty(); }
};

// The exact mean and population standard deviation of pixel/255 for each channel over every
// pixel of `train` (computed from a per-channel histogram of the byte values, in double, so the
// result does not depend on summation order). A constant channel yields std 0, which the
// Loader rejects. Throws UsageError for an empty data set.
Normalization compute_normalization(const Dataset& train);

}  // namespace data
}  // namespace stalepipe
