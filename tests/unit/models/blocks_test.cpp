// BasicBlock's option-A shortcut: subsampled and zero-padded as the published CIFAR ResNets
// do, with the input's gradient in the input's layout (LibTorch's slicing backward returns
// NCHW for a channels-last input).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "stalepipe/common/error.h"
#include "stalepipe/models/blocks.h"
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

}  // namespace
}  // namespace stalepipe::models
