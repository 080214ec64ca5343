#include "stalepipe/models/blocks.h"

#include <torch/autograd.h>
#if __has_include(<c10/util/variant.h>)
#include <c10/util/variant.h>
#endif

#include "stalepipe/common/error.h"
#include "stalepipe/models/batch_norm_relu.h"
#include "stalepipe/models/max_pool.h"

namespace stalepipe::models {
namespace {
// A module's options hold c10::variant up to LibTorch 2.0 and std::variant after it.
#if __has_include(<c10/util/variant.h>)
using c10::get_if;
#else
using std::get_if;
#endif
}  // namespace

int64_t conv_output_size(int64_t input, int64_t kernel, int64_t stride, int64_t padding) {
  return (input + 2 * padding - kernel) / stride + 1;
}

double conv2d_flops(const torch::nn::Conv2dImpl& conv, const std::vector<int64_t>& input_shape) {
  const auto& opt = conv.options;
  SP_CHECK_ARG(input_shape.size() == 3 && input_shape[0] == opt.in_channels(),
               "conv2d: expected an input of shape [", opt.in_channels(), ", H, W], got ",
               c10::IntArrayRef(input_shape));
  const auto kernel = *opt.kernel_size();
  const auto stride = *opt.stride();
  const auto* padding = get_if<torch::ExpandingArray<2>>(&opt.padding());
  SP_CHECK_ARG(padding != nullptr, "conv2d: FLOP counting needs explicit padding");
  const int64_t out_h = conv_output_size(input_shape[1], kernel[0], stride[0], (**padding)[0]);
  const int64_t out_w = conv_output_size(input_shape[2], kernel[1], stride[1], (**padding)[1]);
  const double macs_per_output =
      static_cast<double>(opt.in_channels() / opt.groups() * kernel[0] * kernel[1]);
  return 2.0 * macs_per_output * static_cast<double>(opt.out_channels() * out_h * out_w);
}

double linear_flops(const torch::nn::LinearImpl& linear) {
  return 2.0 * static_cast<double>(linear.options.in_features() * linear.options.out_features());
}

// ---------------------------------------------------------------------------------------------
ConvBlockImpl::ConvBlockImpl(ConvBlockOptions options_) : options(std::move(options_)) {
  reset();
}

void ConvBlockImpl::reset() {
  conv = register_module(
      "conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(options.in_channels(),
                                                         options.out_channels(),
                                                         options.kernel_size())
                                    .stride(options.stride())
                                    .padding(options.padding())
                                    .bias(!options.batch_norm())));
  if (options.batch_norm()) {
    bn = register_module("bn", torch::nn::BatchNorm2d(options.out_channels()));
  }
  if (options.max_pool() > 0) {
    const int64_t stride = options.max_pool_stride() > 0 ? options.max_pool_stride()
                                                         : options.max_pool();
    pool = register_module("pool", torch::nn::MaxPool2d(
                                       torch::nn::MaxPool2dOptions(options.max_pool())
                                           .stride(stride)
                                           .padding(options.max_pool_padding())));
  }
}

torch::Tensor ConvBlockImpl::forward(torch::Tensor input) {
  torch::Tensor x = conv(input);
  if (bn) x = batch_norm_relu(*bn, x);
  // relu(max(x)) == max(relu(x)) bit for bit, values and gradients (both monotonic, no
  // arithmetic), so the ReLU runs on the pooled tensor (a quarter of the size for 2x2). x is
  // our own intermediate, never the unit input, so it may change in place.
  const bool relu = !bn;
  if (!pool) return relu ? x.relu_() : x;
  const bool plain_2x2 = options.max_pool() == 2 && options.max_pool_padding() == 0 &&
                        (options.max_pool_stride() == 0 || options.max_pool_stride() == 2);
  if (plain_2x2) return max_pool_2x2(x, relu);
  return relu ? pool(x).relu_() : pool(x);
}

double ConvBlockImpl::forward_flops(const std::vector<int64_t>& input_shape) const {
  return conv2d_flops(*conv, input_shape);
}

// ---------------------------------------------------------------------------------------------
LinearBlockImpl::LinearBlockImpl(LinearBlockOptions options_) : options(std::move(options_)) {
  reset();
}

void LinearBlockImpl::reset() {
  SP_CHECK_ARG(!(options.flatten() && options.global_avg_pool()),
               "LinearBlock: choose flatten or global_avg_pool, not both");
  if (options.dropout() > 0) dropout = register_module("dropout", Dropout(options.dropout()));
  linear = register_module(
      "linear", torch::nn::Linear(options.in_features(), options.out_features()));
}

torch::Tensor LinearBlockImpl::forward(torch::Tensor input) {
  torch::Tensor x = input;
  if (options.global_avg_pool()) {
    x = x.mean({2, 3});
  } else if (options.flatten()) {
    x = x.flatten(1);  // a view of the input: fine, nothing below writes to it
  }
  if (dropout) x = dropout(x);
  x = linear(x);
  if (options.relu()) {
    x = x.relu_();
  }
  return x;
}

double LinearBlockImpl::forward_flops(const std::vector<int64_t>& /*input_shape*/) const {
  return linear_flops(*linear);
}

// ---------------------------------------------------------------------------------------------
namespace {

torch::nn::Conv2d block_conv(int64_t in, int64_t out, int64_t kernel, int64_t stride) {
  return torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, kernel).stride(stride).padding(kernel / 2).bias(false));
}

}  // namespace

BasicBlockHeadImpl::BasicBlockHeadImpl(BasicBlockOptions options_) : options(options_) { reset(); }

void BasicBlockHeadImpl::reset() {
  const auto& o = options;
  SP_CHECK_ARG(o.in_planes() >= 1 && o.planes() >= 1 && o.stride() >= 1,
               "BasicBlock: channels and stride must be >= 1, got ", o.in_planes(), " -> ", o.planes(),
               " stride ", o.stride());
  SP_CHECK_ARG(o.planes() >= o.in_planes() || o.shortcut() == Shortcut::kProjection,
               "BasicBlock: option-A shortcut needs planes >= in_planes, got ", o.in_planes(), " -> ",
               o.planes());
  conv1 = register_module("conv1", block_conv(o.in_planes(), o.planes(), 3, o.stride()));
  bn1 = register_module("bn1", torch::nn::BatchNorm2d(o.planes()));
}

std::vector<torch::Tensor> BasicBlockHeadImpl::forward(std::vector<torch::Tensor> inputs) {
  torch::Tensor h = batch_norm_relu(*bn1, conv1(inputs[0]));
  return {std::move(h), std::move(inputs[0])};
}

double BasicBlockHeadImpl::forward_flops(const std::vector<int64_t>& input_shape) const {
  return conv2d_flops(*conv1, input_shape);
}

BasicBlockTailImpl::BasicBlockTailImpl(BasicBlockOptions options_) : options(options_) { reset(); }

void BasicBlockTailImpl::reset() {
  const auto& o = options;
  conv2 = register_module("conv2", block_conv(o.planes(), o.planes(), 3, 1));
  bn2 = register_module("bn2", torch::nn::BatchNorm2d(o.planes()));
  if (o.shortcut() == Shortcut::kProjection && o.changes_shape()) {
    shortcut_conv = register_module("shortcut_conv", block_conv(o.in_planes(), o.planes(), 1, o.stride()));
    shortcut_bn = register_module("shortcut_bn", torch::nn::BatchNorm2d(o.planes()));
  }
}

namespace {

// The option-A shortcut as one autograd operation: input subsampled by `stride` (positions 0,
// s, 2s, ... as the stride-s 3x3 conv with padding 1 reads) into channels [front, front + C) of
// a zero tensor, and back. Written by hand so that both the output and the input gradient
// keep the input's layout: LibTorch's slicing backward builds an NCHW zero tensor for a
// channels-last input (measured, ResNet's [128, 16, 32, 32]: 15 ms forward and backward, and
// then a 7 ms mixed-layout add where the gradients meet, against 2.4 ms for two channels-last
// ones). The values are the same; only the layout differs.
class OptionAShortcut : public torch::autograd::Function<OptionAShortcut> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& input,
                               int64_t stride, int64_t planes) {
    const int64_t front = (planes - input.size(1)) / 2;
    const torch::MemoryFormat format = input.suggest_memory_format();
    ctx->saved_data["sizes"] = input.sizes();
    ctx->saved_data["stride"] = stride;
    ctx->saved_data["front"] = front;
    ctx->saved_data["channels_last"] = format == torch::MemoryFormat::ChannelsLast;
    // torch::zeros takes no memory format: empty then zero.
    torch::Tensor out = torch::empty({input.size(0), planes, (input.size(2) + stride - 1) / stride,
                                      (input.size(3) + stride - 1) / stride},
                                     input.options().memory_format(format))
                            .zero_();
    out.narrow(1, front, input.size(1)).copy_(subsampled(input, stride));
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const auto sizes = ctx->saved_data["sizes"].toIntVector();
    const int64_t stride = ctx->saved_data["stride"].toInt();
    const auto format = ctx->saved_data["channels_last"].toBool() ? torch::MemoryFormat::ChannelsLast
                                                                  : torch::MemoryFormat::Contiguous;
    const torch::Tensor& grad = grad_outputs[0];
    torch::Tensor grad_input = torch::empty(sizes, grad.options().memory_format(format)).zero_();
    subsampled(grad_input, stride).copy_(grad.narrow(1, ctx->saved_data["front"].toInt(), sizes[1]));
    return {grad_input, torch::Tensor(), torch::Tensor()};
  }

 private:
  static torch::Tensor subsampled(const torch::Tensor& x, int64_t stride) {
    using torch::indexing::None;
    using torch::indexing::Slice;
    return x.index({Slice(), Slice(), Slice(None, None, stride), Slice(None, None, stride)});
  }
};

}  // namespace

torch::Tensor option_a_shortcut(const torch::Tensor& input, int64_t stride, int64_t planes) {
  SP_CHECK_ARG(input.dim() == 4 && planes >= input.size(1) && stride >= 1,
               "option-A shortcut: needs a 4-D input, planes >= its channels and stride >= 1, got ",
               input.sizes(), ", planes ", planes, ", stride ", stride);
  return OptionAShortcut::apply(input, stride, planes);
}

torch::Tensor BasicBlockTailImpl::shortcut(const torch::Tensor& input) {
  if (!options.changes_shape()) {
    return input;
  }
  if (shortcut_conv) {
    return shortcut_bn(shortcut_conv(input));
  }
  return option_a_shortcut(input, options.stride(), options.planes());
}

std::vector<torch::Tensor> BasicBlockTailImpl::forward(std::vector<torch::Tensor> inputs) {
  return {batch_norm_relu(*bn2, conv2(inputs[0]), shortcut(inputs[1]))};
}

double BasicBlockTailImpl::forward_flops(const std::vector<int64_t>& input_shape) const {
  const int64_t s = options.stride();
  const std::vector<int64_t> block_input = {options.in_planes(), input_shape[1] * s, input_shape[2] * s};
  const double projection = shortcut_conv ? conv2d_flops(*shortcut_conv, block_input) : 0.0;
  return conv2d_flops(*conv2, input_shape) + projection;
}

}  // namespace stalepipe::models
