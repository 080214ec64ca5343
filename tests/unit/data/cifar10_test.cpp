#include "stalepipe/data/cifar10.h"

#include <filesystem>

#include <gtest/gtest.h>

#include "stalepipe/common/error.h"
#include "support/data_files.h"
#include "support/temp_dir.h"

namespace stalepipe {
namespace data {
namespace {

using test::Bytes;
using test::throws_with;

// Two records per training batch (sample ids 0..9) and three test records.
void write_cifar(const std::string& dir) {
  for (int b = 1; b <= 5; ++b) {
    const uint8_t label = static_cast<uint8_t>(2 * b - 2);
    test::write_file(dir + "/data_batch_" + std::to_string(b) + ".bin",
        test::cifar_records({label, static_cast<uint8_t>(label + 1)}, 2 * (b - 1)));
  }
  test::write_file(dir + "/test_batch.bin", test::cifar_records({9, 0, 5}, 100));
}

TEST(Cifar10Test, ReadsBinaryBatches) {
  test::TempDir dir;
  write_cifar(dir.path());
  const DataSplit split = load_cifar10(dir.path());
  ASSERT_EQ(split.train.images.sizes(), (std::vector<int64_t>{10, 3, 32, 32}));
  ASSERT_EQ(split.test.images.sizes(), (std::vector<int64_t>{3, 3, 32, 32}));
  EXPECT_EQ(split.train.name, "cifar10/train");
  EXPECT_EQ(split.test.name, "cifar10/test");
  EXPECT_EQ(split.train.num_classes, 10);
  for (int64_t i = 0; i < 10; ++i) {
    EXPECT_EQ(split.train.labels[i].item<int64_t>(), i);
  }
  EXPECT_EQ(split.test.labels[0].item<int64_t>(), 9);
  // Record bytes are the R, G, B planes in row-major order.
  const torch::Tensor sample = split.train.images[3];
  for (int64_t p : {0, 31, 32, 1023, 1024, 2047, 2048, 3071}) {
    EXPECT_EQ(sample[p / 1024][(p % 1024) / 32][p % 32].item<uint8_t>(), test::test_pixel(3, p));
  }
  EXPECT_EQ(split.test.images[2][1][0][5].item<uint8_t>(), test::test_pixel(102, 1024 + 5));
}

TEST(Cifar10Test, AcceptsTheExtractedArchiveDirectory) {
  test::TempDir dir;
  std::filesystem::create_directory(dir.file("cifar-10-batches-bin"));
  write_cifar(dir.file("cifar-10-batches-bin"));
  EXPECT_EQ(load_cifar10(dir.path()).train.size(), 10);
}

TEST(Cifar10Test, SizeNotAMultipleOfTheRecord) {
  test::TempDir dir;
  write_cifar(dir.path());
  Bytes bytes = test::cifar_records({1, 2});
  bytes.resize(bytes.size() + 5);
  test::write_file(dir.file("data_batch_3.bin"), bytes);
  EXPECT_TRUE(throws_with<RuntimeError>([&] { load_cifar10(dir.path()); },
      {dir.file("data_batch_3.bin"), "3073", "found 6151 bytes"}));
  test::write_file(dir.file("data_batch_3.bin"), {});
  EXPECT_TRUE(throws_with<RuntimeError>([&] { load_cifar10(dir.path()); },
      {dir.file("data_batch_3.bin"), "found 0 bytes"}));
}

TEST(Cifar10Test, LabelOutOfRange) {
  test::TempDir dir;
  write_cifar(dir.path());
  test::write_file(dir.file("test_batch.bin"), test::cifar_records({3, 10}));
  EXPECT_TRUE(throws_with<RuntimeError>([&] { load_cifar10(dir.path()); },
      {dir.file("test_batch.bin"), "label 10 at record 1 is out of range 0..9"}));
}

TEST(Cifar10Test, MissingFileOrDirectory) {
  test::TempDir dir;
  write_cifar(dir.path());
  std::filesystem::remove(dir.file("data_batch_4.bin"));
  EXPECT_TRUE(throws_with<RuntimeError>([&] { load_cifar10(dir.path()); },
      {dir.file("data_batch_4.bin"), "file not found", "test_batch.bin"}));
  EXPECT_TRUE(throws_with<RuntimeError>([&] { load_cifar10(dir.file("nowhere")); },
      {dir.file("nowhere"), "does not exist"}));
}

}  // namespace
}  // namespace data
}  // namespace stalepipe
