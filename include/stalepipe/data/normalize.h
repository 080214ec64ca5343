// Per-channel input normalisation: x = (pixel / 255 - mean[c]) / std[c].
#pragma once

#include <string>
#include <vector>

#include <torch/types.h>

#include "stalepipe/data/dataset.h"

namespace stalepipe {
namespace data {

// One entry per channel, in units of pixel/255. Both empty means "no normalisation".
struct Normalization {
  std::vector<double> mean;
  std::vector<double> std;

  bool empty() const { return mean.empty() && std.empty(); }
};

// Turns uint8 pixels [N, C, H, W] into float32 x = pixel * scale[c] + shift[c] (scale =
// 1 / (255 std[c]), shift = -mean[c] / std[c]), or pixel / 255 without normalisation, as
// whole-tensor operations on the pixels' device. Each operation is one IEEE-rounded kernel (a
// product, then a sum; a true division), so a GPU gives the values the host does: the loader
// normalises with one on the host, and a GPU that takes raw pixels (LoaderOptions::raw_pixels)
// with a copy on its device.
class PixelNormalizer {
 public:
  // Throws UsageError for a normalisation whose size differs from `channels` or has a
  // std <= 0; `data_name` names the data set in the message.
  PixelNormalizer(const Normalization& normalization, int64_t channels, const std::string& data_name);

  // The same normaliser with its constants on `device`.
  PixelNormalizer on(torch::Device device) const;

  // pixels: uint8 [N, C, H, W] on this normaliser's device (UsageError otherwise). `pinned`:
  // the result in page-locked host memory (a CPU normaliser of a CUDA LibTorch).
  torch::Tensor operator()(const torch::Tensor& pixels, bool pinned = false) const;

  // One sample's pixels (contiguous [C, plane_size] bytes) into `out` (as many floats) on the
  // host, value by value, with the same roundings as operator(): the loader's decode threads
  // normalise each sample as they make it.
  void normalize_sample(const uint8_t* pixels, int64_t plane_size, float* out) const;

  // The per-channel constants, as floats.
  const std::vector<float>& scale_values() const { return scale_values_; }
  const std::vector<float>& shift_values() const { return shift_values_; }

 private:
  bool plain_ = true;  // no normalisation: pixel / 255
  std::vector<float> scale_values_, shift_values_;
  torch::Tensor scale_;    // float32 [1, C, 1, 1]
  torch::Tensor shift_;    // float32 [1, C, 1, 1]
  torch::Tensor divisor_;  // float32 [1]: 255, a tensor so that no device divides by its reciprocal
};

// The exact mean and population standard deviation of pixel/255 for each channel over every
// pixel of `train` (computed from a per-channel histogram of the byte values, in double, so the
// result does not depend on summation order). A constant channel yields std 0, which the
// Loader rejects. Throws UsageError for an empty data set.
Normalization compute_normalization(const Dataset& train);

}  // namespace data
}  // namespace stalepipe
