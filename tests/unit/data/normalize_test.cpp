#include "stalepipe/data/normalize.h"

#include <cmath>

#include <gtest/gtest.h>

#include "stalepipe/common/error.h"

namespace stalepipe {
namespace data {
namespace {

TEST(NormalizeTest, ExactPerChannelMoments) {
  // Two samples, two channels, 1x2 pixels. Channel 0: {0, 255, 255, 255}; channel 1: all 51.
  Dataset data;
  data.images = torch::tensor({0, 255, 51, 51, 255, 255, 51, 51}, torch::kUInt8).view({2, 2, 1, 2});
  data.labels = torch::tensor({0, 1}, torch::kInt64);
  const Normalization norm = compute_normalization(data);
  ASSERT_EQ(norm.mean.size(), 2u);
  ASSERT_EQ(norm.std.size(), 2u);
  EXPECT_DOUBLE_EQ(norm.mean[0], 0.75);
  EXPECT_DOUBLE_EQ(norm.std[0], std::sqrt(0.75 * 0.25));
  EXPECT_DOUBLE_EQ(norm.mean[1], 0.2);
  EXPECT_NEAR(norm.std[1], 0.0, 1e-15);
}

TEST(NormalizeTest, RejectsAnEmptySet) {
  Dataset empty;
  EXPECT_THROW(compute_normalization(empty), UsageError);
}

}  // namespace
}  // namespace data
}  // namespace stalepipe
