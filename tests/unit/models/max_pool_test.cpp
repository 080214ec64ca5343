// max_pool_2x2 against LibTorch's max_pool2d (and ReLU), bit for bit: ties, NaN, infinities,
// signed zeros and odd sizes, in both layouts, values and gradients.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <limits>

#include "stalepipe/models/max_pool.h"

namespace stalepipe::models {
namespace {

constexpr auto kChannelsLast = torch::MemoryFormat::ChannelsLast;

// The bits of every element, so that -0.0 differs from 0.0 and a NaN equals itself.
torch::Tensor bits(const torch::Tensor& t) { return t.contiguous().view(torch::kInt32); }

// Values from {-2, -1, -0, 0, 1, 2} (ties in most windows) with a few NaN and infinities.
torch::Tensor awkward_input(std::vector<int64_t> sizes) {
  torch::manual_seed(7);
  torch::Tensor x = torch::randint(-2, 3, sizes).to(torch::kFloat);
  x.masked_fill_(torch::rand(sizes) < 0.1, -0.0);
  x.masked_fill_(torch::rand(sizes) < 0.02, std::numeric_limits<float>::quiet_NaN());
  x.masked_fill_(torch::rand(sizes) < 0.02, -std::numeric_limits<float>::infinity());
  x.masked_fill_(torch::rand(sizes) < 0.02, std::numeric_limits<float>::infinity());
  return x;
}

struct Pooled {
  torch::Tensor out, grad;
};

template <typename Pool>
Pooled pool_and_gradient(const torch::Tensor& input, const torch::Tensor& dy, const Pool& pool) {
  const torch::Tensor x = input.clone().requires_grad_();
  const torch::Tensor out = pool(x);
  out.backward(dy);
  return {out.detach(), x.grad()};
}

TEST(MaxPool2x2, EqualsLibTorchsPoolingAndReluBitForBit) {
  at::set_num_threads(1);
  for (const auto format : {torch::MemoryFormat::Contiguous, kChannelsLast}) {
    for (const bool relu : {false, true}) {
      for (const auto& sizes : {std::vector<int64_t>{3, 6, 8, 8}, std::vector<int64_t>{2, 5, 7, 9}}) {
        SCOPED_TRACE(testing::Message() << "channels-last " << (format == kChannelsLast) << ", relu " << relu
                                        << ", sizes " << c10::IntArrayRef(sizes));
        const torch::Tensor x = awkward_input(sizes).contiguous(format);
        ASSERT_TRUE(pools_by_hand(x));
        const torch::Tensor pooled = torch::max_pool2d(x, 2);
        torch::Tensor dy = torch::randint(-1, 2, pooled.sizes()).to(torch::kFloat).contiguous(format);
        dy.masked_fill_(dy == 0, -0.0);  // 0 + -0.0 is +0.0 in LibTorch's backward

        const Pooled ours = pool_and_gradient(x, dy, [&](const torch::Tensor& t) { return max_pool_2x2(t, relu); });
        const Pooled ref = pool_and_gradient(x, dy, [&](const torch::Tensor& t) {
          const torch::Tensor y = torch::max_pool2d(t, 2);
          return relu ? y.relu() : y;
        });
        EXPECT_TRUE(torch::equal(bits(ours.out), bits(ref.out)));
        EXPECT_TRUE(torch::equal(bits(ours.grad), bits(ref.grad)));
        EXPECT_TRUE(ours.out.is_contiguous(format));
        EXPECT_TRUE(ours.grad.is_contiguous(format));
        EXPECT_TRUE(ours.out.isnan().any().item<bool>());  // the awkward values were there
      }
    }
  }
}

TEST(MaxPool2x2, OtherTensorsTakeLibTorchsOperations) {
  const torch::Tensor x = torch::randn({2, 3, 6, 6});
  at::set_num_threads(2);
  EXPECT_FALSE(pools_by_hand(x));  // LibTorch's threads do it
  at::set_num_threads(1);
  EXPECT_TRUE(pools_by_hand(x));
  EXPECT_FALSE(pools_by_hand(x.transpose(2, 3)));
  EXPECT_FALSE(pools_by_hand(x.to(torch::kDouble)));
  EXPECT_FALSE(pools_by_hand(x.narrow(3, 0, 1)));
  const torch::Tensor strided = x.transpose(2, 3);
  EXPECT_TRUE(torch::equal(max_pool_2x2(strided, true), torch::max_pool2d(strided, 2).relu()));
}

TEST(MaxPool2x2, NoGradientModeGivesTheSameValues) {
  at::set_num_threads(1);
  const torch::Tensor x = awkward_input({2, 4, 6, 6}).contiguous(kChannelsLast);
  torch::NoGradGuard no_grad;
  EXPECT_TRUE(torch::equal(bits(max_pool_2x2(x, true)), bits(torch::max_pool2d(x, 2).relu())));
}

}  // namespace
}  // namespace stalepipe::models
