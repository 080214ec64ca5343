#include "stalepipe/data/synthetic.h"

#include <gtest/gtest.h>

#include "stalepipe/common/error.h"

namespace stalepipe {
namespace data {
namespace {

// Recorded from the first run of this implementation; see GoldenBytesDoNotDrift.
constexpr int64_t kSyntheticGoldenChecksum = 19727188;
constexpr int64_t kSyntheticGoldenLabels = 7963;

TEST(SyntheticTest, ShapesAndRanges) {
  const DataSplit split = make_synthetic(
      SyntheticOptions().train_size(100).test_size(30).channels(3).height(9).width(7).num_classes(4));
  EXPECT_EQ(split.train.images.sizes(), (std::vector<int64_t>{100, 3, 9, 7}));
  EXPECT_EQ(split.test.images.sizes(), (std::vector<int64_t>{30, 3, 9, 7}));
  EXPECT_EQ(split.train.images.scalar_type(), torch::kUInt8);
  EXPECT_EQ(split.train.labels.scalar_type(), torch::kInt64);
  EXPECT_EQ(split.train.num_classes, 4);
  EXPECT_EQ(split.train.name, "synthetic/train");
  EXPECT_GE(split.train.labels.min().item<int64_t>(), 0);
  EXPECT_LT(split.train.labels.max().item<int64_t>(), 4);
  // Every class occurs.
  EXPECT_EQ(torch::bincount(split.train.labels).size(0), 4);
}

TEST(SyntheticTest, DeterministicFromTheSeed) {
  const auto options = SyntheticOptions().train_size(64).test_size(16).seed(7);
  const DataSplit a = make_synthetic(options);
  const DataSplit b = make_synthetic(options);
  EXPECT_TRUE(torch::equal(a.train.images, b.train.images));
  EXPECT_TRUE(torch::equal(a.train.labels, b.train.labels));
  EXPECT_TRUE(torch::equal(a.test.images, b.test.images));
  const DataSplit c = make_synthetic(SyntheticOptions(options).seed(8));
  EXPECT_FALSE(torch::equal(a.train.images, c.train.images));
  EXPECT_FALSE(torch::equal(a.train.labels, c.train.labels));
  // Train and test are different draws.
  EXPECT_FALSE(torch::equal(a.train.images.narrow(0, 0, 16), a.test.images));
}

TEST(SyntheticTest, GoldenBytesDoNotDrift) {
  // Pins the generator: a change here changes every synthetic experiment.
  const DataSplit split = make_synthetic(SyntheticOptions().train_size(4).test_size(1).seed(0));
  const int64_t checksum = split.train.images.to(torch::kInt64).mul(
      torch::arange(4 * 784, torch::kInt64).view({4, 1, 28, 28}) % 97 + 1).sum().item<int64_t>();
  const int64_t labels = (split.train.labels * torch::tensor({1, 10, 100, 1000})).sum().item<int64_t>();
  RecordProperty("checksum", std::to_string(checksum));
  RecordProperty("labels", std::to_string(labels));
  EXPECT_EQ(checksum, kSyntheticGoldenChecksum);
  EXPECT_EQ(labels, kSyntheticGoldenLabels);
}

TEST(SyntheticTest, NearestClassMeanSeparatesTheClasses) {
  // "Learnable": even the nearest class mean of the training set classifies the test set.
  const DataSplit split = make_synthetic(SyntheticOptions().train_size(500).test_size(200));
  const torch::Tensor x = split.train.images.to(torch::kFloat).flatten(1);
  const torch::Tensor means = torch::zeros({10, x.size(1)}).index_add_(0, split.train.labels, x) /
      torch::bincount(split.train.labels, {}, 10).to(torch::kFloat).unsqueeze(1);
  const torch::Tensor test_x = split.test.images.to(torch::kFloat).flatten(1);
  const torch::Tensor predicted = torch::cdist(test_x, means).argmin(1);
  const double accuracy = predicted.eq(split.test.labels).to(torch::kFloat).mean().item<double>();
  EXPECT_GT(accuracy, 0.95);
}

TEST(SyntheticTest, RejectsBadOptions) {
  EXPECT_THROW(make_synthetic(SyntheticOptions().train_size(0)), UsageError);
  EXPECT_THROW(make_synthetic(SyntheticOptions().channels(0)), UsageError);
  EXPECT_THROW(make_synthetic(SyntheticOptions().num_classes(300)), UsageError);
}

}  // namespace
}  // namespace data
}  // namespace stalepipe
