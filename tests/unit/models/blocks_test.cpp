// BasicBlock's option-A shortcut: subsampled and zero-padded as the published CIFAR ResNets
// do, with the input's gradient in the input's layout (LibTorch's slicing backward returns
// NCHW for a channels-last input). ConvBlock without batch norm pools before its ReLU: the
// same values and gradients as the textbook order, bit for bit.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "stalepipe/common/error.h"
#include "stalepipe/models/blocks.h"
#include "stalepipe/models/memory_format.h"
#include "support/error_of.h"

namespace stalepipe::models {
namespace {

using test::error_of;
using torch::indexing::None;
using torch::indexing::Slice;
constexpr auto kChannelsLast = torch::MemoryFormat::ChannelsLast;

torch::Tensor every_second(const torch::Tensor& x) {
  return x.index({Slice(), Slice(), Slice(None, None, 2), Slice(None, None, 2)});
}

// The shortcut's output and the input's gradient under a weighted sum of the output.
std::pair<torch::Tensor, torch::Tensor> shortcut_and_gradient(const torch::Tensor& input,
                                                              const torch::Tensor& weights) {
  const torch::Tensor x = input.clone().requires_grad_();
  const torch::Tensor out = option_a_shortcut(x, 2, 8);
  (out * weights).sum().backward();
  return {out.detach(), x.grad()};
}

TEST(OptionAShortcut, SubsamplesPadsAndReturnsTheGradientInTheInputsLayout) {
  torch::manual_seed(1);
  const torch::Tensor nchw = torch::randn({2, 4, 5, 5});
  const torch::Tensor weights = torch::randn({2, 8, 3, 3});
  const auto [out, grad] = shortcut_and_gradient(nchw, weights);
  ASSERT_EQ(out.sizes(), (std::vector<int64_t>{2, 8, 3, 3}));
  // Channels 2..5 hold the input at rows and columns 0, 2, 4; the rest are zero.
  EXPECT_TRUE(torch::equal(out.narrow(1, 2, 4), every_second(nchw)));
  EXPECT_EQ(out.narrow(1, 0, 2).abs().sum().item<float>(), 0.0f);
  EXPECT_EQ(out.narrow(1, 6, 2).abs().sum().item<float>(), 0.0f);
  EXPECT_TRUE(torch::equal(every_second(grad), weights.narrow(1, 2, 4)));
  EXPECT_EQ(grad.index({Slice(), Slice(), 1}).abs().sum().item<float>(), 0.0f);
  EXPECT_TRUE(grad.is_contiguous());

  const auto [out_cl, grad_cl] = shortcut_and_gradient(nchw.contiguous(kChannelsLast), weights);
  EXPECT_TRUE(torch::equal(out_cl, out));
  EXPECT_TRUE(torch::equal(grad_cl, grad));
  EXPECT_TRUE(out_cl.is_contiguous(kChannelsLast));
  EXPECT_TRUE(grad_cl.is_contiguous(kChannelsLast));
}

TEST(OptionAShortcut, FewerPlanesThanChannelsIsAUsageError) {
  EXPECT_EQ(error_of<UsageError>([] { option_a_shortcut(torch::zeros({1, 4, 4, 4}), 2, 3); }),
            "option-A shortcut: needs a 4-D input, planes >= its channels and stride >= 1, got [1, 4, 4, 4], "
            "planes 3, stride 2");
}

// conv -> ReLU -> max pool as written in the textbook, against the block (which pools first).
TEST(ConvBlock, PoolingBeforeTheReluGivesTheSameValuesAndGradientsBitForBit) {
  for (const auto format : {torch::MemoryFormat::Contiguous, kChannelsLast}) {
    torch::manual_seed(3);
    ConvBlock block(ConvBlockOptions(3, 6, 5).max_pool(2));
    to_memory_format(*block, format);
    // Negative maxima, zeros and ties: every window of the first image is all negative.
    auto input = torch::randn({4, 3, 16, 16}).contiguous(format);
    input.index_put_({0}, -1.0 - input.index({0}).abs());
    const auto x = input.clone().requires_grad_(), x_ref = input.clone().requires_grad_();
    const auto weights = torch::randn({4, 6, 6, 6});

    const auto out = block->forward(x);
    (out * weights).sum().backward();
    const auto grads = std::vector<torch::Tensor>{x.grad(), block->conv->weight.grad(), block->conv->bias.grad()};
    block->zero_grad();
    const auto ref = torch::max_pool2d(block->conv->forward(x_ref).relu(), 2);
    (ref * weights).sum().backward();

    EXPECT_TRUE(torch::equal(out, ref));
    EXPECT_TRUE(torch::equal(grads[0], x_ref.grad()));
    EXPECT_TRUE(torch::equal(grads[1], block->conv->weight.grad()));
    EXPECT_TRUE(torch::equal(grads[2], block->conv->bias.grad()));
    EXPECT_GT((out == 0).sum().item<int64_t>(), 0);  // the all-negative windows were there
  }
}

}  // namespace
}  // namespace stalepipe::models
