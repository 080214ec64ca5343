// JPEG through libjpeg-turbo's libjpeg API: the header, a decode of a region at a reduced DCT
// scale (cropped columns, skipped rows, stopping after the region's last row), the encoder.
//
// libjpeg reports errors through error_exit, whose default calls exit(). Here it formats the
// message and longjmps back to the setjmp in guarded(), which Codec::run called with a lambda
// that calls libjpeg; run then throws from ordinary C++ code. Nothing with a destructor lives
// in the frames the jump leaves (the lambdas touch only raw pointers and integers), and the
// structs are destroyed by their owners' destructors, on every path.
#include <algorithm>
#include <csetjmp>
#include <cstdio>
#include <cstdlib>
#include <vector>

// jpeglib.h needs size_t and FILE declared before it.
#include <jpeglib.h>
#include <jerror.h>

#include "data/image_impl.h"
#include "stalepipe/common/error.h"

namespace stalepipe {
namespace data {
namespace detail {
namespace {

// libjpeg's error manager with the jump target and the message of the error.
struct ErrorManager {
  jpeg_error_mgr pub;  // first, so that cinfo->err converts back to the whole
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
  bool truncated;
};

[[noreturn]] void on_error(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<ErrorManager*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  std::longjmp(err->jump, 1);
}

// Warnings (level -1: corrupt data, premature end) end the decode as errors do, as PIL's
// decoder does by default; trace messages (level >= 0) are dropped.
void on_message(j_common_ptr cinfo, int level) {
  if (level >= 0) return;
  reinterpret_cast<ErrorManager*>(cinfo->err)->truncated = cinfo->err->msg_code == JWRN_JPEG_EOF;
  on_error(cinfo);
}

// Runs `call` (libjpeg calls only) and returns false where libjpeg ended it with an error.
template <typename F>
bool guarded(ErrorManager& err, F&& call) {
  if (setjmp(err.jump) != 0) return false;
  call();
  return true;
}

// A libjpeg (de)compressor that throws RuntimeError naming the file for libjpeg's errors.
template <typename Struct>
class Codec {
 public:
  // `fault` names what failed in messages ("corrupt JPEG"; a premature end of the data is
  // "truncated JPEG").
  Codec(std::string name, const char* fault) : name_(std::move(name)), fault_(fault) {
    cinfo.err = jpeg_std_error(&err_.pub);
    err_.pub.error_exit = on_error;
    err_.pub.emit_message = on_message;
    err_.truncated = false;
    run([&] { create(); });
  }
  ~Codec() { jpeg_destroy(reinterpret_cast<j_common_ptr>(&cinfo)); }
  Codec(const Codec&) = delete;
  Codec& operator=(const Codec&) = delete;

  template <typename F>
  void run(F&& call) {
    if (!guarded(err_, call)) {
      throw RuntimeError(c10::str(name_, ": ", err_.truncated ? "truncated JPEG" : fault_, " (",
                                  err_.message, ")"));
    }
  }

  Struct cinfo{};

 private:
  void create();

  std::string name_;
  const char* fault_;
  ErrorManager err_;
};

template <>
void Codec<jpeg_decompress_struct>::create() {
  jpeg_create_decompress(&cinfo);
}
template <>
void Codec<jpeg_compress_struct>::create() {
  jpeg_create_compress(&cinfo);
}

using Decompressor = Codec<jpeg_decompress_struct>;

// A complete JPEG has an EOI marker after the start of its scan data (`scan`: the offset
// where jpeg_read_header stopped). Usually it is the last two bytes, but some writers pad with
// zero bytes and cameras append trailers (PIL reads those files too), so it is searched from
// the end; an EOI before the scan (an EXIF thumbnail's) does not count.
void check_complete(const uint8_t* bytes, size_t size, size_t scan, const std::string& name) {
  size_t end = size;
  while (end >= scan + 2 && !(bytes[end - 2] == 0xff && bytes[end - 1] == JPEG_EOI)) --end;
  SP_CHECK(end >= scan + 2, name, ": truncated JPEG (no end-of-image marker)");
}

// Reads the header of `bytes` into `d` and checks the pixel bound; returns the image's info.
ImageInfo read_header(Decompressor& d, const uint8_t* bytes, size_t size,
                      const std::string& name, double max_megapixels) {
  d.run([&] {
    jpeg_mem_src(&d.cinfo, bytes, static_cast<unsigned long>(size));
    jpeg_read_header(&d.cinfo, TRUE);
  });
  check_complete(bytes, size, size - d.cinfo.src->bytes_in_buffer, name);
  ImageInfo info;
  info.format = ImageFormat::kJpeg;
  info.height = d.cinfo.image_height;
  info.width = d.cinfo.image_width;
  switch (d.cinfo.jpeg_color_space) {
    case JCS_GRAYSCALE: info.mode = "gray"; break;
    case JCS_YCbCr:
    case JCS_RGB: info.mode = "RGB"; break;
    case JCS_CMYK:
    case JCS_YCCK: info.mode = "CMYK"; break;
    default:
      throw RuntimeError(c10::str(name, ": unsupported JPEG colour layout (",
                                  d.cinfo.num_components, " components)"));
  }
  info.color = info.mode != "gray";
  check_pixels(name, "JPEG", info.height, info.width, max_megapixels);
  return info;
}

// The DCT scale M/8 (M = 1, 2, 4 or 8) of the smallest decode that keeps the region at least
// min_height x min_width; full scale where both are 0. libjpeg-turbo takes any M/8, but its
// other scales have no SIMD IDCT and were slower in the loader's benchmark (bench/loader_speed.sh).
int scale_eighths(const Region& region, int64_t min_height, int64_t min_width) {
  if (min_height == 0 && min_width == 0) return 8;
  for (int m : {1, 2, 4}) {
    if ((region.height * m + 7) / 8 >= min_height && (region.width * m + 7) / 8 >= min_width) return m;
  }
  return 8;
}

// PIL's CMYK -> RGB of Adobe's inverted samples, in place (3 bytes out per 4 in, forward).
// PIL reads these JPEGs as "CMYK;I" (ink = 255 - sample) and converts with
// R = (255 - K) - C (255 - K) / 255 (Convert.c, cmyk2rgb), which on the stored samples is
// R = k - (255 - c) k / 255 with k, c the samples; the division rounds as PIL's MULDIV255.
void cmyk_to_rgb(uint8_t* row, int64_t width) {
  for (int64_t x = 0; x < width; ++x) {
    const int k = row[4 * x + 3];
    for (int i = 0; i < 3; ++i) {
      const int t = (255 - row[4 * x + i]) * k + 128;
      row[3 * x + i] = static_cast<uint8_t>(k - (((t >> 8) + t) >> 8));
    }
  }
}

}  // namespace

ImageInfo probe_jpeg(const uint8_t* bytes, size_t size, const std::string& name,
                     double max_megapixels) {
  Decompressor d(name, "corrupt JPEG");
  return read_header(d, bytes, size, name, max_megapixels);
}

torch::Tensor decode_jpeg(const DecodeRequest& request) {
  Decompressor d(request.name, "corrupt JPEG");
  const ImageInfo info =
      read_header(d, request.bytes, request.size, request.name, request.max_megapixels);
  const Region region = checked_region(request, info.height, info.width);
  jpeg_decompress_struct& c = d.cinfo;
  const int eighths = scale_eighths(region, request.min_height, request.min_width);
  c.scale_num = eighths;
  c.scale_denom = 8;
  // RGB is converted to gray here rather than by libjpeg (which would keep the stored Y), so
  // that a colour JPEG's gray is PIL's convert("L") of its RGB, exactly.
  const bool cmyk = info.mode == "CMYK";
  c.out_color_space = cmyk ? JCS_CMYK : info.color ? JCS_RGB : JCS_GRAYSCALE;
  // The region at that scale: its first row and column rounded down, its size up (inside
  // libjpeg's output, which rounds the image's size up).
  const int64_t top = region.top * eighths / 8;
  const int64_t left = region.left * eighths / 8;
  const int64_t height = (region.height * eighths + 7) / 8;
  const int64_t width = (region.width * eighths + 7) / 8;
  torch::Tensor out = torch::empty({request.channels, height, width}, torch::kUInt8);
  uint8_t* pixels = out.data_ptr<uint8_t>();
  const int64_t channels = request.channels;
  const int in_channels = info.color ? 3 : 1;
  std::vector<uint8_t> row(static_cast<size_t>(info.width) * (cmyk ? 4 : in_channels));
  uint8_t* row_data = row.data();
  d.run([&] {
    jpeg_start_decompress(&c);
    // The crop starts and ends at iMCU boundaries, where libjpeg's upsampling of subsampled
    // chroma sees no neighbour and replicates the edge: one column more on each side keeps
    // the region's pixels those of the whole decode. `skip` pixels precede the region's
    // first column in each row.
    const int64_t end = std::min<int64_t>(left + width + 1, c.output_width);
    JDIMENSION x = static_cast<JDIMENSION>(std::max<int64_t>(left - 1, 0));
    JDIMENSION w = static_cast<JDIMENSION>(end - x);
    if (w < c.output_width) jpeg_crop_scanline(&c, &x, &w);
    const int64_t skip = left - static_cast<int64_t>(x);
    jpeg_skip_scanlines(&c, static_cast<JDIMENSION>(top));
    for (int64_t y = 0; y < height; ++y) {
      JSAMPROW rows[1] = {row_data};
      jpeg_read_scanlines(&c, rows, 1);
      if (cmyk) cmyk_to_rgb(row_data, skip + width);
      store_row(row_data + skip * in_channels, in_channels, width, pixels, channels,
                height * width, y);
    }
    // The rest of the data is left unread (jpeg_destroy discards it), unless the region
    // reaches the last row, where finishing checks what follows it.
    if (c.output_scanline == c.output_height) {
      jpeg_finish_decompress(&c);
    } else {
      jpeg_abort_decompress(&c);
    }
  });
  return out;
}

}  // namespace detail

namespace {

// A libjpeg destination that writes into a std::vector, doubling it as it fills (libjpeg's
// own jpeg_mem_dest leaves a freed or leaked buffer behind when an error ends it early).
struct VectorDestination {
  jpeg_destination_mgr pub;  // first, so that cinfo->dest converts back to the whole
  std::vector<uint8_t>* bytes;
};

// Grows the vector to at least `size` bytes and points libjpeg past `used` of them; an
// allocation failure becomes libjpeg's error, raised outside the catch block.
void grow(j_compress_ptr cinfo, size_t used, size_t size) {
  auto* dest = reinterpret_cast<VectorDestination*>(cinfo->dest);
  bool failed = false;
  try {
    dest->bytes->resize(size);
  } catch (...) {
    failed = true;
  }
  if (failed) ERREXIT(cinfo, JERR_OUT_OF_MEMORY);
  dest->pub.next_output_byte = dest->bytes->data() + used;
  dest->pub.free_in_buffer = dest->bytes->size() - used;
}

void init_destination(j_compress_ptr cinfo) { grow(cinfo, 0, 1 << 16); }

boolean empty_output_buffer(j_compress_ptr cinfo) {
  const size_t used = reinterpret_cast<VectorDestination*>(cinfo->dest)->bytes->size();
  grow(cinfo, used, 2 * used);
  return TRUE;
}

void term_destination(j_compress_ptr cinfo) {
  auto* dest = reinterpret_cast<VectorDestination*>(cinfo->dest);
  dest->bytes->resize(dest->bytes->size() - dest->pub.free_in_buffer);
}

}  // namespace

std::vector<uint8_t> encode_jpeg(const torch::Tensor& image, int quality) {
  SP_CHECK_ARG(quality >= 1 && quality <= 100, "JPEG encoder: quality ", quality,
               " is not in 1..100");
  const torch::Tensor hwc = detail::encoder_pixels(image, "JPEG", 3, JPEG_MAX_DIMENSION);
  const int64_t height = hwc.size(0), width = hwc.size(1), channels = hwc.size(2);
  const uint8_t* pixels = hwc.data_ptr<uint8_t>();
  std::vector<uint8_t> bytes;
  VectorDestination dest{{}, &bytes};
  dest.pub.init_destination = init_destination;
  dest.pub.empty_output_buffer = empty_output_buffer;
  dest.pub.term_destination = term_destination;
  detail::Codec<jpeg_compress_struct> e("JPEG encoder", "cannot write JPEG");
  jpeg_compress_struct& c = e.cinfo;
  e.run([&] {
    c.dest = &dest.pub;
    c.image_width = static_cast<JDIMENSION>(width);
    c.image_height = static_cast<JDIMENSION>(height);
    c.input_components = static_cast<int>(channels);
    c.in_color_space = channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
    jpeg_set_defaults(&c);
    jpeg_set_quality(&c, quality, TRUE);
    jpeg_start_compress(&c, TRUE);
    while (c.next_scanline < c.image_height) {
      JSAMPROW rows[1] = {const_cast<uint8_t*>(pixels) + c.next_scanline * width * channels};
      jpeg_write_scanlines(&c, rows, 1);
    }
    jpeg_finish_compress(&c);
  });
  return bytes;
}

}  // namespace data
}  // namespace stalepipe
