// The median of timing samples (profile repeats, alternated bench runs).
#pragma once

#include <algorithm>
#include <vector>

namespace stalepipe {

// Middle value, or the mean of the two middle values for an even count. `v` must not be empty.
inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace stalepipe
