#include "stalepipe/data/normalize.h"

#include <array>
#include <cmath>

#include "stalepipe/common/error.h"

namespace stalepipe {
namespace data {

Normalization compute_normalization(const Dataset& train) {
  SP_CHECK_ARG(train.size() > 0, "cannot compute normalisation of data set '", train.name,
      "': it is empty");
  SP_CHECK_ARG(train.images.scalar_type() == torch::kUInt8, "cannot compute normalisation of '",
      train.name, "': expected uint8 images, found ", train.images.scalar_type());
  const torch::Tensor images = train.images.contiguous();
  const int64_t n = images.size(0), c = images.size(1);
  const int64_t plane = images.size(2) * images.size(3);
  const uint8_t* data = images.data_ptr<uint8_t>();

  // A histogram per channel makes the sums exact integers; the moments then come from 256 terms.
  std::vector<std::array<uint64_t, 256>> histograms(c);
  for (auto& histogram : histograms) {
    histogram.fill(0);
  }
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t ch = 0; ch < c; ++ch) {
      const uint8_t* p = data + (i * c + ch) * plane;
      auto& histogram = histograms[ch];
      for (int64_t k = 0; k < plane; ++k) {
        ++histogram[p[k]];
      }
    }
  }

  Normalization result;
  const double count = static_cast<double>(n * plane);
  for (const auto& histogram : histograms) {
    double sum = 0;
    for (int v = 0; v < 256; ++v) {
      sum += static_cast<double>(histogram[v]) * (v / 255.0);
    }
    const double mean = sum / count;
    double squares = 0;
    for (int v = 0; v < 256; ++v) {
      const double d = v / 255.0 - mean;
      squares += static_cast<double>(histogram[v]) * d * d;
    }
    result.mean.push_back(mean);
    result.std.push_back(std::sqrt(squares / count));
  }
  return result;
}

}  // namespace data
}  // namespace stalepipe
