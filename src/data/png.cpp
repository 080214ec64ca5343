// PNG: the header and the chunk structure read by hand (probe_png), the pixels through libpng
// (expanded to 8-bit gray or RGB, alpha dropped), and the encoder.
//
// libpng reports errors through the error function given to it, which here keeps the message
// and longjmps back to the setjmp of Png::run; run then throws from ordinary C++ code, as
// jpeg.cpp does for libjpeg. The lambdas run inside touch only raw pointers and integers.
#include <cstring>
#include <vector>

#include <png.h>
#include <zlib.h>

#include "data/image_impl.h"
#include "stalepipe/common/error.h"

namespace stalepipe {
namespace data {
namespace {

constexpr size_t kSignatureSize = 8;
constexpr uint32_t kMaxChunkLength = 0x7fffffffu;  // the PNG specification's bound

uint32_t be32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}

// IHDR's fields, checked against the combinations the PNG specification allows.
ImageInfo parse_ihdr(const uint8_t* chunk, const std::string& name) {
  const uint8_t* data = chunk + 8;
  SP_CHECK(crc32(crc32(0, nullptr, 0), chunk + 4, 4 + 13) == be32(data + 13), name,
           ": corrupt PNG (IHDR checksum mismatch)");
  const uint32_t width = be32(data), height = be32(data + 4);
  const int depth = data[8], type = data[9];
  SP_CHECK(width <= kMaxChunkLength && height <= kMaxChunkLength, name,
           ": corrupt PNG (IHDR says ", width, " x ", height, " pixels)");
  const bool depth_ok = type == 0   ? (depth == 1 || depth == 2 || depth == 4 || depth == 8 || depth == 16)
                        : type == 3 ? (depth == 1 || depth == 2 || depth == 4 || depth == 8)
                        : (type == 2 || type == 4 || type == 6) && (depth == 8 || depth == 16);
  SP_CHECK(depth_ok, name, ": corrupt PNG (IHDR: bit depth ", depth, " with colour type ", type, ")");
  SP_CHECK(data[10] == 0 && data[11] == 0 && data[12] <= 1, name,
           ": corrupt PNG (IHDR: unknown compression, filter or interlace method)");
  static const char* const kModes[] = {"gray", "", "RGB", "palette", "gray+alpha", "", "RGBA"};
  ImageInfo info;
  info.format = ImageFormat::kPng;
  info.height = height;
  info.width = width;
  info.color = (type & 2) != 0;
  info.mode = std::string(kModes[type]) + (depth == 16 ? " 16-bit" : "");
  return info;
}

// A libpng read or write struct that throws RuntimeError naming the file for libpng's errors
// (its warnings, about ancillary chunks, are ignored).
class Png {
 public:
  Png(bool write, std::string name, const char* fault)
      : write_(write), name_(std::move(name)), fault_(fault) {
    png = write ? png_create_write_struct(PNG_LIBPNG_VER_STRING, this, on_error, on_warning)
                : png_create_read_struct(PNG_LIBPNG_VER_STRING, this, on_error, on_warning);
    if (png != nullptr) info = png_create_info_struct(png);
    SP_CHECK(png != nullptr && info != nullptr, name_, ": ", fault_, " (out of memory)");
  }
  ~Png() {
    if (write_) {
      png_destroy_write_struct(&png, &info);
    } else {
      png_destroy_read_struct(&png, &info, nullptr);
    }
  }
  Png(const Png&) = delete;
  Png& operator=(const Png&) = delete;

  template <typename F>
  void run(F&& call) {
    if (!guarded(png, call)) throw RuntimeError(c10::str(name_, ": ", fault_, " (", message_, ")"));
  }

  png_structp png = nullptr;
  png_infop info = nullptr;

 private:
  template <typename F>
  static bool guarded(png_structp png, F& call) {
    if (setjmp(png_jmpbuf(png)) != 0) return false;
    call();
    return true;
  }
  static void on_error(png_structp png, png_const_charp message) {
    Png* self = static_cast<Png*>(png_get_error_ptr(png));
    std::strncpy(self->message_, message, sizeof self->message_ - 1);
    png_longjmp(png, 1);
  }
  static void on_warning(png_structp, png_const_charp) {}

  bool write_;
  std::string name_;
  const char* fault_;
  char message_[256] = {};
};

struct Source {
  const uint8_t* bytes;
  size_t size;
  size_t pos;
};

void read_bytes(png_structp png, png_bytep out, size_t count) {
  auto* source = static_cast<Source*>(png_get_io_ptr(png));
  if (source->size - source->pos < count) png_error(png, "premature end of data");
  std::memcpy(out, source->bytes + source->pos, count);
  source->pos += count;
}

void write_bytes(png_structp png, png_bytep data, size_t count) {
  auto* bytes = static_cast<std::vector<uint8_t>*>(png_get_io_ptr(png));
  bool failed = false;
  try {
    bytes->insert(bytes->end(), data, data + count);
  } catch (...) {
    failed = true;
  }
  if (failed) png_error(png, "out of memory");  // raised outside the catch block
}

void flush_bytes(png_structp) {}

}  // namespace

namespace detail {

ImageInfo probe_png(const uint8_t* bytes, size_t size, const std::string& name,
                    double max_megapixels) {
  ImageInfo info;
  // Walks the chunks (length, type, data, CRC) from IHDR to IEND; bytes after IEND are
  // ignored, as libpng ignores them.
  for (size_t pos = kSignatureSize;;) {
    SP_CHECK(size - pos >= 12, name, ": truncated PNG (no IEND chunk)");
    const uint32_t length = be32(bytes + pos);
    SP_CHECK(length <= kMaxChunkLength, name, ": corrupt PNG (a chunk of ", length, " bytes)");
    SP_CHECK(size - pos - 12 >= length, name,
             ": truncated PNG (a chunk runs past the end of the file)");
    const bool first = pos == kSignatureSize;
    const uint8_t* type = bytes + pos + 4;
    if (first) {
      SP_CHECK(std::memcmp(type, "IHDR", 4) == 0 && length == 13, name,
               ": corrupt PNG (the first chunk is not IHDR)");
      info = parse_ihdr(bytes + pos, name);
    } else if (std::memcmp(type, "IEND", 4) == 0) {
      break;
    }
    pos += 12 + length;
  }
  check_pixels(name, "PNG", info.height, info.width, max_megapixels);
  return info;
}

torch::Tensor decode_png(const DecodeRequest& request) {
  const ImageInfo info = probe_png(request.bytes, request.size, request.name, request.max_megapixels);
  const Region region = checked_region(request, info.height, info.width);
  Png r(false, request.name, "corrupt PNG");
  Source source{request.bytes, request.size, 0};
  int passes = 1;
  r.run([&] {
    png_set_read_fn(r.png, &source, read_bytes);
    png_set_user_limits(r.png, kMaxChunkLength, kMaxChunkLength);  // max_megapixels decides
    png_read_info(r.png, r.info);
    png_set_expand(r.png);  // palette -> RGB, gray below 8 bits -> 8, tRNS -> alpha
    png_set_strip_16(r.png);
    png_set_strip_alpha(r.png);
    passes = png_set_interlace_handling(r.png);
    png_read_update_info(r.png, r.info);
  });
  const int in_channels = png_get_channels(r.png, r.info);
  SP_CHECK(in_channels == 1 || in_channels == 3, request.name, ": unsupported PNG layout (",
           in_channels, " channels after expansion)");
  const int64_t stride = info.width * in_channels;
  // An interlaced image arrives in passes over the whole image; one without interlacing row
  // by row, so that its decode stops after the region's last row.
  const int64_t buffered_rows = passes > 1 ? info.height : 1;
  std::vector<uint8_t> buffer(static_cast<size_t>(buffered_rows * stride));
  std::vector<png_bytep> rows(static_cast<size_t>(buffered_rows));
  for (int64_t y = 0; y < buffered_rows; ++y) rows[y] = buffer.data() + y * stride;
  torch::Tensor out = torch::empty({request.channels, region.height, region.width}, torch::kUInt8);
  uint8_t* pixels = out.data_ptr<uint8_t>();
  const int64_t channels = request.channels, plane = region.height * region.width;
  png_bytepp row_pointers = rows.data();
  r.run([&] {
    const int64_t end = region.top + region.height;
    if (passes > 1) png_read_image(r.png, row_pointers);
    for (int64_t y = 0; y < end; ++y) {
      const png_bytep row = row_pointers[passes > 1 ? y : 0];
      if (passes == 1) png_read_row(r.png, row, nullptr);
      if (y >= region.top) {
        store_row(row + region.left * in_channels, in_channels, region.width, pixels, channels,
                  plane, y - region.top);
      }
    }
    if (passes > 1 || end == info.height) png_read_end(r.png, nullptr);
  });
  return out;
}

}  // namespace detail

std::vector<uint8_t> encode_png(const torch::Tensor& image) {
  const torch::Tensor hwc = detail::encoder_pixels(image, "PNG", 4, kMaxChunkLength);
  const int64_t height = hwc.size(0), width = hwc.size(1), channels = hwc.size(2);
  const int type = channels == 1   ? PNG_COLOR_TYPE_GRAY
                   : channels == 3 ? PNG_COLOR_TYPE_RGB
                                   : PNG_COLOR_TYPE_RGB_ALPHA;
  std::vector<uint8_t> bytes;
  Png w(true, "PNG encoder", "cannot write PNG");
  uint8_t* pixels = hwc.data_ptr<uint8_t>();
  w.run([&] {
    png_set_write_fn(w.png, &bytes, write_bytes, flush_bytes);
    png_set_IHDR(w.png, w.info, static_cast<png_uint_32>(width), static_cast<png_uint_32>(height),
                 8, type, PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    png_write_info(w.png, w.info);
    for (int64_t y = 0; y < height; ++y) png_write_row(w.png, pixels + y * width * channels);
    png_write_end(w.png, w.info);
  });
  return bytes;
}

}  // namespace data
}  // namespace stalepipe
