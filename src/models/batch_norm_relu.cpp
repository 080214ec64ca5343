#include "stalepipe/models/batch_norm_relu.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include <torch/autograd.h>

#include "stalepipe/common/error.h"
#include "kernel_impl.h"

namespace stalepipe::models {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// A channels-last tensor is a row-major [rows = N*H*W, C] matrix. Per-channel sums are taken
// over blocks of rows in float (vectorised across channels) and the blocks added in double.
constexpr int64_t kBlockRows = 256;

// The loops, over `rows` rows of C channels. Restrict pointers (nothing aliases), so that the
// compiler vectorises them across channels.

SP_KERNEL void shifted_sums(const float* __restrict__ x, int64_t rows, int64_t C,
                            const float* __restrict__ shift, float* __restrict__ sum,
                            float* __restrict__ squares) {
  for (int64_t r = 0; r < rows; ++r, x += C) {
    for (int64_t c = 0; c < C; ++c) {
      const float d = x[c] - shift[c];
      sum[c] += d;
      squares[c] += d * d;
    }
  }
}

// The mean is shift + offset (Moments, below): x - shift is exact for values near the mean,
// so centring loses nothing where the mean is large against the spread.
SP_KERNEL void normalise_clamp(const float* __restrict__ x, int64_t rows, int64_t C,
                               const float* __restrict__ shift, const float* __restrict__ offset,
                               const float* __restrict__ scale, const float* __restrict__ bias,
                               float* __restrict__ y) {
  for (int64_t r = 0; r < rows; ++r, x += C, y += C) {
    for (int64_t c = 0; c < C; ++c) {
      const float v = ((x[c] - shift[c]) - offset[c]) * scale[c] + bias[c];
      y[c] = v > 0.0f ? v : 0.0f;
    }
  }
}

SP_KERNEL void normalise_add_clamp(const float* __restrict__ x, const float* __restrict__ residual,
                                   int64_t rows, int64_t C, const float* __restrict__ shift,
                                   const float* __restrict__ offset, const float* __restrict__ scale,
                                   const float* __restrict__ bias, float* __restrict__ y) {
  for (int64_t r = 0; r < rows; ++r, x += C, residual += C, y += C) {
    for (int64_t c = 0; c < C; ++c) {
      const float v = ((x[c] - shift[c]) - offset[c]) * scale[c] + bias[c] + residual[c];
      y[c] = v > 0.0f ? v : 0.0f;
    }
  }
}

SP_KERNEL void mask_and_sum(const float* __restrict__ dy, const float* __restrict__ y,
                            const float* __restrict__ x, int64_t rows, int64_t C,
                            const float* __restrict__ shift, const float* __restrict__ offset,
                            float* __restrict__ gz, float* __restrict__ sum,
                            float* __restrict__ dot) {
  for (int64_t r = 0; r < rows; ++r, dy += C, y += C, x += C, gz += C) {
    for (int64_t c = 0; c < C; ++c) {
      const float g = y[c] > 0.0f ? dy[c] : 0.0f;
      gz[c] = g;
      sum[c] += g;
      dot[c] += g * ((x[c] - shift[c]) - offset[c]);
    }
  }
}

// dx may be gz (no __restrict__ between them).
SP_KERNEL void affine_combination(const float* gz, const float* __restrict__ x, int64_t rows,
                                  int64_t C, const float* __restrict__ shift,
                                  const float* __restrict__ offset, const float* __restrict__ a,
                                  const float* __restrict__ b, const float* __restrict__ d,
                                  float* dx) {
  for (int64_t r = 0; r < rows; ++r, gz += C, x += C, dx += C) {
    for (int64_t c = 0; c < C; ++c) {
      dx[c] = gz[c] * a[c] + ((x[c] - shift[c]) - offset[c]) * b[c] + d[c];
    }
  }
}

struct Matrix {
  int64_t rows = 0, channels = 0;
  int64_t blocks() const { return (rows + kBlockRows - 1) / kBlockRows; }
};

Matrix matrix_of(const torch::Tensor& x) {
  return {x.numel() / x.size(1), x.size(1)};
}

// body(first_row, end_row, block) for every block of m, on the calling thread (see runs_fused).
template <typename Body>
void for_each_block(const Matrix& m, const Body& body) {
  for (int64_t b = 0; b < m.blocks(); ++b) body(b * kBlockRows, std::min(m.rows, (b + 1) * kBlockRows), b);
}

// Per-channel sums over every row: body(first_row, end_row, block_sums) adds a block's rows
// into its own 2C floats (two sums per channel), which are then added in block order in
// double.
template <typename Body>
std::vector<double> two_sums_per_channel(const Matrix& m, const Body& body) {
  const int64_t width = 2 * m.channels;
  std::vector<float> partial(m.blocks() * width, 0.0f);
  for_each_block(m, [&](int64_t first, int64_t end, int64_t block) {
    body(first, end, partial.data() + block * width);
  });
  std::vector<double> total(width, 0.0);
  for (int64_t b = 0; b < m.blocks(); ++b) {
    const float* p = partial.data() + b * width;
    for (int64_t c = 0; c < width; ++c) total[c] += p[c];
  }
  return total;
}

// Per channel: the mean as shift + offset (shift = the first row's value, so that x - shift
// is exact near the mean and sums of its squares do not cancel), and the biased variance
// batch norm normalises with.
struct Moments {
  std::vector<float> shift, offset;
  std::vector<double> mean, var;
};

Moments channel_moments(const float* x, const Matrix& m) {
  const int64_t C = m.channels;
  Moments moments{std::vector<float>(x, x + C), std::vector<float>(C), std::vector<double>(C),
                  std::vector<double>(C)};
  const std::vector<double> total = two_sums_per_channel(m, [&](int64_t first, int64_t end, float* sum) {
    shifted_sums(x + first * C, end - first, C, moments.shift.data(), sum, sum + C);
  });
  const double rows = static_cast<double>(m.rows);
  for (int64_t c = 0; c < C; ++c) {
    const double offset = total[c] / rows;
    moments.offset[c] = static_cast<float>(offset);
    moments.mean[c] = moments.shift[c] + offset;
    moments.var[c] = std::max(0.0, total[C + c] / rows - offset * offset);
  }
  return moments;
}

void update_running_stats(torch::Tensor& running_mean, torch::Tensor& running_var,
                          const Moments& moments, int64_t rows, double momentum) {
  float* mean = running_mean.data_ptr<float>();
  float* var = running_var.data_ptr<float>();
  const double unbias = static_cast<double>(rows) / static_cast<double>(rows - 1);
  for (size_t c = 0; c < moments.mean.size(); ++c) {
    mean[c] = static_cast<float>(momentum * moments.mean[c] + (1 - momentum) * mean[c]);
    var[c] = static_cast<float>(momentum * moments.var[c] * unbias + (1 - momentum) * var[c]);
  }
}

std::vector<float> as_floats(const torch::Tensor& t) {
  const torch::Tensor c = t.contiguous();
  return {c.data_ptr<float>(), c.data_ptr<float>() + c.numel()};
}

torch::Tensor float_tensor(const std::vector<double>& values) {
  torch::Tensor t = torch::empty({static_cast<int64_t>(values.size())}, torch::kFloat);
  std::copy(values.begin(), values.end(), t.data_ptr<float>());
  return t;
}

// y = relu(bn(x) [+ residual]) for training: statistics, normalisation, running statistics.
// Returns y and the rows {shift, offset, invstd} the backward needs.
std::pair<torch::Tensor, torch::Tensor> fused_forward(const torch::Tensor& x, const torch::Tensor& weight,
                                                      const torch::Tensor& bias, const float* residual,
                                                      torch::Tensor& running_mean, torch::Tensor& running_var,
                                                      double momentum, double eps) {
  const Matrix m = matrix_of(x);
  const int64_t C = m.channels;
  const Moments moments = channel_moments(x.data_ptr<float>(), m);
  const std::vector<float> w = as_floats(weight), b = as_floats(bias);
  torch::Tensor stats = torch::empty({3, C}, torch::kFloat);  // shift, offset, invstd
  float* invstd = stats.data_ptr<float>() + 2 * C;
  std::vector<float> scale(C);
  for (int64_t c = 0; c < C; ++c) {
    invstd[c] = static_cast<float>(1.0 / std::sqrt(moments.var[c] + eps));
    scale[c] = w[c] * invstd[c];
  }
  std::copy(moments.shift.begin(), moments.shift.end(), stats.data_ptr<float>());
  std::copy(moments.offset.begin(), moments.offset.end(), stats.data_ptr<float>() + C);
  torch::Tensor y = torch::empty_like(x);
  const float* in = x.data_ptr<float>();
  float* out = y.data_ptr<float>();
  for_each_block(m, [&](int64_t first, int64_t end, int64_t /*block*/) {
    const int64_t at = first * C;
    const float *shift = moments.shift.data(), *offset = moments.offset.data();
    if (residual != nullptr) {
      normalise_add_clamp(in + at, residual + at, end - first, C, shift, offset, scale.data(), b.data(), out + at);
    } else {
      normalise_clamp(in + at, end - first, C, shift, offset, scale.data(), b.data(), out + at);
    }
  });
  update_running_stats(running_mean, running_var, moments, m.rows, momentum);
  return {y, stats};
}

struct Gradients {
  torch::Tensor input, weight, bias, residual;  // residual: the gradient past the ReLU
};

// Two passes: the ReLU's mask applied to dy (gz = dy where y > 0) with the per-channel sums of
// gz and gz * (x - mean); then batch norm's input gradient dx = gz * a + (x - mean) * b + d
// with per-channel coefficients from those sums.
Gradients fused_backward(const torch::Tensor& dy, const torch::Tensor& x, const torch::Tensor& y,
                         const torch::Tensor& weight, const torch::Tensor& stats, bool has_residual) {
  const Matrix m = matrix_of(x);
  const int64_t C = m.channels;
  const std::vector<float> w = as_floats(weight);
  const float *shift = stats.data_ptr<float>(), *offset = shift + C, *invstd = shift + 2 * C;
  torch::Tensor gz = torch::empty_like(x);
  const std::vector<double> sums = two_sums_per_channel(m, [&](int64_t first, int64_t end, float* sum) {
    const int64_t at = first * C;
    mask_and_sum(dy.data_ptr<float>() + at, y.data_ptr<float>() + at, x.data_ptr<float>() + at, end - first,
                 C, shift, offset, gz.data_ptr<float>() + at, sum, sum + C);
  });
  const double rows = static_cast<double>(m.rows);
  std::vector<float> a(C), b(C), d(C);
  std::vector<double> grad_weight(C), grad_bias(C);
  for (int64_t c = 0; c < C; ++c) {
    const double s = invstd[c], sum = sums[c], dot = sums[C + c];
    grad_bias[c] = sum;
    grad_weight[c] = dot * s;
    a[c] = static_cast<float>(w[c] * s);
    b[c] = static_cast<float>(-w[c] * s * s * s * dot / rows);
    d[c] = static_cast<float>(-w[c] * s * sum / rows);
  }
  torch::Tensor dx = has_residual ? torch::empty_like(x) : gz;  // in place where gz is not kept
  for_each_block(m, [&](int64_t first, int64_t end, int64_t /*block*/) {
    const int64_t at = first * C;
    affine_combination(gz.data_ptr<float>() + at, x.data_ptr<float>() + at, end - first, C, shift, offset,
                       a.data(), b.data(), d.data(), dx.data_ptr<float>() + at);
  });
  return {dx, float_tensor(grad_weight), float_tensor(grad_bias), has_residual ? gz : torch::Tensor()};
}

class BatchNormReluFunction : public torch::autograd::Function<BatchNormReluFunction> {
 public:
  // residual is empty (numel 0) where there is none: LibTorch 1.13's Function takes no
  // undefined inputs. running_mean and running_var are updated in place.
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& weight,
                               const torch::Tensor& bias, const torch::Tensor& residual,
                               torch::Tensor running_mean, torch::Tensor running_var, double momentum,
                               double eps) {
    const bool has_residual = residual.numel() > 0;
    auto [y, stats] = fused_forward(x, weight, bias, has_residual ? residual.data_ptr<float>() : nullptr,
                                    running_mean, running_var, momentum, eps);
    ctx->save_for_backward({x, weight, y});
    ctx->saved_data["stats"] = stats;
    ctx->saved_data["residual"] = has_residual;
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const Gradients g = fused_backward(grad_outputs[0].contiguous(torch::MemoryFormat::ChannelsLast), saved[0],
                                       saved[2], saved[1], ctx->saved_data["stats"].toTensor(),
                                       ctx->saved_data["residual"].toBool());
    return {g.input, g.weight, g.bias, g.residual, {}, {}, {}, {}};
  }
};

torch::Tensor separate_operations(torch::nn::BatchNorm2dImpl& bn, const torch::Tensor& x,
                                  const torch::Tensor& residual) {
  torch::Tensor y = bn.forward(x);
  // Out of place: the residual may be the block's input itself.
  if (residual.defined()) y = y + residual;
  return y.relu_();
}

// The factor of the running-statistics update, after counting this batch, as
// torch::nn::BatchNorm2d's forward takes it.
double running_stats_momentum(torch::nn::BatchNorm2dImpl& bn) {
  torch::NoGradGuard no_grad;
  bn.num_batches_tracked += 1;
  const auto momentum = bn.options.momentum();
  return momentum ? *momentum : 1.0 / bn.num_batches_tracked.item<double>();
}

}  // namespace

bool runs_fused(const torch::nn::BatchNorm2dImpl& bn, const torch::Tensor& x, const torch::Tensor& residual) {
  return runs_by_hand(x) && bn.is_training() && bn.options.affine() && bn.options.track_running_stats() &&
         bn.weight.scalar_type() == torch::kFloat && x.dim() == 4 &&
         x.is_contiguous(torch::MemoryFormat::ChannelsLast) && x.numel() / x.size(1) > 1 &&
         (!residual.defined() || (residual.device().is_cpu() && residual.scalar_type() == torch::kFloat));
}

torch::Tensor batch_norm_relu(torch::nn::BatchNorm2dImpl& bn, const torch::Tensor& x,
                              const torch::Tensor& residual) {
  if (!runs_fused(bn, x, residual)) return separate_operations(bn, x, residual);
  SP_CHECK_ARG(x.size(1) == bn.options.num_features(), "batch_norm_relu: input has ", x.size(1),
               " channels, batch norm ", bn.options.num_features());
  SP_CHECK_ARG(!residual.defined() || residual.sizes() == x.sizes(), "batch_norm_relu: residual of shape ",
               residual.sizes(), " for an input of shape ", x.sizes());
  const torch::Tensor res = residual.defined() ? residual.contiguous(torch::MemoryFormat::ChannelsLast)
                                               : torch::empty({0}, x.options());
  const double momentum = running_stats_momentum(bn);
  return BatchNormReluFunction::apply(x, bn.weight, bn.bias, res, bn.running_mean, bn.running_var, momentum,
                                      bn.options.eps());
}

}  // namespace stalepipe::models
