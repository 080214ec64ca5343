#include "stalepipe/data/normalize.h"

#include <cmath>

#include <gtest/gtest.h>

#include "stalepipe/common/error.h"
#include "support/error_of.h"
#include "support/test_device.h"

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

// Every byte value of every channel, normalised on the test device (a GPU under
// scripts/gpu-check.sh graphs): the values the host computes one at a time, bit for bit, with
// and without a normalisation. A device that divided by 255's reciprocal, or fused the product
// and the sum, would differ in the last bit for some of them.
TEST(PixelNormalizer, TheTestDeviceGivesTheHostsValuesOneByOne) {
  const torch::Device device = test::test_device();
  const torch::Tensor pixels = torch::arange(256, torch::kInt64).to(torch::kUInt8).repeat({2, 3, 1}).view({2, 3, 16, 16});
  for (const Normalization& norm : {Normalization{}, Normalization{{0.4914, 0.4822, 0.4465}, {0.247, 0.243, 0.261}}}) {
    const PixelNormalizer normalize(norm, 3, "bytes");
    const torch::Tensor x = normalize.on(device)(pixels.to(device)).cpu();
    ASSERT_EQ(x.scalar_type(), torch::kFloat32);
    const uint8_t* p = pixels.data_ptr<uint8_t>();
    const float* v = x.data_ptr<float>();
    int64_t differ = 0;
    for (int64_t i = 0; i < pixels.numel(); ++i) {
      const int64_t c = (i / 256) % 3;
      const float scaled = static_cast<float>(p[i]) * normalize.scale_values()[c];
      const float expected = norm.empty() ? static_cast<float>(p[i]) / 255.0f : scaled + normalize.shift_values()[c];
      differ += v[i] != expected;
    }
    EXPECT_EQ(differ, 0) << "on " << device << (norm.empty() ? ", pixel / 255" : ", normalised");
  }
}

TEST(PixelNormalizer, RejectsWhatItCannotNormalise) {
  EXPECT_NE(test::error_of<UsageError>([] { PixelNormalizer({{0.5, 0.5}, {0.2, 0.2}}, 3, "rgb"); })
                .find("expected 3 means and stds (one per channel of 'rgb'), found 2"),
            std::string::npos);
  EXPECT_NE(test::error_of<UsageError>([] { PixelNormalizer({{0.5}, {0.0}}, 1, "grey"); }).find("std of channel 0"),
            std::string::npos);
  const PixelNormalizer normalize({}, 1, "grey");
  EXPECT_NE(test::error_of<UsageError>([&] { normalize(torch::zeros({2, 1, 4, 4})); })
                .find("expected uint8 [N, 1, H, W], found float [2, 1, 4, 4]"),
            std::string::npos);
  EXPECT_NE(test::error_of<UsageError>([&] { normalize(torch::zeros({2, 3, 4, 4}, torch::kUInt8)); })
                .find("expected uint8 [N, 1, H, W], found unsigned char [2, 3, 4, 4]"),
            std::string::npos);
}

}  // namespace
}  // namespace data
}  // namespace stalepipe
