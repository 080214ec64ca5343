#include "stalepipe/models/max_pool.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include <torch/autograd.h>

#include "kernel_impl.h"

namespace stalepipe::models {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Both layouts as [planes, H, W, C]: channels-last is [N, H, W, C]; NCHW is [N * C, H, W, 1].
struct Planes {
  int64_t planes = 0, height = 0, width = 0, channels = 0;
  int64_t out_height() const { return height / 2; }
  int64_t out_width() const { return width / 2; }
};

// A tensor contiguous in both layouts (one channel) is taken as NCHW: the same memory.
bool is_channels_last(const torch::Tensor& x) { return !x.is_contiguous(); }

Planes planes_of(const torch::Tensor& x) {
  const int64_t n = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3);
  return is_channels_last(x) ? Planes{n, h, w, c} : Planes{n * c, h, w, 1};
}

torch::MemoryFormat memory_format(bool channels_last) {
  return channels_last ? torch::MemoryFormat::ChannelsLast : torch::MemoryFormat::Contiguous;
}

// Selects as bit masks: GCC turns a float `c ? a : b` into a branch where it does not
// vectorise the loop (a loop's remainder), and a branch on window values is mispredicted half
// the time, which costs more than the rest of the loop.
inline uint32_t bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}

inline uint32_t mask(bool c) { return 0u - static_cast<uint32_t>(c); }  // all ones where c

inline float select(uint32_t mask, float a, float b) {
  const uint32_t blended = (bits(a) & mask) | (bits(b) & ~mask);
  float f;
  std::memcpy(&f, &blended, sizeof f);
  return f;
}

// LibTorch folds each window's elements row by row from -infinity: a later element wins where
// it is greater or NaN (so the first maximum wins a tie, the last NaN wins over everything).
// The pairs (0, 1) and (2, 3) folded first and then against each other give the same winner.
// The lower pair's NaN test is on its inputs: on the selected value, GCC does not vectorise.
inline void window_max(float a0, float a1, float a2, float a3, float& max, uint8_t& arg) {
  const bool nan2 = std::isunordered(a2, a2), nan3 = std::isunordered(a3, a3);
  const bool upper_1 = (a1 > a0) | std::isunordered(a1, a1), lower_3 = (a3 > a2) | nan3;
  const float upper = select(mask(upper_1), a1, a0), lower = select(mask(lower_3), a3, a2);
  const bool lower_wins = (lower > upper) | nan2 | nan3;
  max = select(mask(lower_wins), lower, upper);
  arg = static_cast<uint8_t>(upper_1 + lower_wins * (2 + lower_3 - upper_1));
}

// relu_ as LibTorch computes it (clamp_min): NaN and -0.0 pass unchanged.
inline float relu_if(bool relu, float v) { return select(mask(relu & (v < 0.0f)), 0.0f, v); }

// Channels-last: the window at every column i of two rows, with its right neighbour at i + C.
// The windows are every other group of C columns (keep_windows takes them), and the loop is
// long and contiguous, so GCC vectorises it fully where a loop over one window's C channels
// (LeNet-5's 6) would not fill a vector.
SP_KERNEL void merge_windows(const float* __restrict__ top, const float* __restrict__ bottom, int64_t length,
                             int64_t C, float* __restrict__ max, uint8_t* __restrict__ arg) {
  for (int64_t i = 0; i < length; ++i) window_max(top[i], top[i + C], bottom[i], bottom[i + C], max[i], arg[i]);
}

void keep_windows(const float* __restrict__ max, const uint8_t* __restrict__ arg, int64_t out_width, int64_t C,
                  bool relu, float* __restrict__ y, uint8_t* __restrict__ y_arg) {
  for (int64_t ow = 0; ow < out_width; ++ow) {
    for (int64_t c = 0; c < C; ++c) {
      y[ow * C + c] = relu_if(relu, max[2 * ow * C + c]);
      y_arg[ow * C + c] = arg[2 * ow * C + c];
    }
  }
}

// NCHW: one plane, whose windows' left columns are every other element of a row (GCC
// vectorises the loop with interleaved loads). Rows are short (28 for LeNet-5), so the plane
// is one call.
SP_KERNEL void pool_plane(const float* __restrict__ x, int64_t width, int64_t out_height, int64_t out_width,
                          bool relu, float* __restrict__ y, uint8_t* __restrict__ arg) {
  for (int64_t oh = 0; oh < out_height; ++oh) {
    const float* top = x + 2 * oh * width;
    const float* bottom = top + width;
    float* y_row = y + oh * out_width;
    uint8_t* arg_row = arg + oh * out_width;
    for (int64_t ow = 0; ow < out_width; ++ow) {
      float max;
      window_max(top[2 * ow], top[2 * ow + 1], bottom[2 * ow], bottom[2 * ow + 1], max, arg_row[ow]);
      y_row[ow] = relu_if(relu, max);
    }
  }
}

void pool_forward(const float* x, const Planes& s, bool relu, float* y, uint8_t* arg) {
  const int64_t C = s.channels, row = s.width * C, out_row = s.out_width() * C;
  if (C == 1) {
    for (int64_t p = 0; p < s.planes; ++p) {
      const int64_t out = p * s.out_height() * out_row;
      pool_plane(x + p * s.height * row, s.width, s.out_height(), s.out_width(), relu, y + out, arg + out);
    }
    return;
  }
  const int64_t length = 2 * out_row - C;  // from the first window's left column to the last's
  std::vector<float> max(length);
  std::vector<uint8_t> max_arg(length);
  for (int64_t p = 0; p < s.planes; ++p) {
    for (int64_t oh = 0; oh < s.out_height(); ++oh) {
      const float* top = x + (p * s.height + 2 * oh) * row;
      const int64_t out = (p * s.out_height() + oh) * out_row;
      merge_windows(top, top + row, length, C, max.data(), max_arg.data());
      keep_windows(max.data(), max_arg.data(), s.out_width(), C, relu, y + out, arg + out);
    }
  }
}

// Two input rows' gradient from one output row: zeros, then each gradient at its window's
// winner. LibTorch's backward adds it to a zeroed buffer (0 + -0.0 is +0.0), and the ReLU's
// passes it where the output is not <= 0.
template <bool Relu>
void unpool_rows(const float* __restrict__ dy, const float* __restrict__ y, const uint8_t* __restrict__ arg,
                 int64_t out_width, int64_t C, int64_t row, float* __restrict__ dx) {
  std::fill(dx, dx + 2 * row, 0.0f);
  for (int64_t ow = 0; ow < out_width; ++ow) {
    for (int64_t c = 0; c < C; ++c) {
      const int64_t j = ow * C + c;
      const float g = 0.0f + dy[j];
      dx[2 * ow * C + c + (arg[j] & 1) * C + (arg[j] >> 1) * row] = Relu ? select(mask(y[j] <= 0.0f), 0.0f, g) : g;
    }
  }
}

// A last row the pooling dropped (odd height) gets zero, as do dropped columns.
template <bool Relu>
void pool_backward(const float* dy, const float* y, const uint8_t* arg, const Planes& s, float* dx) {
  const int64_t row = s.width * s.channels, out_row = s.out_width() * s.channels;
  for (int64_t p = 0; p < s.planes; ++p) {
    float* plane = dx + p * s.height * row;
    for (int64_t oh = 0; oh < s.out_height(); ++oh) {
      const int64_t out = (p * s.out_height() + oh) * out_row;
      unpool_rows<Relu>(dy + out, Relu ? y + out : nullptr, arg + out, s.out_width(), s.channels, row,
                        plane + 2 * oh * row);
    }
    std::fill(plane + 2 * s.out_height() * row, plane + s.height * row, 0.0f);
  }
}

class MaxPoolFunction : public torch::autograd::Function<MaxPoolFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, bool relu) {
    const Planes s = planes_of(x);
    const bool channels_last = is_channels_last(x);
    const auto format = memory_format(channels_last);
    torch::Tensor y = torch::empty({x.size(0), x.size(1), s.out_height(), s.out_width()},
                                   x.options().memory_format(format));
    torch::Tensor arg = torch::empty(y.sizes(), x.options().dtype(torch::kUInt8).memory_format(format));
    pool_forward(x.data_ptr<float>(), s, relu, y.data_ptr<float>(), arg.data_ptr<uint8_t>());
    ctx->saved_data["sizes"] = x.sizes();
    ctx->saved_data["channels_last"] = channels_last;
    ctx->saved_data["relu"] = relu;
    ctx->saved_data["arg"] = arg;
    // The output is kept only for the ReLU's mask.
    if (relu) ctx->save_for_backward({y});
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const bool relu = ctx->saved_data["relu"].toBool();
    const torch::Tensor arg = ctx->saved_data["arg"].toTensor();
    const auto format = memory_format(ctx->saved_data["channels_last"].toBool());
    const torch::Tensor dy = grad_outputs[0].contiguous(format);
    torch::Tensor dx = torch::empty(ctx->saved_data["sizes"].toIntVector(), dy.options().memory_format(format));
    const torch::Tensor y = relu ? ctx->get_saved_variables()[0] : torch::Tensor();
    const auto unpool = relu ? pool_backward<true> : pool_backward<false>;
    unpool(dy.data_ptr<float>(), relu ? y.data_ptr<float>() : nullptr, arg.data_ptr<uint8_t>(), planes_of(dx),
           dx.data_ptr<float>());
    return {dx, {}};
  }
};

}  // namespace

bool pools_by_hand(const torch::Tensor& x) {
  // On two intra-op threads LibTorch's kernels are the faster ones on most shapes.
  return runs_by_hand(x) && x.dim() == 4 && x.size(2) >= 2 && x.size(3) >= 2 &&
         (x.is_contiguous() || x.is_contiguous(torch::MemoryFormat::ChannelsLast));
}

torch::Tensor max_pool_2x2(const torch::Tensor& x, bool relu) {
  if (!pools_by_hand(x)) {
    torch::Tensor y = torch::max_pool2d(x, 2);
    return relu ? y.relu_() : y;
  }
  return MaxPoolFunction::apply(x, relu);
}

}  // namespace stalepipe::models
