// The format-independent half of the image codecs: which format the bytes are, the checks
// every decode makes, and the conversion of decoded rows into [C, H, W] planes. The formats
// themselves are in jpeg.cpp and png.cpp.
#include "stalepipe/data/image.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <tuple>

#include "data/image_impl.h"
#include "stalepipe/common/error.h"

namespace stalepipe {
namespace data {

void check_region(const Region& r, int64_t height, int64_t width, const std::string& what) {
  SP_CHECK_ARG(r.height > 0 && r.width > 0 && r.top >= 0 && r.left >= 0 &&
                   r.top <= height - r.height && r.left <= width - r.width,
               what, ": region (top ", r.top, ", left ", r.left, ", ", r.width, " x ", r.height,
               " pixels) is not inside the ", width, " x ", height, " image");
}

const char* to_string(ImageFormat format) {
  return format == ImageFormat::kJpeg ? "JPEG" : "PNG";
}

namespace {

const uint8_t kPngSignature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};

// The format of `bytes` from its signature; RuntimeError naming the file for anything else.
ImageFormat sniff(const uint8_t* bytes, size_t size, const std::string& name) {
  SP_CHECK(size > 0, name, ": empty file");
  const uint8_t jpeg_signature[3] = {0xff, 0xd8, 0xff};
  for (const auto& [signature, length, format] :
       {std::make_tuple(jpeg_signature, sizeof jpeg_signature, ImageFormat::kJpeg),
        std::make_tuple(kPngSignature, sizeof kPngSignature, ImageFormat::kPng)}) {
    if (std::memcmp(bytes, signature, std::min(size, length)) != 0) continue;
    // PNG's signature is followed by IHDR, JPEG's by the rest of a marker segment.
    SP_CHECK(size > length, name, ": truncated ", to_string(format), " (", size,
             size == 1 ? " byte)" : " bytes)");
    return format;
  }
  std::string start;
  for (size_t i = 0; i < std::min<size_t>(size, 4); ++i) {
    char hex[4];
    std::snprintf(hex, sizeof hex, " %02x", bytes[i]);
    start += hex;
  }
  throw RuntimeError(c10::str(name, ": not a JPEG or PNG image (it starts with ",
                              size == 1 ? "byte" : "bytes", start, ")"));
}

// 144.0, 0.0031: one decimal, or two significant digits below 0.1.
std::string megapixels_text(double megapixels) {
  char text[64];
  std::snprintf(text, sizeof text, megapixels >= 0.1 ? "%.1f" : "%.2g", megapixels);
  return text;
}

}  // namespace

namespace detail {

void check_pixels(const std::string& name, const char* format, int64_t height, int64_t width,
                  double max_megapixels) {
  SP_CHECK(height > 0 && width > 0, name, ": ", format, " header says ", width, " x ", height,
           " pixels");
  const double megapixels = static_cast<double>(height) * static_cast<double>(width) / 1e6;
  SP_CHECK(megapixels <= max_megapixels, name, ": ", width, " x ", height, " pixels (",
           megapixels_text(megapixels), " megapixels) is above the bound of ",
           c10::str(max_megapixels), " megapixels");
}

Region checked_region(const DecodeRequest& request, int64_t height, int64_t width) {
  if (request.whole) return Region{0, 0, height, width};
  check_region(request.region, height, width, request.name);
  return request.region;
}

void store_row(const uint8_t* row, int in_channels, int64_t width, uint8_t* out,
               int64_t out_channels, int64_t plane, int64_t y) {
  uint8_t* dst = out + y * width;
  if (in_channels == 1) {
    for (int64_t c = 0; c < out_channels; ++c) std::memcpy(dst + c * plane, row, width);
  } else if (out_channels == 3) {
    uint8_t* r = dst;
    uint8_t* g = dst + plane;
    uint8_t* b = dst + 2 * plane;
    for (int64_t x = 0; x < width; ++x) {
      r[x] = row[3 * x];
      g[x] = row[3 * x + 1];
      b[x] = row[3 * x + 2];
    }
  } else {
    // PIL's convert("L"): L = R * 299/1000 + G * 587/1000 + B * 114/1000 in 16-bit fixed
    // point, rounded; the same for both formats, so that a gray JPEG of an RGB image and the
    // gray PNG agree where their RGB do.
    for (int64_t x = 0; x < width; ++x) {
      const uint32_t l = row[3 * x] * 19595u + row[3 * x + 1] * 38470u + row[3 * x + 2] * 7471u;
      dst[x] = static_cast<uint8_t>((l + 0x8000u) >> 16);
    }
  }
}

torch::Tensor encoder_pixels(const torch::Tensor& image, const char* format,
                             int64_t max_channels, int64_t max_side) {
  SP_CHECK_ARG(image.defined() && image.scalar_type() == torch::kUInt8 && image.dim() == 3,
               format, " encoder: expected a uint8 [C, H, W] tensor, got ",
               image.defined() ? c10::str(image.scalar_type(), " ", image.sizes()) : "none");
  const int64_t c = image.size(0);
  SP_CHECK_ARG(c == 1 || c == 3 || c == max_channels, format, " encoder: ", c,
               " channels, expected 1 or 3", max_channels == 4 ? " or 4" : "");
  SP_CHECK_ARG(image.size(1) >= 1 && image.size(1) <= max_side && image.size(2) >= 1 &&
                   image.size(2) <= max_side,
               format, " encoder: ", image.size(2), " x ", image.size(1),
               " pixels, each side must be 1..", max_side);
  return image.permute({1, 2, 0}).contiguous();
}

}  // namespace detail

ImageInfo probe_image(const uint8_t* bytes, size_t size, const std::string& name,
                      double max_megapixels) {
  return sniff(bytes, size, name) == ImageFormat::kJpeg
             ? detail::probe_jpeg(bytes, size, name, max_megapixels)
             : detail::probe_png(bytes, size, name, max_megapixels);
}

namespace {

// Checks the request's own arguments, then decodes in the format the bytes have.
torch::Tensor decode(const detail::DecodeRequest& request) {
  SP_CHECK_ARG(request.channels == 1 || request.channels == 3, request.name,
               ": images decode to 1 or 3 channels, not ", request.channels);
  SP_CHECK_ARG(request.min_height >= 0 && request.min_width >= 0, request.name,
               ": the minimum decoded size must not be negative (", request.min_height, " x ",
               request.min_width, ")");
  return sniff(request.bytes, request.size, request.name) == ImageFormat::kJpeg
             ? detail::decode_jpeg(request)
             : detail::decode_png(request);
}

}  // namespace

torch::Tensor decode_image(const uint8_t* bytes, size_t size, const std::string& name,
                           int64_t channels, const Region& region, int64_t min_height,
                           int64_t min_width, double max_megapixels) {
  return decode({bytes, size, name, channels, false, region, min_height, min_width,
                 max_megapixels});
}

torch::Tensor decode_image(const uint8_t* bytes, size_t size, const std::string& name,
                           int64_t channels) {
  return decode({bytes, size, name, channels, true, Region{}, 0, 0, kDefaultMaxMegapixels});
}

}  // namespace data
}  // namespace stalepipe
