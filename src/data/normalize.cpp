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

PixelNormalizer::PixelNormalizer(const Normalization& norm, int64_t channels, const std::string& data_name)
    : plain_(norm.empty()), scale_values_(channels, 1.0f / 255.0f), shift_values_(channels, 0.0f) {
  if (!plain_) {
    SP_CHECK_ARG(static_cast<int64_t>(norm.mean.size()) == channels &&
        static_cast<int64_t>(norm.std.size()) == channels, "normalisation: expected ", channels,
        " means and stds (one per channel of '", data_name, "'), found ", norm.mean.size(),
        " means and ", norm.std.size(), " stds");
    for (int64_t c = 0; c < channels; ++c) {
      SP_CHECK_ARG(norm.std[c] > 0, "normalisation: std of channel ", c, " must be > 0, got ",
          norm.std[c], " (a constant channel cannot be normalised)");
      scale_values_[c] = static_cast<float>(1.0 / (255.0 * norm.std[c]));
      shift_values_[c] = static_cast<float>(-norm.mean[c] / norm.std[c]);
    }
  }
  scale_ = torch::tensor(scale_values_).view({1, channels, 1, 1});
  shift_ = torch::tensor(shift_values_).view({1, channels, 1, 1});
  divisor_ = torch::full({1}, 255.0f);
}

PixelNormalizer PixelNormalizer::on(torch::Device device) const {
  PixelNormalizer moved = *this;
  moved.scale_ = scale_.to(device);
  moved.shift_ = shift_.to(device);
  moved.divisor_ = divisor_.to(device);
  return moved;
}

void PixelNormalizer::normalize_sample(const uint8_t* pixels, int64_t plane_size, float* out) const {
  const int64_t channels = static_cast<int64_t>(scale_values_.size());
  for (int64_t c = 0; c < channels; ++c) {
    const uint8_t* src = pixels + c * plane_size;
    float* dst = out + c * plane_size;
    if (plain_) {
      for (int64_t i = 0; i < plane_size; ++i) dst[i] = static_cast<float>(src[i]) / 255.0f;
    } else {
      const float scale = scale_values_[c], shift = shift_values_[c];
      for (int64_t i = 0; i < plane_size; ++i) {
        const float scaled = static_cast<float>(src[i]) * scale;  // rounded before the sum, as two kernels are
        dst[i] = scaled + shift;
      }
    }
  }
}

torch::Tensor PixelNormalizer::operator()(const torch::Tensor& pixels, bool pinned) const {
  SP_CHECK_ARG(pixels.scalar_type() == torch::kUInt8 && pixels.dim() == 4 && pixels.size(1) == scale_.size(1),
               "pixels to normalise: expected uint8 [N, ", scale_.size(1), ", H, W], found ", pixels.dtype(), " ",
               pixels.sizes());
  SP_CHECK_ARG(pixels.device() == scale_.device(), "pixels to normalise are on ", pixels.device(),
               ", the normaliser's constants on ", scale_.device());
  torch::Tensor out = torch::empty(pixels.sizes(), pixels.options().dtype(torch::kFloat32).pinned_memory(pinned));
  out.copy_(pixels);
  return plain_ ? out.div_(divisor_) : out.mul_(scale_).add_(shift_);
}

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
