#include "stalepipe/data/resample.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "data/random_impl.h"
#include "stalepipe/common/error.h"

namespace stalepipe {
namespace data {
namespace {

// Uniform in [0, 1) from the top 53 bits of one draw.
double uniform01(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1p-53; }

// Python's round(): half to even. std::nearbyint rounds by the current mode, which is
// round-to-nearest-even unless a caller changed it (nothing in stalepipe does).
int64_t round_half_even(double x) { return static_cast<int64_t>(std::nearbyint(x)); }

void check_size(const char* what, int64_t height, int64_t width) {
  SP_CHECK_ARG(height >= 1 && width >= 1, what, ": image size must be positive, got ", height,
               "x", width);
}

// ---------------------------------------------------------------------------------------------
// PIL's ImagingResample (Resample.c) for 8-bit samples with the BILINEAR (triangle) filter, in
// its 22-bit fixed point, so that the results equal Image.resize(size, BILINEAR) exactly.

constexpr int kPrecisionBits = 32 - 8 - 2;

// The input samples [first, first + count) and their fixed-point weights for each output sample.
struct AxisCoefficients {
  int64_t taps = 0;                 // weights per output sample (the widest window)
  std::vector<int64_t> first;       // per output sample
  std::vector<int64_t> count;       // per output sample, <= taps
  std::vector<int32_t> weights;     // [out_size, taps], zero beyond count
};

double triangle(double x) {
  x = std::fabs(x);
  return x < 1.0 ? 1.0 - x : 0.0;
}

// PIL's precompute_coeffs + normalize_coeffs_8bpc, step for step (same double arithmetic).
AxisCoefficients precompute(int64_t in_size, int64_t out_size) {
  const double scale = static_cast<double>(in_size) / static_cast<double>(out_size);
  const double filter_scale = std::max(scale, 1.0);
  const double support = 1.0 * filter_scale;  // the triangle's support is 1
  const double inverse_scale = 1.0 / filter_scale;  // PIL multiplies by it (not divides)
  AxisCoefficients axis;
  axis.taps = static_cast<int64_t>(std::ceil(support)) * 2 + 1;
  axis.first.resize(out_size);
  axis.count.resize(out_size);
  axis.weights.assign(out_size * axis.taps, 0);
  std::vector<double> k(axis.taps);
  for (int64_t i = 0; i < out_size; ++i) {
    const double center = (static_cast<double>(i) + 0.5) * scale;
    // PIL truncates (int)(x + 0.5); the clamp to 0 makes that the same as flooring here.
    const int64_t lo = std::max<int64_t>(static_cast<int64_t>(center - support + 0.5), 0);
    const int64_t hi = std::min<int64_t>(static_cast<int64_t>(center + support + 0.5), in_size);
    const int64_t count = hi - lo;
    double total = 0;
    for (int64_t j = 0; j < count; ++j) {
      k[j] = triangle((static_cast<double>(j + lo) - center + 0.5) * inverse_scale);
      total += k[j];
    }
    for (int64_t j = 0; j < count; ++j) {
      const double w = total != 0.0 ? k[j] / total : k[j];
      // Truncation after adding +-0.5: round half away from zero, as PIL does.
      axis.weights[i * axis.taps + j] =
          static_cast<int32_t>(w < 0 ? -0.5 + w * (1 << kPrecisionBits)
                                     : 0.5 + w * (1 << kPrecisionBits));
    }
    axis.first[i] = lo;
    axis.count[i] = count;
  }
  return axis;
}

uint8_t clip8(int32_t sum) {
  const int32_t v = sum >> kPrecisionBits;
  return static_cast<uint8_t>(v < 0 ? 0 : (v > 255 ? 255 : v));
}

// One row: out[x] = sum_j in[first[x] + j] * w[x][j], rounded (the initial half) and clipped.
void resample_row(const uint8_t* in, const AxisCoefficients& axis, uint8_t* out) {
  const int64_t out_size = static_cast<int64_t>(axis.first.size());
  for (int64_t x = 0; x < out_size; ++x) {
    const uint8_t* src = in + axis.first[x];
    const int32_t* w = axis.weights.data() + x * axis.taps;
    int32_t sum = 1 << (kPrecisionBits - 1);
    for (int64_t j = 0; j < axis.count[x]; ++j) {
      sum += static_cast<int32_t>(src[j]) * w[j];
    }
    out[x] = clip8(sum);
  }
}

// The vertical pass over rows of `width` samples `row_stride` apart, accumulating whole rows
// (the same integer sums as PIL's column-wise loop, in an order that vectorises).
void resample_columns(const uint8_t* in, int64_t row_stride, int64_t width,
                      const AxisCoefficients& axis, uint8_t* out) {
  std::vector<int32_t> sum(width);
  const int64_t out_size = static_cast<int64_t>(axis.first.size());
  for (int64_t y = 0; y < out_size; ++y) {
    std::fill(sum.begin(), sum.end(), 1 << (kPrecisionBits - 1));
    for (int64_t j = 0; j < axis.count[y]; ++j) {
      const uint8_t* src = in + (axis.first[y] + j) * row_stride;
      const int32_t w = axis.weights[y * axis.taps + j];
      for (int64_t x = 0; x < width; ++x) {
        sum[x] += static_cast<int32_t>(src[x]) * w;
      }
    }
    uint8_t* dst = out + y * width;
    for (int64_t x = 0; x < width; ++x) {
      dst[x] = clip8(sum[x]);
    }
  }
}

// Row y of plane `plane` (strides sy, sx) as contiguous samples: the row itself where sx == 1,
// else gathered into `buffer`.
const uint8_t* contiguous_row(const uint8_t* plane, int64_t y, int64_t sy, int64_t sx,
                              int64_t width, std::vector<uint8_t>& buffer) {
  const uint8_t* row = plane + y * sy;
  if (sx == 1) {
    return row;
  }
  buffer.resize(width);
  for (int64_t x = 0; x < width; ++x) {
    buffer[x] = row[x * sx];
  }
  return buffer.data();
}

}  // namespace

Region random_resized_crop(int64_t height, int64_t width, std::mt19937_64& rng) {
  check_size("random_resized_crop", height, width);
  const double area = static_cast<double>(height) * static_cast<double>(width);
  const double min_ratio = 3.0 / 4.0, max_ratio = 4.0 / 3.0;
  const double log_min = std::log(min_ratio), log_max = std::log(max_ratio);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target_area = area * (0.08 + (1.0 - 0.08) * uniform01(rng));
    const double aspect = std::exp(log_min + (log_max - log_min) * uniform01(rng));
    const int64_t w = round_half_even(std::sqrt(target_area * aspect));
    const int64_t h = round_half_even(std::sqrt(target_area / aspect));
    if (w > 0 && w <= width && h > 0 && h <= height) {
      const auto top = static_cast<int64_t>(detail::uniform_below(rng, height - h + 1));
      const auto left = static_cast<int64_t>(detail::uniform_below(rng, width - w + 1));
      return Region{top, left, h, w};
    }
  }
  // No draw fit: the centre crop, its aspect ratio clamped to [3/4, 4/3].
  const double in_ratio = static_cast<double>(width) / static_cast<double>(height);
  int64_t w = width, h = height;
  if (in_ratio < min_ratio) {
    h = round_half_even(static_cast<double>(w) / min_ratio);
  } else if (in_ratio > max_ratio) {
    w = round_half_even(static_cast<double>(h) * max_ratio);
  }
  return Region{(height - h) / 2, (width - w) / 2, h, w};
}

Region centre_square(int64_t height, int64_t width) {
  check_size("centre_square", height, width);
  const int64_t side = std::min(height, width);
  return Region{round_half_even(static_cast<double>(height - side) / 2.0),
                round_half_even(static_cast<double>(width - side) / 2.0), side, side};
}

void resize_bilinear(const torch::Tensor& image, int64_t out_height, int64_t out_width,
                     uint8_t* out) {
  SP_CHECK_ARG(image.dim() == 3 && image.scalar_type() == torch::kUInt8 && image.device().is_cpu(),
               "resize_bilinear: expected a uint8 CPU tensor [C, H, W], got ",
               image.scalar_type(), " ", image.sizes());
  const int64_t channels = image.size(0), height = image.size(1), width = image.size(2);
  SP_CHECK_ARG(channels >= 1 && height >= 1 && width >= 1 && out_height >= 1 && out_width >= 1,
               "resize_bilinear: sizes must be positive, got ", image.sizes(), " to ", out_height,
               "x", out_width);
  const uint8_t* in = image.data_ptr<uint8_t>();
  const int64_t sc = image.stride(0), sy = image.stride(1), sx = image.stride(2);
  // PIL skips the pass of an axis whose size stays (no rounding of an intermediate).
  const bool horizontal = out_width != width;
  const bool vertical = out_height != height;
  const AxisCoefficients rows = precompute(height, out_height);
  const AxisCoefficients cols = precompute(width, out_width);
  // The horizontal pass covers only the input rows the vertical pass reads, as PIL's does.
  const int64_t first_row = vertical ? rows.first.front() : 0;
  const int64_t end_row = vertical ? rows.first.back() + rows.count.back() : height;
  std::vector<uint8_t> gathered;
  std::vector<uint8_t> temp(vertical ? (end_row - first_row) * out_width : 0);
  AxisCoefficients shifted = rows;
  for (int64_t& first : shifted.first) {
    first -= first_row;
  }
  for (int64_t c = 0; c < channels; ++c) {
    const uint8_t* plane = in + c * sc;
    uint8_t* dst = out + c * out_height * out_width;
    // Pass 1 (or a copy): rows [first_row, end_row) at the output width, into temp, or
    // straight into dst when no vertical pass follows.
    uint8_t* stage = vertical ? temp.data() : dst;
    for (int64_t y = first_row; y < end_row; ++y) {
      const uint8_t* row = contiguous_row(plane, y, sy, sx, width, gathered);
      uint8_t* target = stage + (y - first_row) * out_width;
      if (horizontal) {
        resample_row(row, cols, target);
      } else {
        std::memcpy(target, row, width);
      }
    }
    if (vertical) {
      resample_columns(temp.data(), out_width, out_width, shifted, dst);
    }
  }
}

void flip_horizontal(uint8_t* pixels, int64_t channels, int64_t height, int64_t width) {
  for (int64_t r = 0; r < channels * height; ++r) {
    std::reverse(pixels + r * width, pixels + (r + 1) * width);
  }
}

}  // namespace data
}  // namespace stalepipe
