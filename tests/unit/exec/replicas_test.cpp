// The replicas' gradient buckets (exec/replicas_impl.h): packing, summing in replica order and
// unpacking keep each gradient's values and layout, and a parameter no replica gave a
// gradient keeps none.
#include <gtest/gtest.h>

#include "exec/replicas_impl.h"
#include "stalepipe/common/slices.h"

namespace stalepipe::exec::detail {
namespace {

std::vector<torch::Tensor> parameters() {
  torch::manual_seed(3);
  return {torch::randn({4, 3, 2, 2}).contiguous(torch::MemoryFormat::ChannelsLast).requires_grad_(),
          torch::randn({5}).requires_grad_(), torch::randn({2, 2}).requires_grad_()};
}

TEST(GradientBuckets, TheSumOfTwoReplicasKeepsLayoutsAndUndefinedGradients) {
  auto a = parameters(), b = parameters();
  a[0].mutable_grad() = torch::randn({4, 3, 2, 2}).contiguous(torch::MemoryFormat::ChannelsLast);
  b[0].mutable_grad() = torch::randn({4, 3, 2, 2}).contiguous(torch::MemoryFormat::ChannelsLast);
  b[1].mutable_grad() = torch::randn({5});  // replica a has none: the sum is b's
  const torch::Tensor a0 = a[0].grad().clone(), b0 = b[0].grad().clone(), b1 = b[1].grad().clone();
  GradientBuckets ga(a), gb(b);
  ASSERT_EQ(ga.size(), 1u);  // 85 floats: one bucket
  const torch::Tensor sum = sum_in_order({ga.pack(0), gb.pack(0)});
  ga.unpack(0, sum);
  gb.unpack(0, sum);
  for (const auto* p : {&a, &b}) {
    EXPECT_TRUE(torch::equal((*p)[0].grad(), a0 + b0));
    EXPECT_TRUE((*p)[0].grad().is_contiguous(torch::MemoryFormat::ChannelsLast));
    EXPECT_TRUE(torch::equal((*p)[1].grad(), b1));
    EXPECT_FALSE((*p)[2].grad().defined()) << "no replica gave parameter 2 a gradient";
  }
}

TEST(GradientBuckets, LargeParametersFillBucketsFromTheLastLayer) {
  const int64_t floats = kGradientBucketBytes / 4;
  std::vector<torch::Tensor> params{torch::zeros({floats / 2}), torch::zeros({floats}), torch::zeros({floats / 4})};
  GradientBuckets buckets(params);
  // The last parameter first; 1 does not fit beside it, nor 0 beside 1.
  ASSERT_EQ(buckets.size(), 3u);
  EXPECT_EQ(buckets.bucket(0), (std::vector<size_t>{2}));
  EXPECT_EQ(buckets.bucket(1), (std::vector<size_t>{1}));
  EXPECT_EQ(buckets.bucket(2), (std::vector<size_t>{0}));
  GradientBuckets more({torch::zeros({floats / 2}), torch::zeros({floats / 2}), torch::zeros({floats / 4})});
  EXPECT_EQ(more.size(), 2u);
  EXPECT_EQ(more.bucket(0), (std::vector<size_t>{2, 1}));
}

TEST(Slices, FollowTensorSplit) {
  for (int64_t n : {7, 18, 128}) {
    for (int64_t count : {1, 2, 3, 4}) {
      const auto parts = torch::arange(n).tensor_split(count);
      for (int64_t r = 0; r < count; ++r) {
        const auto [begin, end] = slice_range(n, count, r);
        EXPECT_EQ(end - begin, parts[r].numel()) << n << " / " << count << " slice " << r;
        EXPECT_EQ(begin, parts[r][0].item<int64_t>());
      }
    }
  }
}

}  // namespace
}  // namespace stalepipe::exec::detail
