#include "stalepipe/data/normalize.h"

#include <algorithm>
#include <array>
#include <cmath>

#include "stalepipe/common/error.h"
#include "stalepipe/data/loader.h"

namespace stalepipe {
namespace data {

namespace {

// Per-channel histograms of byte values: exact integer sums, whatever the order.
using Histograms = std::vector<std::array<uint64_t, 256>>;

void add_to_histograms(const torch::Tensor& images, Histograms& histograms) {
  const int64_t n = images.size(0), c = images.size(1);
  const int64_t plane = images.size(2) * images.size(3);
  const uint8_t* data = images.data_ptr<uint8_t>();
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t ch = 0; ch < c; ++ch) {
      const uint8_t* p = data + (i * c + ch) * plane;
      auto& histogram = histograms[ch];
      for (int64_t k = 0; k < plane; ++k) {
        ++histogram[p[k]];
      }
    }
  }
}

Normalization from_histograms(const Histograms& histograms) {
  Normalization result;
  for (const auto& histogram : histograms) {
    double count = 0, sum = 0;
    for (int v = 0; v < 256; ++v) {
      count += static_cast<double>(histogram[v]);
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

Histograms empty_histograms(int64_t channels) {
  Histograms histograms(channels);
  for (auto& histogram : histograms) histogram.fill(0);
  return histograms;
}

}  // namespace

Normalization compute_normalization(const Dataset& train) {
  SP_CHECK_ARG(train.size() > 0, "cannot compute normalisation of data set '", train.name,
      "': it is empty");
  SP_CHECK_ARG(train.images.scalar_type() == torch::kUInt8, "cannot compute normalisation of '",
      train.name, "': expected uint8 images, found ", train.images.scalar_type());
  Histograms histograms = empty_histograms(train.images.size(1));
  add_to_histograms(train.images.contiguous(), histograms);
  return from_histograms(histograms);
}

Normalization compute_normalization(std::shared_ptr<const SampleSource> source, LoaderOptions options) {
  SP_CHECK_ARG(source && source->size() > 0, "cannot compute normalisation of data set '",
      source ? source->name() : std::string(), "': it is empty");
  options.normalization({}).resized_crop(false).drop_last(false).pin_memory(false).batch_size(256);
  const Loader loader(std::move(source), options);
  Histograms histograms = empty_histograms(loader.source().channels());
  const int64_t n = loader.source().size();
  for (int64_t begin = 0; begin < n; begin += options.batch_size()) {
    const int64_t count = std::min(options.batch_size(), n - begin);
    add_to_histograms(loader.pixels(torch::arange(begin, begin + count, torch::kInt64), 0), histograms);
  }
  return from_histograms(histograms);
}

}  // namespace data
}  // namespace stalepipe
