// The building blocks the zoo's units are made of. Each block is one unit's module.
//
// Every block:
//  - has forward: Tensor(Tensor) (a residual block's halves: std::vector<Tensor>(std::vector<
//    Tensor>), as units with skip tensors have) and never modifies its inputs in place
//    (activations run in place only on the block's own intermediate tensors);
//  - uses no randomness in forward (no dropout), so results do not depend on the thread;
//  - is Cloneable and serialisable (torch::save/load) like any LibTorch module;
//  - counts its own forward FLOPs (FlopCounted) so that the layer table can report them without
//    any instrumentation of the training path.
#pragma once

#include <cstdint>
#include <vector>

#include <torch/arg.h>
#include <torch/nn/cloneable.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/pooling.h>
#include <torch/nn/pimpl.h>

#include "stalepipe/models/dropout.h"

namespace stalepipe::models {

// A module that can count the FLOPs of its own forward pass.
// FLOP convention for the whole zoo: one multiply-add = 2 FLOPs; only conv and linear layers
// are counted (bias adds, batch norm, ReLU, pooling and residual adds are left out: they are
// well under 1% for every zoo network and are memory-bound anyway).
class FlopCounted {
 public:
  virtual ~FlopCounted() = default;
  // FLOPs of one sample's forward pass for an input of shape `input_shape` (no batch dim,
  // e.g. {3, 32, 32}). Throws UsageError if the shape does not fit the block.
  virtual double forward_flops(const std::vector<int64_t>& input_shape) const = 0;
};

// Output size of a convolution or pooling along one spatial dimension (dilation 1).
int64_t conv_output_size(int64_t input, int64_t kernel, int64_t stride, int64_t padding);

// FLOPs of one sample through a Conv2d / Linear for the given input shape (no batch dim).
double conv2d_flops(const torch::nn::Conv2dImpl& conv, const std::vector<int64_t>& input_shape);
double linear_flops(const torch::nn::LinearImpl& linear);

// ---------------------------------------------------------------------------------------------
// ConvBlock: conv (no dilation, no groups) -> [BatchNorm2d] -> ReLU -> [MaxPool2d].
// Input [N, in_channels, H, W]; output [N, out_channels, H', W'].
// With batch_norm the conv has no bias (the BN shift makes it redundant). Without it the block
// pools before the ReLU, which gives the same values and gradients on fewer elements.
struct ConvBlockOptions {
  ConvBlockOptions(int64_t in_channels, int64_t out_channels, int64_t kernel_size)
      : in_channels_(in_channels), out_channels_(out_channels), kernel_size_(kernel_size) {}
  TORCH_ARG(int64_t, in_channels);
  TORCH_ARG(int64_t, out_channels);
  TORCH_ARG(int64_t, kernel_size);
  TORCH_ARG(int64_t, stride) = 1;
  TORCH_ARG(int64_t, padding) = 0;
  TORCH_ARG(bool, batch_norm) = false;
  // Kernel of a max pool after the ReLU; 0 = no pooling.
  TORCH_ARG(int64_t, max_pool) = 0;
  // That pool's stride (0: the kernel size) and padding (ImageNet ResNet's stem: 3, 2, 1).
  TORCH_ARG(int64_t, max_pool_stride) = 0;
  TORCH_ARG(int64_t, max_pool_padding) = 0;
};

class ConvBlockImpl : public torch::nn::Cloneable<ConvBlockImpl>, public FlopCounted {
 public:
  explicit ConvBlockImpl(ConvBlockOptions options);
  void reset() override;
  torch::Tensor forward(torch::Tensor input);
  double forward_flops(const std::vector<int64_t>& input_shape) const override;

  ConvBlockOptions options;
  torch::nn::Conv2d conv{nullptr};
  torch::nn::BatchNorm2d bn{nullptr};   // null without batch_norm
  torch::nn::MaxPool2d pool{nullptr};   // null without max_pool
};
TORCH_MODULE(ConvBlock);

// ---------------------------------------------------------------------------------------------
// LinearBlock: [global average pool | flatten] -> [dropout] -> linear -> [ReLU].
// Input [N, in_features] or, with flatten, [N, ...] whose trailing dims multiply to
// in_features, or, with global_avg_pool, [N, in_features, H, W]. Output [N, out_features].
struct LinearBlockOptions {
  LinearBlockOptions(int64_t in_features, int64_t out_features)
      : in_features_(in_features), out_features_(out_features) {}
  TORCH_ARG(int64_t, in_features);
  TORCH_ARG(int64_t, out_features);
  TORCH_ARG(bool, flatten) = false;
  TORCH_ARG(bool, global_avg_pool) = false;
  TORCH_ARG(bool, relu) = true;
  // Dropout of the linear layer's input with this probability (models/dropout.h); 0: none.
  TORCH_ARG(double, dropout) = 0;
};

class LinearBlockImpl : public torch::nn::Cloneable<LinearBlockImpl>, public FlopCounted {
 public:
  explicit LinearBlockImpl(LinearBlockOptions options);
  void reset() override;
  torch::Tensor forward(torch::Tensor input);
  double forward_flops(const std::vector<int64_t>& input_shape) const override;

  LinearBlockOptions options;
  Dropout dropout{nullptr};  // only with options.dropout > 0
  torch::nn::Linear linear{nullptr};
};
TORCH_MODULE(LinearBlock);

// ---------------------------------------------------------------------------------------------
// How a BasicBlock's shortcut matches a change of shape (stride or channels).
enum class Shortcut {
  // Parameter-free (He et al. 2016, option A; the CIFAR ResNets): x subsampled by `stride` and
  // padded with zero channels ((planes - in_planes) / 2 in front, the rest behind), as in the
  // common CIFAR implementations. Requires planes >= in_planes.
  kZeroPad,
  // A 1x1 conv with `stride` (no bias) + BatchNorm2d (option B; torchvision's ResNets).
  kProjection,
};

// BasicBlock of the ResNets (He et al. 2016):
//   out = relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x))
// conv1 is 3x3 with `stride`, conv2 3x3 stride 1, both without bias. The shortcut is the
// identity when shapes agree, otherwise as `shortcut` says. Two weight layers in the zoo's
// numbering (conv1, conv2): a projection conv is not counted, as in the networks' depths.
// A block is two units, so that a pipeline register may sit between its convolutions: the
// head (conv1, bn1) stashes the block's input x as a skip tensor (models/skips.h), the tail
// (conv2, bn2, the projection) pops it for the shortcut.
// Head: {x [N, in_planes, H, W]} -> {h [N, planes, ceil(H/stride), ceil(W/stride)], x}.
// Tail: {h, x} -> {out}, out of h's shape.
struct BasicBlockOptions {
  BasicBlockOptions(int64_t in_planes, int64_t planes, int64_t stride)
      : in_planes_(in_planes), planes_(planes), stride_(stride) {}
  bool changes_shape() const { return stride_ != 1 || planes_ != in_planes_; }
  TORCH_ARG(int64_t, in_planes);
  TORCH_ARG(int64_t, planes);
  TORCH_ARG(int64_t, stride);
  TORCH_ARG(Shortcut, shortcut) = Shortcut::kZeroPad;
};

class BasicBlockHeadImpl : public torch::nn::Cloneable<BasicBlockHeadImpl>, public FlopCounted {
 public:
  explicit BasicBlockHeadImpl(BasicBlockOptions options);
  void reset() override;
  std::vector<torch::Tensor> forward(std::vector<torch::Tensor> inputs);
  double forward_flops(const std::vector<int64_t>& input_shape) const override;

  BasicBlockOptions options;
  torch::nn::Conv2d conv1{nullptr};
  torch::nn::BatchNorm2d bn1{nullptr};
};
TORCH_MODULE(BasicBlockHead);

class BasicBlockTailImpl : public torch::nn::Cloneable<BasicBlockTailImpl>, public FlopCounted {
 public:
  explicit BasicBlockTailImpl(BasicBlockOptions options);
  void reset() override;
  std::vector<torch::Tensor> forward(std::vector<torch::Tensor> inputs);
  // input_shape: h's (the block input's follows from it).
  double forward_flops(const std::vector<int64_t>& input_shape) const override;

  BasicBlockOptions options;
  torch::nn::Conv2d conv2{nullptr};
  torch::nn::BatchNorm2d bn2{nullptr};
  // The projection (kProjection where the shape changes); null otherwise.
  torch::nn::Conv2d shortcut_conv{nullptr};
  torch::nn::BatchNorm2d shortcut_bn{nullptr};

 private:
  torch::Tensor shortcut(const torch::Tensor& input);
};
TORCH_MODULE(BasicBlockTail);

// BasicBlock's option-A shortcut where it changes the shape: `input` subsampled by `stride`
// (positions 0, s, 2s, ...) into channels [(planes - C) / 2, ...) of `planes` zero channels.
// The output and the input's gradient keep the input's memory layout (channels-last stays
// channels-last). Throws UsageError for planes < C or stride < 1.
torch::Tensor option_a_shortcut(const torch::Tensor& input, int64_t stride, int64_t planes);

}  // namespace stalepipe::models
