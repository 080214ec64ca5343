// Encoded images (JPEG through libjpeg-turbo, PNG through libpng): their header, their pixels,
// and the two writers the tests and `stalepipe data export` use.
//
// Pixels are uint8 [C, H, W] tensors, C = 1 (gray) or 3 (RGB), whatever the file stores:
//   gray, gray + alpha        -> C = 1 as is (alpha dropped), or 3 by replication
//   RGB, RGBA, palette        -> C = 3 (alpha dropped, palette expanded), or 1 as
//                                L = (299 R + 587 G + 114 B) / 1000 (PIL's convert("L"))
//   16-bit samples            -> the high byte (PIL's and libpng's strip-16)
//   CMYK / YCCK JPEG (Adobe)  -> RGB as PIL converts it
// Alpha is dropped without compositing, as PIL's convert("RGB") does.
//
// Errors are RuntimeError naming `name` (the file) and the fault in one line: not an image,
// truncated, corrupt, too large (more than max_megapixels), an unsupported variant.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <torch/types.h>

namespace stalepipe {
namespace data {

// Images above this many pixels (in millions) are refused before any pixel buffer is
// allocated, unless the caller sets another bound (PIL warns above 89.5 and refuses above 179).
constexpr double kDefaultMaxMegapixels = 100;

enum class ImageFormat { kJpeg, kPng };
const char* to_string(ImageFormat format);  // "JPEG", "PNG"

// A rectangle of an image, in pixels of the stored image.
struct Region {
  int64_t top = 0;
  int64_t left = 0;
  int64_t height = 0;
  int64_t width = 0;
  bool operator==(const Region& o) const {
    return top == o.top && left == o.left && height == o.height && width == o.width;
  }
};

// UsageError "<what>: region (...) is not inside the W x H image" unless `region` is
// non-empty and inside an image of height x width.
void check_region(const Region& region, int64_t height, int64_t width, const std::string& what);

struct ImageInfo {
  ImageFormat format = ImageFormat::kPng;
  int64_t height = 0;
  int64_t width = 0;
  bool color = false;  // RGB, palette or CMYK stored; false for gray (with or without alpha)
  std::string mode;    // for listings: "gray", "gray+alpha", "RGB", "RGBA", "palette", "CMYK",
                       // with " 16-bit" appended where the samples are 16-bit
};

// What the bytes are, from their header, without decoding pixels; also checks that the file
// is complete (a PNG ends with its IEND chunk, a JPEG with its EOI marker), so a truncated
// file is found by a scan. Throws RuntimeError naming `name` for anything else: too short, an
// unknown signature, a corrupt header, zero or too many pixels, truncation.
ImageInfo probe_image(const uint8_t* bytes, size_t size, const std::string& name,
                      double max_megapixels = kDefaultMaxMegapixels);

// The pixels of `region` (inside the stored image; UsageError otherwise) with `channels`
// (1 or 3) channels. A JPEG may be decoded at a reduced scale s in {1/2, 1/4, 1/8} (libjpeg's
// DCT scaling) where the region, scaled, keeps at least min_height x min_width pixels; a PNG
// is always decoded at full scale. The result covers exactly the region at that scale: uint8
// [channels, ceil(height * s), ceil(width * s)] from row floor(top * s) and column
// floor(left * s) of the scaled image. min_height = min_width = 0 asks for full scale.
// Throws RuntimeError naming `name` for a corrupt or truncated image (libjpeg's warnings count
// as errors, as PIL's default does), or one above max_megapixels.
torch::Tensor decode_image(const uint8_t* bytes, size_t size, const std::string& name,
                           int64_t channels, const Region& region, int64_t min_height = 0,
                           int64_t min_width = 0, double max_megapixels = kDefaultMaxMegapixels);

// The whole image at full scale: decode_image over Region{0, 0, H, W}.
torch::Tensor decode_image(const uint8_t* bytes, size_t size, const std::string& name,
                           int64_t channels);

// Encoders for uint8 [C, H, W] (C = 1 or 3; PNG also 4 = RGBA): lossless PNG, baseline JPEG
// with 4:2:0 chroma subsampling for C = 3 (libjpeg's defaults) at `quality` 1..100. Throw
// UsageError for another shape or type.
std::vector<uint8_t> encode_png(const torch::Tensor& image);
std::vector<uint8_t> encode_jpeg(const torch::Tensor& image, int quality = 90);

}  // namespace data
}  // namespace stalepipe
