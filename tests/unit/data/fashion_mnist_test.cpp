// Reads the real Fashion-MNIST of Debian's dataset-fashion-mnist package, if it is installed.
#include <chrono>
#include <filesystem>

#include <gtest/gtest.h>

#include "stalepipe/data/loader.h"
#include "stalepipe/data/registry.h"

namespace stalepipe {
namespace data {
namespace {

class FashionMnistTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (std::filesystem::is_directory(kFashionMnistDefaultDir)) {
      split_ = new DataSplit(load_dataset("fashion-mnist"));
    }
  }
  static void TearDownTestSuite() {
    delete split_;
    split_ = nullptr;
  }
  // The default data set is part of the setup (scripts/setup.sh): its absence is a failure,
  // not a reason to skip.
  void SetUp() override {
    ASSERT_NE(split_, nullptr) << kFashionMnistDefaultDir
                               << " not found: install dataset-fashion-mnist (scripts/setup.sh)";
  }

  static DataSplit* split_;
};

DataSplit* FashionMnistTest::split_ = nullptr;

TEST_F(FashionMnistTest, SizesShapesAndBalancedLabels) {
  const Dataset& train = split_->train;
  const Dataset& test = split_->test;
  EXPECT_EQ(train.name, "fashion-mnist/train");
  EXPECT_EQ(train.images.sizes(), (std::vector<int64_t>{60000, 1, 28, 28}));
  EXPECT_EQ(test.images.sizes(), (std::vector<int64_t>{10000, 1, 28, 28}));
  EXPECT_TRUE(torch::equal(torch::bincount(train.labels), torch::full({10}, 6000, torch::kInt64)));
  EXPECT_TRUE(torch::equal(torch::bincount(test.labels), torch::full({10}, 1000, torch::kInt64)));
  const Normalization norm = compute_normalization(train);
  EXPECT_NEAR(norm.mean[0], 0.2860, 1e-3);  // the commonly quoted Fashion-MNIST statistics
  EXPECT_NEAR(norm.std[0], 0.3530, 1e-3);
}

TEST_F(FashionMnistTest, FullEpochIsFast) {
  const Dataset& train = split_->train;
  const Loader loader(train, LoaderOptions().batch_size(128).pad_to(32).normalization(
      compute_normalization(train)));
  const auto start = std::chrono::steady_clock::now();
  const std::vector<int64_t> order = loader.epoch_order(0);
  int64_t samples = 0;
  for (int64_t b = 0; b < loader.batches_per_epoch(); ++b) {
    samples += loader.batch(0, b, order).x.size(0);
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(samples, 60000);
  RecordProperty("epoch_seconds", std::to_string(seconds));
  std::printf("fashion-mnist epoch (pad 32, normalised): %.3f s\n", seconds);
  // Generous: the CI machine is shared; the target is well under a second.
  EXPECT_LT(seconds, 5.0);
}

}  // namespace
}  // namespace data
}  // namespace stalepipe
