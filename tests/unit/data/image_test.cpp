#include "stalepipe/data/image.h"

#include <cmath>
#include <csetjmp>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <jpeglib.h>
#include <png.h>
#include <zlib.h>

#include "stalepipe/common/error.h"
#include "support/data_files.h"

namespace stalepipe {
namespace data {
namespace {

using test::Bytes;
using test::throws_with;
using Sample = std::function<int(int64_t x, int64_t y, int64_t s)>;

// uint8 [c, h, w] with sample(x, y, channel) at each pixel.
torch::Tensor image_of(int64_t c, int64_t h, int64_t w, const Sample& sample) {
  torch::Tensor t = torch::empty({c, h, w}, torch::kUInt8);
  auto a = t.accessor<uint8_t, 3>();
  for (int64_t k = 0; k < c; ++k) {
    for (int64_t y = 0; y < h; ++y) {
      for (int64_t x = 0; x < w; ++x) a[k][y][x] = static_cast<uint8_t>(sample(x, y, k));
    }
  }
  return t;
}

torch::Tensor noise(int64_t c, int64_t h, int64_t w, uint32_t seed) {
  std::mt19937 rng(seed);
  return image_of(c, h, w, [&](int64_t, int64_t, int64_t) { return static_cast<int>(rng() & 0xff); });
}

// Smooth content, which JPEG keeps closely.
torch::Tensor smooth(int64_t c, int64_t h, int64_t w) {
  return image_of(c, h, w, [](int64_t x, int64_t y, int64_t k) {
    return static_cast<int>(std::lround(128 + 90 * std::sin(x * 0.05 + k) * std::cos(y * 0.04 - k * 0.5) +
                                        25 * std::sin((x + y) * 0.02)));
  });
}

// PIL's convert("L"), written out independently of the library: round(0.299 R + 0.587 G +
// 0.114 B) in PIL's 16-bit fixed point.
int pil_l(int r, int g, int b) { return (r * 19595 + g * 38470 + b * 7471 + 0x8000) >> 16; }

torch::Tensor pil_gray(const torch::Tensor& rgb) {
  auto a = rgb.accessor<uint8_t, 3>();
  return image_of(1, rgb.size(1), rgb.size(2), [&](int64_t x, int64_t y, int64_t) {
    return pil_l(a[0][y][x], a[1][y][x], a[2][y][x]);
  });
}

torch::Tensor decode(const Bytes& bytes, int64_t channels, const std::string& name = "t") {
  return decode_image(bytes.data(), bytes.size(), name, channels);
}

ImageInfo probe(const Bytes& bytes, const std::string& name = "t", double bound = kDefaultMaxMegapixels) {
  return probe_image(bytes.data(), bytes.size(), name, bound);
}

double mean_abs_error(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kFloat) - b.to(torch::kFloat)).abs().mean().item<double>();
}

// A PNG written by libpng directly, in the layouts encode_png never writes.
struct PngSpec {
  int width = 0, height = 0, color_type = PNG_COLOR_TYPE_RGB, bit_depth = 8;
  bool interlaced = false;
  std::vector<png_color> palette;
  std::vector<png_byte> palette_alpha;  // tRNS of a palette image
  Sample sample;                        // the stored sample s of pixel (x, y)
};

int samples_per_pixel(int color_type) {
  switch (color_type) {
    case PNG_COLOR_TYPE_RGB: return 3;
    case PNG_COLOR_TYPE_RGB_ALPHA: return 4;
    case PNG_COLOR_TYPE_GRAY_ALPHA: return 2;
    default: return 1;
  }
}

// The rows of `spec` packed as PNG stores them: MSB first below 8 bits, big-endian at 16.
std::vector<Bytes> packed_rows(const PngSpec& spec) {
  const int n = samples_per_pixel(spec.color_type), depth = spec.bit_depth;
  std::vector<Bytes> rows(spec.height, Bytes((spec.width * n * depth + 7) / 8, 0));
  for (int y = 0; y < spec.height; ++y) {
    for (int x = 0; x < spec.width; ++x) {
      for (int s = 0; s < n; ++s) {
        const int v = spec.sample(x, y, s), i = x * n + s;
        if (depth == 16) {
          rows[y][2 * i] = static_cast<uint8_t>(v >> 8);
          rows[y][2 * i + 1] = static_cast<uint8_t>(v);
        } else {
          const int bit = i * depth;
          rows[y][bit / 8] |= static_cast<uint8_t>(v << (8 - depth - bit % 8));
        }
      }
    }
  }
  return rows;
}

void append_bytes(png_structp png, png_bytep data, size_t n) {
  auto* out = static_cast<Bytes*>(png_get_io_ptr(png));
  out->insert(out->end(), data, data + n);
}

Bytes write_png(const PngSpec& spec) {
  std::vector<Bytes> rows = packed_rows(spec);
  std::vector<png_bytep> pointers;
  for (Bytes& row : rows) pointers.push_back(row.data());
  Bytes out;
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png_create_info_struct(png);
  if (setjmp(png_jmpbuf(png)) != 0) {
    png_destroy_write_struct(&png, &info);
    ADD_FAILURE() << "libpng could not write the test image";
    return {};
  }
  png_set_write_fn(png, &out, append_bytes, nullptr);
  png_set_IHDR(png, info, spec.width, spec.height, spec.bit_depth, spec.color_type,
               spec.interlaced ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  if (!spec.palette.empty()) {
    png_set_PLTE(png, info, spec.palette.data(), static_cast<int>(spec.palette.size()));
  }
  if (!spec.palette_alpha.empty()) {
    png_set_tRNS(png, info, spec.palette_alpha.data(), static_cast<int>(spec.palette_alpha.size()), nullptr);
  }
  png_write_info(png, info);
  png_write_image(png, pointers.data());
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  return out;
}

// A JPEG written by libjpeg directly at quality 95: sample(x, y, s) for each of `components`
// samples in `space` (for CMYK libjpeg writes the Adobe marker, as Photoshop does, and the
// samples are stored as given: inverted ink), baseline or progressive.
Bytes write_jpeg(int width, int height, int components, J_COLOR_SPACE space, bool progressive,
                 const Sample& sample) {
  jpeg_compress_struct c;
  jpeg_error_mgr err;
  c.err = jpeg_std_error(&err);
  jpeg_create_compress(&c);
  unsigned char* buffer = nullptr;
  unsigned long length = 0;
  jpeg_mem_dest(&c, &buffer, &length);
  c.image_width = width;
  c.image_height = height;
  c.input_components = components;
  c.in_color_space = space;
  jpeg_set_defaults(&c);
  jpeg_set_quality(&c, 95, TRUE);
  if (progressive) jpeg_simple_progression(&c);
  jpeg_start_compress(&c, TRUE);
  Bytes row(width * components);
  while (c.next_scanline < c.image_height) {
    for (int x = 0; x < width; ++x) {
      for (int s = 0; s < components; ++s) row[components * x + s] = static_cast<uint8_t>(sample(x, c.next_scanline, s));
    }
    JSAMPROW rows[1] = {row.data()};
    jpeg_write_scanlines(&c, rows, 1);
  }
  jpeg_finish_compress(&c);
  Bytes out(buffer, buffer + length);
  std::free(buffer);
  jpeg_destroy_compress(&c);
  return out;
}

uint32_t be32(const uint8_t* p) { return (uint32_t{p[0]} << 24) | (p[1] << 16) | (p[2] << 8) | p[3]; }
void put_be32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (24 - 8 * i));
}

// `png` with IHDR saying width x height, its CRC made to match.
Bytes with_png_size(Bytes png, uint32_t width, uint32_t height) {
  put_be32(&png[16], width);
  put_be32(&png[20], height);
  put_be32(&png[29], static_cast<uint32_t>(crc32(0, &png[12], 17)));
  return png;
}

// The offset of the first byte of the data of `png`'s IDAT chunk.
size_t idat_offset(const Bytes& png) {
  for (size_t pos = 8; pos + 8 <= png.size(); pos += 12 + be32(&png[pos])) {
    if (std::memcmp(&png[pos + 4], "IDAT", 4) == 0) return pos + 8;
  }
  ADD_FAILURE() << "no IDAT";
  return 0;
}

TEST(ImageTest, PngRoundTripIsExactForEverySize) {
  const std::vector<std::pair<int64_t, int64_t>> sizes = {{1, 1}, {1, 7}, {7, 1}, {3, 5}, {17, 31}, {64, 48}};
  for (int64_t c : {1, 3}) {
    for (const auto& [h, w] : sizes) {
      const torch::Tensor image = noise(c, h, w, static_cast<uint32_t>(c * 1000 + h * 10 + w));
      const Bytes png = encode_png(image);
      const ImageInfo info = probe(png);
      EXPECT_EQ(info.format, ImageFormat::kPng);
      EXPECT_EQ(info.height, h);
      EXPECT_EQ(info.width, w);
      EXPECT_EQ(info.color, c == 3);
      EXPECT_EQ(info.mode, c == 3 ? "RGB" : "gray");
      const torch::Tensor back = decode(png, c);
      EXPECT_TRUE(back.is_contiguous());
      ASSERT_TRUE(back.equal(image)) << c << " channels, " << h << " x " << w;
    }
  }
}

TEST(ImageTest, PngConvertsChannelsAsPil) {
  const torch::Tensor rgb = noise(3, 9, 13, 7);
  const Bytes png = encode_png(rgb);
  EXPECT_TRUE(decode(png, 1).equal(pil_gray(rgb)));
  EXPECT_EQ(pil_l(10, 200, 77), 129);  // PIL 9.4: Image.new("RGB", (1, 1), (10, 200, 77)).convert("L")
  const torch::Tensor gray = noise(1, 9, 13, 8);
  EXPECT_TRUE(decode(encode_png(gray), 3).equal(gray.expand({3, 9, 13})));
  // RGBA: the alpha is dropped, without compositing.
  const torch::Tensor rgba = noise(4, 5, 6, 9);
  EXPECT_EQ(probe(encode_png(rgba)).mode, "RGBA");
  EXPECT_TRUE(decode(encode_png(rgba), 3).equal(rgba.slice(0, 0, 3)));
}

// Decodes `spec` to 3 and 1 channels and compares with expected_rgb(x, y, channel).
void expect_png_variant(const PngSpec& spec, const std::string& mode, const Sample& expected_rgb) {
  SCOPED_TRACE(mode);
  const Bytes png = write_png(spec);
  const ImageInfo info = probe(png);
  EXPECT_EQ(info.mode, mode);
  EXPECT_EQ(info.height, spec.height);
  EXPECT_EQ(info.width, spec.width);
  const torch::Tensor expected = image_of(3, spec.height, spec.width, expected_rgb);
  const bool gray = spec.color_type == PNG_COLOR_TYPE_GRAY || spec.color_type == PNG_COLOR_TYPE_GRAY_ALPHA;
  EXPECT_EQ(info.color, !gray);
  EXPECT_TRUE(decode(png, 3).equal(expected));
  EXPECT_TRUE(decode(png, 1).equal(gray ? expected.slice(0, 0, 1) : pil_gray(expected)));
}

TEST(ImageTest, PngVariantsDecodeToTheirPixels) {
  const auto v = [](int64_t x, int64_t y, int64_t s) { return static_cast<int>((x * 37 + y * 91 + s * 53) % 256); };
  const auto wide = [&](int64_t x, int64_t y, int64_t s) { return v(x, y, s) * 256 + static_cast<int>((x * 7 + s) % 256); };
  const auto gray = [&](int64_t x, int64_t y, int64_t) { return v(x, y, 0); };
  expect_png_variant({11, 7, PNG_COLOR_TYPE_RGB_ALPHA, 8, false, {}, {}, v}, "RGBA", v);
  expect_png_variant({11, 7, PNG_COLOR_TYPE_RGB, 16, false, {}, {}, wide}, "RGB 16-bit", v);
  expect_png_variant({11, 7, PNG_COLOR_TYPE_RGB_ALPHA, 16, false, {}, {}, wide}, "RGBA 16-bit", v);
  expect_png_variant({11, 7, PNG_COLOR_TYPE_GRAY, 16, false, {}, {}, wide}, "gray 16-bit", gray);
  expect_png_variant({11, 7, PNG_COLOR_TYPE_GRAY_ALPHA, 8, false, {}, {}, v}, "gray+alpha", gray);
  // Gray below 8 bits is scaled to 0..255 (PIL's L;1, L;2, L;4).
  for (int depth : {1, 2, 4}) {
    const int top = (1 << depth) - 1;
    const auto low = [=](int64_t x, int64_t y, int64_t) { return static_cast<int>((x + 3 * y) % (top + 1)); };
    expect_png_variant({9, 5, PNG_COLOR_TYPE_GRAY, depth, false, {}, {}, low}, "gray",
                       [=](int64_t x, int64_t y, int64_t s) { return low(x, y, s) * 255 / top; });
  }
  // A 4-bit palette with transparency: the colours of the entries, alpha dropped.
  const std::vector<png_color> palette = {{250, 0, 10}, {0, 128, 255}, {17, 34, 51}, {200, 200, 0}, {1, 2, 3}};
  const auto index = [](int64_t x, int64_t y, int64_t) { return static_cast<int>((x + 2 * y) % 5); };
  const auto colour = [&](int64_t x, int64_t y, int64_t s) {
    const png_color& e = palette[index(x, y, 0)];
    return static_cast<int>(s == 0 ? e.red : s == 1 ? e.green : e.blue);
  };
  expect_png_variant({10, 6, PNG_COLOR_TYPE_PALETTE, 4, false, palette, {0, 128, 255}, index}, "palette", colour);
  // Interlaced (Adam7), odd sizes so that some passes are empty or partial.
  expect_png_variant({13, 11, PNG_COLOR_TYPE_RGB, 8, true, {}, {}, v}, "RGB", v);
  expect_png_variant({3, 2, PNG_COLOR_TYPE_PALETTE, 8, true, palette, {}, index}, "palette", colour);
  expect_png_variant({1, 1, PNG_COLOR_TYPE_GRAY, 8, true, {}, {}, gray}, "gray", gray);
}

TEST(ImageTest, PngRegionIsTheSameRegionOfTheWholeImage) {
  for (bool interlaced : {false, true}) {
    const auto v = [](int64_t x, int64_t y, int64_t s) { return static_cast<int>((x * 13 + y * 7 + s * 101) % 256); };
    const Bytes png = write_png({23, 19, PNG_COLOR_TYPE_RGB, 8, interlaced, {}, {}, v});
    const torch::Tensor whole = decode(png, 3);
    for (const Region& r : {Region{0, 0, 19, 23}, Region{18, 22, 1, 1}, Region{3, 4, 10, 12}, Region{0, 5, 19, 1}}) {
      const torch::Tensor part = decode_image(png.data(), png.size(), "t", 3, r, 8, 8);
      EXPECT_TRUE(part.equal(whole.slice(1, r.top, r.top + r.height).slice(2, r.left, r.left + r.width)))
          << "interlaced " << interlaced << " region " << r.top << "," << r.left;
    }
  }
}

TEST(ImageTest, JpegRoundTripIsClose) {
  const torch::Tensor rgb = smooth(3, 61, 83);
  const Bytes jpeg = encode_jpeg(rgb, 95);
  const ImageInfo info = probe(jpeg);
  EXPECT_EQ(info.format, ImageFormat::kJpeg);
  EXPECT_EQ(info.height, 61);
  EXPECT_EQ(info.width, 83);
  EXPECT_TRUE(info.color);
  EXPECT_EQ(info.mode, "RGB");
  const torch::Tensor back = decode(jpeg, 3);
  ASSERT_EQ(back.sizes(), rgb.sizes());
  EXPECT_LT(mean_abs_error(back, rgb), 2.0);
  // Gray of a colour JPEG: PIL's convert("L") of its decoded RGB, exactly.
  EXPECT_TRUE(decode(jpeg, 1).equal(pil_gray(back)));
  // Quality matters: 10 is further off and smaller.
  const Bytes rough = encode_jpeg(rgb, 10);
  EXPECT_LT(rough.size(), jpeg.size());
  EXPECT_GT(mean_abs_error(decode(rough, 3), rgb), mean_abs_error(back, rgb));

  const torch::Tensor gray = smooth(1, 33, 17);
  const Bytes gray_jpeg = encode_jpeg(gray, 95);
  EXPECT_EQ(probe(gray_jpeg).mode, "gray");
  EXPECT_FALSE(probe(gray_jpeg).color);
  const torch::Tensor gray_back = decode(gray_jpeg, 1);
  EXPECT_LT(mean_abs_error(gray_back, gray), 1.5);
  EXPECT_TRUE(decode(gray_jpeg, 3).equal(gray_back.expand({3, 33, 17})));
  EXPECT_TRUE(decode(encode_jpeg(noise(3, 1, 1, 3)), 3).sizes() == torch::IntArrayRef({3, 1, 1}));
}

TEST(ImageTest, JpegRegionEqualsTheSameRegionOfTheWholeDecode) {
  std::mt19937 rng(42);
  for (int64_t c : {3, 1}) {
    // Noise with smooth content: any difference at the crop's edges shows.
    const torch::Tensor image = (smooth(c, 97, 131).to(torch::kInt) / 2 + noise(c, 97, 131, 5).to(torch::kInt) / 2).to(torch::kUInt8);
    const Bytes jpeg = encode_jpeg(image, 90);
    for (int64_t channels : {3, 1}) {
      const torch::Tensor whole = decode(jpeg, channels);
      std::vector<Region> regions = {{0, 0, 97, 131}, {0, 0, 1, 1}, {96, 130, 1, 1}, {40, 0, 10, 131},
                                     {0, 120, 97, 11}, {13, 17, 50, 60}, {8, 16, 8, 16}, {95, 0, 2, 3}};
      for (int i = 0; i < 20; ++i) {
        Region r;
        r.top = rng() % 97;
        r.left = rng() % 131;
        r.height = 1 + rng() % (97 - r.top);
        r.width = 1 + rng() % (131 - r.left);
        regions.push_back(r);
      }
      for (const Region& r : regions) {
        const torch::Tensor part = decode_image(jpeg.data(), jpeg.size(), "t", channels, r);
        ASSERT_TRUE(part.equal(whole.slice(1, r.top, r.top + r.height).slice(2, r.left, r.left + r.width)))
            << c << " -> " << channels << " channels, region top " << r.top << " left " << r.left
            << " height " << r.height << " width " << r.width;
      }
    }
  }
}

TEST(ImageTest, ProgressiveJpegDecodesAsTheBaselineOne) {
  const torch::Tensor image = smooth(3, 45, 70);
  const auto a = image.accessor<uint8_t, 3>();
  const Bytes progressive = write_jpeg(70, 45, 3, JCS_RGB, true, [&](int64_t x, int64_t y, int64_t s) { return a[s][y][x]; });
  // The same coefficients, ordered differently: encode_jpeg at 95 is libjpeg's defaults too.
  const torch::Tensor whole = decode(progressive, 3);
  EXPECT_TRUE(whole.equal(decode(encode_jpeg(image, 95), 3)));
  for (const Region& r : {Region{0, 0, 45, 70}, Region{17, 9, 20, 33}, Region{44, 69, 1, 1}}) {
    EXPECT_TRUE(decode_image(progressive.data(), progressive.size(), "t", 3, r)
                    .equal(whole.slice(1, r.top, r.top + r.height).slice(2, r.left, r.left + r.width)));
  }
  EXPECT_EQ(decode_image(progressive.data(), progressive.size(), "t", 3, {0, 0, 45, 70}, 10, 10).sizes(),
            torch::IntArrayRef({3, 12, 18}));  // 1/4: 1/8 keeps 6 x 9
}

TEST(ImageTest, JpegScaledDecodeIsTheSmallestThatKeepsTheMinimumSize) {
  const torch::Tensor image = smooth(3, 384, 512);
  const Bytes jpeg = encode_jpeg(image, 95);
  const torch::Tensor whole = decode(jpeg, 3);
  const Region all{0, 0, 384, 512};
  const auto scaled = [&](const Region& r, int64_t min_h, int64_t min_w, int64_t channels = 3) {
    return decode_image(jpeg.data(), jpeg.size(), "t", channels, r, min_h, min_w);
  };
  const auto pooled = [&](int64_t factor) {
    return torch::avg_pool2d(whole.to(torch::kFloat).unsqueeze(0), {factor, factor}).squeeze(0);
  };
  EXPECT_EQ(scaled(all, 0, 0).sizes(), torch::IntArrayRef({3, 384, 512}));
  EXPECT_EQ(scaled(all, 64, 64).sizes(), torch::IntArrayRef({3, 96, 128}));  // 1/8 gives 48 rows
  EXPECT_EQ(scaled(all, 40, 0).sizes(), torch::IntArrayRef({3, 48, 64}));
  EXPECT_EQ(scaled(all, 97, 10).sizes(), torch::IntArrayRef({3, 192, 256}));
  EXPECT_EQ(scaled(all, 385, 0).sizes(), torch::IntArrayRef({3, 384, 512}));
  EXPECT_EQ(scaled(all, 64, 64, 1).sizes(), torch::IntArrayRef({1, 96, 128}));
  EXPECT_LT(mean_abs_error(scaled(all, 64, 64), pooled(4)), 2.0);
  EXPECT_LT(mean_abs_error(scaled(all, 40, 40), pooled(8)), 2.0);
  EXPECT_LT(mean_abs_error(scaled(all, 150, 150), pooled(2)), 2.0);
  // A region at 1/4 (200 / 4 = 50 rows, 160 / 4 = 40 columns; 1/8 would give 25 x 20) is
  // the same region of the whole image at 1/4.
  const torch::Tensor quarter = scaled(all, 96, 128);
  const torch::Tensor part = scaled({100, 200, 200, 160}, 40, 40);
  ASSERT_EQ(part.sizes(), torch::IntArrayRef({3, 50, 40}));
  EXPECT_TRUE(part.equal(quarter.slice(1, 25, 75).slice(2, 50, 90)));
  // Unaligned: rows from 101 / 4 = 25, ceil(150 / 4) = 38 of them.
  const torch::Tensor odd = scaled({101, 203, 150, 150}, 30, 30);
  ASSERT_EQ(odd.sizes(), torch::IntArrayRef({3, 38, 38}));
  EXPECT_TRUE(odd.equal(quarter.slice(1, 25, 63).slice(2, 50, 88)));
}

TEST(ImageTest, CmykJpegDecodesAsPilConvertsIt) {
  const uint8_t left[4] = {200, 100, 50, 180}, right[4] = {30, 240, 128, 255};
  const Bytes jpeg = write_jpeg(32, 16, 4, JCS_CMYK, false, [&](int64_t x, int64_t, int64_t s) {
    return (x < 16 ? left : right)[s];
  });
  const ImageInfo info = probe(jpeg);
  EXPECT_EQ(info.mode, "CMYK");
  EXPECT_TRUE(info.color);
  // PIL reads Adobe CMYK as inverted ink and converts R = (255 - K)(255 - C) / 255, which on
  // the stored (inverted) samples is c * k / 255.
  const auto expected = image_of(3, 16, 32, [&](int64_t x, int64_t, int64_t s) {
    const uint8_t* px = x < 16 ? left : right;
    return static_cast<int>(std::lround(px[s] * px[3] / 255.0));
  });
  const torch::Tensor rgb = decode(jpeg, 3);
  EXPECT_LE((rgb.to(torch::kInt) - expected.to(torch::kInt)).abs().max().item<int>(), 3) << rgb[0][0][0].item<int>();
  EXPECT_TRUE(decode(jpeg, 1).equal(pil_gray(rgb)));
  const Region r{3, 5, 10, 20};
  EXPECT_TRUE(decode_image(jpeg.data(), jpeg.size(), "t", 3, r).equal(rgb.slice(1, 3, 13).slice(2, 5, 25)));
}

TEST(ImageTest, NotAnImageIsNamed) {
  const Bytes empty, three = {'a', 'b', 'c'}, html = {'<', 'h', 't', 'm', 'l', '>', '\n'};
  EXPECT_TRUE(throws_with<RuntimeError>([&] { probe(empty, "z.png"); }, {"z.png: empty file"}));
  EXPECT_TRUE(throws_with<RuntimeError>([&] { decode(empty, 3, "z.png"); }, {"z.png: empty file"}));
  EXPECT_TRUE(throws_with<RuntimeError>([&] { probe(three, "a"); },
                                        {"a: not a JPEG or PNG image (it starts with bytes 61 62 63)"}));
  EXPECT_TRUE(throws_with<RuntimeError>([&] { decode(html, 1, "x.png"); },
                                        {"x.png: not a JPEG or PNG image (it starts with bytes 3c 68 74 6d)"}));
  EXPECT_TRUE(throws_with<RuntimeError>([&] { probe({0xff, 0xd8}, "b.jpg"); }, {"b.jpg: truncated JPEG (2 bytes)"}));
  EXPECT_TRUE(throws_with<RuntimeError>([&] { probe({0x89, 'P', 'N'}, "c.png"); }, {"c.png: truncated PNG (3 bytes)"}));
}

TEST(ImageTest, TruncatedImagesAreFoundByProbeAndRefusedByDecode) {
  const Bytes png = encode_png(noise(3, 40, 50, 1));
  const Bytes jpeg = encode_jpeg(smooth(3, 40, 50), 90);
  for (const auto& [bytes, kind] : {std::make_pair(png, std::string("PNG")), std::make_pair(jpeg, std::string("JPEG"))}) {
    for (size_t size : {size_t{9}, size_t{20}, size_t{33}, size_t{100}, bytes.size() / 2, bytes.size() - 12,
                        bytes.size() - 2, bytes.size() - 1}) {
      const Bytes cut(bytes.begin(), bytes.begin() + size);
      SCOPED_TRACE(kind + " cut to " + std::to_string(size));
      EXPECT_TRUE(throws_with<RuntimeError>([&] { probe(cut, "cats/1.img"); }, {"cats/1.img: truncated " + kind}));
      EXPECT_TRUE(throws_with<RuntimeError>([&] { decode(cut, 3, "cats/1.img"); }, {"cats/1.img: truncated " + kind}));
    }
  }
  EXPECT_TRUE(throws_with<RuntimeError>([&] { probe(Bytes(jpeg.begin(), jpeg.end() - 2), "cats/1.jpg"); },
                                        {"cats/1.jpg: truncated JPEG (no end-of-image marker)"}));
  // Zero padding after the end marker is allowed.
  Bytes padded = jpeg;
  padded.insert(padded.end(), 5, 0);
  EXPECT_TRUE(decode(padded, 3).equal(decode(jpeg, 3)));
  // So is a camera's trailer after it, but an EXIF thumbnail's end marker (before the scan)
  // does not make a cut file complete.
  Bytes trailer = jpeg;
  trailer.insert(trailer.end(), {'S', 'E', 'F', 'T', 1, 2, 3});
  EXPECT_TRUE(decode(trailer, 3).equal(decode(jpeg, 3)));
  Bytes cut_after_scan(jpeg.begin(), jpeg.begin() + jpeg.size() / 2);
  cut_after_scan.insert(cut_after_scan.end(), {1, 2, 3});
  EXPECT_TRUE(throws_with<RuntimeError>([&] { probe(cut_after_scan, "cats/3.jpg"); }, {"cats/3.jpg: truncated JPEG"}));
  // Cut in the middle of the scan and given an end marker again: the header and the trailer
  // look fine, the scan stops early, which libjpeg reports as a warning only.
  const Bytes big = encode_jpeg(smooth(3, 120, 160), 90);  // its scan data is most of it
  Bytes patched(big.begin(), big.begin() + big.size() * 2 / 3);
  patched.insert(patched.end(), {0xff, 0xd9});
  EXPECT_NO_THROW(probe(patched));
  EXPECT_TRUE(throws_with<RuntimeError>([&] { decode(patched, 3, "cats/2.jpg"); }, {"cats/2.jpg: ", " JPEG ("}));
}

TEST(ImageTest, CorruptBytesThrowOrDecodeButNeverCrash) {
  const Bytes jpeg = encode_jpeg(smooth(3, 48, 64), 90);
  std::mt19937 rng(3);
  int thrown = 0;
  for (int i = 0; i < 300; ++i) {
    Bytes bad = jpeg;
    for (int k = 0; k < 1 + i % 3; ++k) bad[20 + rng() % (bad.size() - 22)] ^= static_cast<uint8_t>(1 + rng() % 255);
    try {
      const torch::Tensor t = decode(bad, 3, "bad.jpg");
      EXPECT_EQ(t.size(0), 3);
    } catch (const RuntimeError& e) {
      EXPECT_EQ(std::string(e.what()).rfind("bad.jpg: ", 0), 0u) << e.what();
      ++thrown;
    }
  }
  EXPECT_GT(thrown, 0);
  // A 12-bit precision in the frame header is refused by the 8-bit libjpeg.
  Bytes precision = jpeg;
  for (size_t i = 2; i + 4 < precision.size(); ++i) {
    if (precision[i] == 0xff && precision[i + 1] == 0xc0) precision[i + 4] = 12;
  }
  EXPECT_TRUE(throws_with<RuntimeError>([&] { probe(precision, "p.jpg"); }, {"p.jpg: corrupt JPEG (", "12"}));
  // PNG: the chunk's CRC catches a changed byte of the pixel data.
  const Bytes png = encode_png(noise(3, 30, 30, 2));
  for (size_t k = 0; k < 20; ++k) {
    Bytes bad = png;
    bad[idat_offset(png) + 5 + k * 37] ^= 0x10;
    EXPECT_NO_THROW(probe(bad));
    EXPECT_TRUE(throws_with<RuntimeError>([&] { decode(bad, 3, "bad.png"); }, {"bad.png: corrupt PNG ("}));
  }
  Bytes ihdr = png;
  ihdr[17] ^= 1;
  EXPECT_TRUE(throws_with<RuntimeError>([&] { probe(ihdr, "h.png"); }, {"h.png: corrupt PNG (IHDR checksum mismatch)"}));
}

TEST(ImageTest, ImagesAboveTheBoundAreRefusedFromTheHeader) {
  const Bytes huge = with_png_size(encode_png(noise(1, 2, 2, 1)), 20000, 20000);
  const std::string message = "y.png: 20000 x 20000 pixels (400.0 megapixels) is above the bound of 100 megapixels";
  EXPECT_TRUE(throws_with<RuntimeError>([&] { probe(huge, "y.png"); }, {message}));
  EXPECT_TRUE(throws_with<RuntimeError>([&] { decode(huge, 3, "y.png"); }, {message}));
  Bytes jpeg = encode_jpeg(smooth(3, 64, 48), 80);
  EXPECT_TRUE(throws_with<RuntimeError>([&] { probe(jpeg, "s.jpg", 0.001); },
                                        {"s.jpg: 48 x 64 pixels (0.0031 megapixels) is above the bound of 0.001 megapixels"}));
  EXPECT_NO_THROW(probe(jpeg, "s.jpg", 0.0031));
  for (size_t i = 2; i + 8 < jpeg.size(); ++i) {
    if (jpeg[i] == 0xff && jpeg[i + 1] == 0xc0) {  // SOF0: length, precision, height, width
      jpeg[i + 5] = jpeg[i + 7] = 12000 >> 8;
      jpeg[i + 6] = jpeg[i + 8] = 12000 & 0xff;
      break;
    }
  }
  const std::string big = "a.jpg: 12000 x 12000 pixels (144.0 megapixels) is above the bound of 100 megapixels";
  EXPECT_TRUE(throws_with<RuntimeError>([&] { probe(jpeg, "a.jpg"); }, {big}));
  EXPECT_TRUE(throws_with<RuntimeError>([&] { decode(jpeg, 3, "a.jpg"); }, {big}));
  EXPECT_TRUE(throws_with<RuntimeError>([&] { probe(with_png_size(encode_png(noise(1, 2, 2, 1)), 0, 5), "0.png"); },
                                        {"0.png: PNG header says 0 x 5 pixels"}));
}

TEST(ImageTest, BadRequestsAreUsageErrors) {
  const Bytes png = encode_png(noise(3, 10, 12, 4));
  const Bytes jpeg = encode_jpeg(noise(3, 10, 12, 4));
  for (const Bytes* bytes : {&png, &jpeg}) {
    for (const Region& r : {Region{0, 0, 11, 12}, Region{0, 1, 10, 12}, Region{-1, 0, 5, 5}, Region{0, 0, 0, 5},
                            Region{9, 11, 2, 1}, Region{0, 0, 5, -1}}) {
      EXPECT_TRUE(throws_with<UsageError>([&] { decode_image(bytes->data(), bytes->size(), "r.img", 3, r); },
                                          {"r.img: region (top ", "not inside the 12 x 10 image"}));
    }
    EXPECT_TRUE(throws_with<UsageError>([&] { decode(*bytes, 2, "c.img"); }, {"c.img: ", "1 or 3 channels, not 2"}));
    EXPECT_TRUE(throws_with<UsageError>(
        [&] { decode_image(bytes->data(), bytes->size(), "m.img", 3, {0, 0, 2, 2}, -1, 0); }, {"m.img: "}));
  }
  EXPECT_TRUE(throws_with<UsageError>([] { encode_png(torch::zeros({3, 4, 4})); }, {"PNG encoder", "uint8"}));
  EXPECT_TRUE(throws_with<UsageError>([] { encode_png(torch::zeros({2, 4, 4}, torch::kUInt8)); }, {"2 channels"}));
  EXPECT_TRUE(throws_with<UsageError>([] { encode_png(torch::zeros({4, 4}, torch::kUInt8)); }, {"[C, H, W]"}));
  EXPECT_TRUE(throws_with<UsageError>([] { encode_png(torch::zeros({1, 0, 4}, torch::kUInt8)); }, {"each side"}));
  EXPECT_TRUE(throws_with<UsageError>([] { encode_jpeg(torch::zeros({4, 4, 4}, torch::kUInt8)); }, {"JPEG encoder", "4 channels"}));
  EXPECT_TRUE(throws_with<UsageError>([] { encode_jpeg(torch::zeros({3, 4, 4}, torch::kUInt8), 0); }, {"quality 0"}));
  EXPECT_TRUE(throws_with<UsageError>([] { encode_jpeg(torch::zeros({3, 4, 4}, torch::kUInt8), 101); }, {"quality 101"}));
  // Strided input (a channel slice) encodes as its values.
  const torch::Tensor rgb = noise(3, 6, 7, 11);
  EXPECT_TRUE(decode(encode_png(rgb.slice(0, 1, 2)), 1).equal(rgb.slice(0, 1, 2)));
}

}  // namespace
}  // namespace data
}  // namespace stalepipe
