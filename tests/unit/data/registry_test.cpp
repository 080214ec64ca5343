#include "stalepipe/data/registry.h"

#include <gtest/gtest.h>

#include "stalepipe/common/error.h"
#include "support/data_files.h"
#include "support/temp_dir.h"

namespace stalepipe {
namespace data {
namespace {

using test::throws_with;

TEST(RegistryTest, Names) {
  EXPECT_EQ(dataset_names(),
      (std::vector<std::string>{"fashion-mnist", "mnist", "kmnist", "cifar10", "folder", "synthetic",
                               "synthetic-regression", "synthetic-masks"}));
}

TEST(RegistryTest, SyntheticMasksHaveAClassPerPixel) {
  const DataSplit split = load_dataset("synthetic-masks:64");
  EXPECT_EQ(split.train.size(), 64);
  EXPECT_EQ(split.test.size(), 16);
  EXPECT_EQ(split.train.images.sizes(), (std::vector<int64_t>{64, 1, 32, 32}));
  EXPECT_EQ(split.train.labels.sizes(), (std::vector<int64_t>{64, 32, 32}));
  EXPECT_EQ(split.train.num_classes, 4);
  EXPECT_EQ(split.train.labels.min().item<int64_t>(), 0);
  EXPECT_EQ(split.train.labels.max().item<int64_t>(), 3);
  // Each class at its own brightness: the mean pixel of a class rises with it.
  const auto pixels = split.train.images.squeeze(1).to(torch::kFloat);
  double last = -1;
  for (int64_t c = 0; c < 4; ++c) {
    const double mean = pixels.masked_select(split.train.labels.eq(c)).mean().item<double>();
    EXPECT_GT(mean, last + 30) << "class " << c;
    last = mean;
  }
}

TEST(RegistryTest, Synthetic) {
  const DataSplit split = load_dataset("synthetic");
  EXPECT_EQ(split.train.size(), 2048);
  EXPECT_EQ(split.test.size(), 512);
  const DataSplit small = load_dataset("synthetic:100");
  EXPECT_EQ(small.train.size(), 100);
  EXPECT_EQ(small.test.size(), 25);
  EXPECT_EQ(load_dataset("synthetic:2").test.size(), 1);
  for (const char* bad : {"synthetic:", "synthetic:0", "synthetic:abc", "synthetic:-5",
           "synthetic:99999999999999"}) {
    EXPECT_TRUE(throws_with<UsageError>([&] { load_dataset(bad); }, {bad, "synthetic:N"})) << bad;
  }
}

TEST(RegistryTest, UnknownNameListsTheValidOnes) {
  EXPECT_TRUE(throws_with<UsageError>([] { load_dataset("imagenet:/data"); },
      {"unknown data set 'imagenet'", "fashion-mnist[:DIR]", "mnist:DIR", "cifar10:DIR", "synthetic[:N]"}));
}

TEST(RegistryTest, DirectoryRequiredAndChecked) {
  EXPECT_TRUE(throws_with<UsageError>([] { load_dataset("mnist"); }, {"mnist:DIR"}));
  EXPECT_TRUE(throws_with<UsageError>([] { load_dataset("cifar10:"); }, {"cifar10:DIR"}));
  test::TempDir dir;
  const std::string missing = dir.file("missing");
  EXPECT_TRUE(throws_with<RuntimeError>([&] { load_dataset("kmnist:" + missing); },
      {missing, "does not exist"}));
  EXPECT_TRUE(throws_with<RuntimeError>([&] { load_dataset("cifar10:" + missing); },
      {missing, "does not exist"}));
  // An existing but empty directory names the first file it looked for.
  EXPECT_TRUE(throws_with<RuntimeError>([&] { load_dataset("fashion-mnist:" + dir.path()); },
      {dir.file("train-images-idx3-ubyte"), "not found"}));
}

TEST(RegistryTest, IdxDirectoryByName) {
  test::TempDir dir;
  test::write_file(dir.file("train-images-idx3-ubyte"), test::idx_images(3, 2, 2));
  test::write_file(dir.file("train-labels-idx1-ubyte"), test::idx_labels({1, 2, 3}));
  test::write_file(dir.file("t10k-images-idx3-ubyte"), test::idx_images(1, 2, 2));
  test::write_file(dir.file("t10k-labels-idx1-ubyte"), test::idx_labels({4}));
  const DataSplit split = load_dataset("kmnist:" + dir.path());
  EXPECT_EQ(split.train.name, "kmnist/train");
  EXPECT_EQ(split.train.size(), 3);
  EXPECT_EQ(split.test.size(), 1);
}

}  // namespace
}  // namespace data
}  // namespace stalepipe
