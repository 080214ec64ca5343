// What the image codecs (image.cpp, jpeg.cpp, png.cpp) share: the checks every decode makes
// and the row conversions both formats end in.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include <torch/types.h>

#include "stalepipe/data/image.h"

namespace stalepipe {
namespace data {
namespace detail {

// One decode as decode_image was asked for it, in pixels of the stored image.
struct DecodeRequest {
  const uint8_t* bytes;
  size_t size;
  const std::string& name;
  int64_t channels;
  bool whole;  // the whole image; `region` is then ignored
  Region region;
  int64_t min_height;
  int64_t min_width;
  double max_megapixels;
};

// Throws RuntimeError naming `name` for an image of zero pixels or above max_megapixels.
void check_pixels(const std::string& name, const char* format, int64_t height, int64_t width,
                  double max_megapixels);

// The region of `request` inside an image of height x width (the whole image where asked);
// UsageError naming the file where it is empty or reaches outside.
Region checked_region(const DecodeRequest& request, int64_t height, int64_t width);

// Stores one decoded row of `width` interleaved pixels of `in_channels` (1 gray, 3 RGB) into
// row `y` of the contiguous uint8 [out_channels, height, width] planes at `out` (`plane` =
// height * width), replicating gray or converting RGB to PIL's L as needed.
void store_row(const uint8_t* row, int in_channels, int64_t width, uint8_t* out,
               int64_t out_channels, int64_t plane, int64_t y);

// `image` (uint8 [C, H, W], C = 1, 3 or up to max_channels, sides 1..max_side) as contiguous
// [H, W, C] for an encoder; UsageError naming `format` otherwise.
torch::Tensor encoder_pixels(const torch::Tensor& image, const char* format,
                             int64_t max_channels, int64_t max_side);

ImageInfo probe_jpeg(const uint8_t* bytes, size_t size, const std::string& name,
                     double max_megapixels);
ImageInfo probe_png(const uint8_t* bytes, size_t size, const std::string& name,
                    double max_megapixels);

// Decode after the signature and the trailer were checked (decode_image).
torch::Tensor decode_jpeg(const DecodeRequest& request);
torch::Tensor decode_png(const DecodeRequest& request);

}  // namespace detail
}  // namespace data
}  // namespace stalepipe
