#include "stalepipe/data/idx.h"

#include <string>
#include <tuple>

#include <gtest/gtest.h>

#include "stalepipe/common/error.h"
#include "support/data_files.h"
#include "support/temp_dir.h"

namespace stalepipe {
namespace data {
namespace {

using test::Bytes;
using test::throws_with;

const Bytes kLabels = {0, 1, 2, 9, 3};

class IdxTest : public ::testing::Test {
 protected:
  // Writes images and labels (optionally gzipped) and returns their paths.
  std::pair<std::string, std::string> write(const Bytes& images, const Bytes& labels,
      bool gz = false) {
    const std::string suffix = gz ? ".gz" : "";
    const std::string images_path = dir_.file("images-idx3-ubyte" + suffix);
    const std::string labels_path = dir_.file("labels-idx1-ubyte" + suffix);
    test::write_file(images_path, gz ? test::gzip(images) : images);
    test::write_file(labels_path, gz ? test::gzip(labels) : labels);
    return {images_path, labels_path};
  }

  void expect_good(const Dataset& data) {
    ASSERT_EQ(data.images.sizes(), (std::vector<int64_t>{5, 1, 3, 4}));
    EXPECT_EQ(data.images.scalar_type(), torch::kUInt8);
    EXPECT_TRUE(data.images.is_contiguous());
    EXPECT_EQ(data.labels.scalar_type(), torch::kInt64);
    EXPECT_EQ(data.size(), 5);
    EXPECT_EQ(data.channels(), 1);
    EXPECT_EQ(data.height(), 3);
    EXPECT_EQ(data.width(), 4);
    for (int64_t i = 0; i < 5; ++i) {
      EXPECT_EQ(data.labels[i].item<int64_t>(), kLabels[i]);
      for (int64_t p = 0; p < 12; ++p) {
        ASSERT_EQ(data.images[i][0][p / 4][p % 4].item<uint8_t>(), test::test_pixel(i, p))
            << "sample " << i << " pixel " << p;
      }
    }
  }

  test::TempDir dir_;
};

TEST_F(IdxTest, ReadsRawFiles) {
  std::string images, labels;
  std::tie(images, labels) = write(test::idx_images(5, 3, 4), test::idx_labels(kLabels));
  const Dataset data = read_idx(images, labels, "tiny/train");
  expect_good(data);
  EXPECT_EQ(data.name, "tiny/train");
  EXPECT_EQ(data.num_classes, 10);
}

TEST_F(IdxTest, ReadsGzipFiles) {
  std::string images, labels;
  std::tie(images, labels) = write(test::idx_images(5, 3, 4), test::idx_labels(kLabels), true);
  expect_good(read_idx(images, labels, "tiny/train"));
}

TEST_F(IdxTest, ReadsConcatenatedGzipMembers) {
  const Bytes raw = test::idx_images(5, 3, 4);
  Bytes gz = test::gzip(Bytes(raw.begin(), raw.begin() + 20));
  const Bytes rest = test::gzip(Bytes(raw.begin() + 20, raw.end()));
  gz.insert(gz.end(), rest.begin(), rest.end());
  test::write_file(dir_.file("images.gz"), gz);
  test::write_file(dir_.file("labels"), test::idx_labels(kLabels));
  expect_good(read_idx(dir_.file("images.gz"), dir_.file("labels"), "tiny"));
}

TEST_F(IdxTest, SubsetTakesTheFirstSamples) {
  std::string images, labels;
  std::tie(images, labels) = write(test::idx_images(5, 3, 4), test::idx_labels(kLabels));
  const Dataset data = read_idx(images, labels, "tiny");
  const Dataset first = data.subset(2);
  EXPECT_EQ(first.size(), 2);
  EXPECT_TRUE(torch::equal(first.images, data.images.narrow(0, 0, 2)));
  EXPECT_TRUE(first.images.is_contiguous());
  EXPECT_THROW(data.subset(6), UsageError);
  EXPECT_THROW(data.subset(-1), UsageError);
}

TEST_F(IdxTest, MissingFile) {
  std::string images, labels;
  std::tie(images, labels) = write(test::idx_images(5, 3, 4), test::idx_labels(kLabels));
  const std::string missing = dir_.file("nope-idx3-ubyte");
  EXPECT_TRUE(throws_with<RuntimeError>([&] { read_idx(missing, labels, "x"); },
      {missing, "cannot open"}));
  EXPECT_TRUE(throws_with<RuntimeError>([&] { read_idx(images, missing, "x"); },
      {missing, "cannot open"}));
  EXPECT_TRUE(throws_with<RuntimeError>([&] { read_idx(dir_.path(), labels, "x"); },
      {dir_.path(), "expected a regular file, found a directory"}));
}

TEST_F(IdxTest, WrongImagesMagic) {
  std::string images, labels;
  std::tie(images, labels) = write(test::idx_images(5, 3, 4, 2049), test::idx_labels(kLabels));
  EXPECT_TRUE(throws_with<RuntimeError>([&] { read_idx(images, labels, "x"); },
      {images, "bad magic number: expected 2051 (0x00000803), found 2049"}));
}

TEST_F(IdxTest, WrongLabelsMagic) {
  std::string images, labels;
  std::tie(images, labels) = write(test::idx_images(5, 3, 4), test::idx_labels(kLabels, 0x12345678));
  EXPECT_TRUE(throws_with<RuntimeError>([&] { read_idx(images, labels, "x"); },
      {labels, "bad magic number: expected 2049 (0x00000801), found 305419896 (0x12345678)"}));
}

TEST_F(IdxTest, TruncatedRaw) {
  Bytes raw = test::idx_images(5, 3, 4);
  raw.resize(raw.size() - 5);
  std::string images, labels;
  std::tie(images, labels) = write(raw, test::idx_labels(kLabels));
  EXPECT_TRUE(throws_with<RuntimeError>([&] { read_idx(images, labels, "x"); },
      {images, "truncated: header says 5 images of 3x4 (76 bytes) but the file has 71 bytes"}));
}

TEST_F(IdxTest, TruncatedHeader) {
  Bytes raw = test::idx_images(5, 3, 4);
  raw.resize(10);
  std::string images, labels;
  std::tie(images, labels) = write(raw, test::idx_labels(kLabels));
  EXPECT_TRUE(throws_with<RuntimeError>([&] { read_idx(images, labels, "x"); },
      {images, "truncated", "16-byte header", "has 10 bytes"}));
  test::write_file(images, {});
  EXPECT_TRUE(throws_with<RuntimeError>([&] { read_idx(images, labels, "x"); },
      {images, "truncated", "has 0 bytes"}));
}

TEST_F(IdxTest, TruncatedLabels) {
  Bytes raw = test::idx_labels(kLabels);
  raw.pop_back();
  std::string images, labels;
  std::tie(images, labels) = write(test::idx_images(5, 3, 4), raw);
  EXPECT_TRUE(throws_with<RuntimeError>([&] { read_idx(images, labels, "x"); },
      {labels, "truncated: header says 5 labels (13 bytes) but the file has 12 bytes"}));
}

TEST_F(IdxTest, TruncatedGzip) {
  std::string images, labels;
  std::tie(images, labels) = write(test::idx_images(5, 3, 4), test::idx_labels(kLabels));
  const Bytes gz = test::gzip(test::idx_images(50, 8, 8));
  // Cut inside the trailer, and inside the deflate data.
  for (size_t keep : {gz.size() - 3, gz.size() / 2, size_t{12}}) {
    test::write_file(images, Bytes(gz.begin(), gz.begin() + keep));
    EXPECT_TRUE(throws_with<RuntimeError>([&] { read_idx(images, labels, "x"); },
        {images, "truncated gzip stream"})) << "kept " << keep << " of " << gz.size();
  }
}

TEST_F(IdxTest, CorruptGzip) {
  std::string images, labels;
  std::tie(images, labels) = write(test::idx_images(5, 3, 4), test::idx_labels(kLabels));
  Bytes gz = test::gzip(test::idx_images(5, 3, 4));
  gz[gz.size() - 8] ^= 0xff;  // the CRC-32 in the trailer
  test::write_file(images, gz);
  EXPECT_TRUE(throws_with<RuntimeError>([&] { read_idx(images, labels, "x"); },
      {images, "gzip stream is corrupt (zlib: incorrect data check)"}));

  gz = test::gzip(test::idx_images(5, 3, 4));
  for (size_t i = 10; i < gz.size() - 8; ++i) {
    gz[i] = static_cast<uint8_t>(0xa5 ^ i);  // garbage deflate data
  }
  test::write_file(images, gz);
  EXPECT_TRUE(throws_with<RuntimeError>([&] { read_idx(images, labels, "x"); },
      {images, "gzip stream"}));
}

TEST_F(IdxTest, TrailingBytes) {
  Bytes raw = test::idx_images(5, 3, 4);
  raw.insert(raw.end(), {1, 2, 3});
  std::string images, labels;
  std::tie(images, labels) = write(raw, test::idx_labels(kLabels));
  EXPECT_TRUE(throws_with<RuntimeError>([&] { read_idx(images, labels, "x"); },
      {images, "trailing bytes: header says 5 images of 3x4 (76 bytes) but the file has 79 bytes",
       "3 too many"}));
  std::string gz_images, gz_labels;
  std::tie(gz_images, gz_labels) = write(raw, test::idx_labels(kLabels), true);
  EXPECT_TRUE(throws_with<RuntimeError>([&] { read_idx(gz_images, gz_labels, "x"); },
      {gz_images, "trailing bytes", "the decompressed file has 79 bytes"}));
}

TEST_F(IdxTest, LabelOutOfRange) {
  std::string images, labels;
  std::tie(images, labels) = write(test::idx_images(5, 3, 4), test::idx_labels({0, 1, 2, 12, 3}));
  EXPECT_TRUE(throws_with<RuntimeError>([&] { read_idx(images, labels, "x"); },
      {labels, "label 12 at record 3 is out of range 0..9"}));
  // The same file is fine with more classes.
  EXPECT_EQ(read_idx(images, labels, "x", 13).num_classes, 13);
  EXPECT_THROW(read_idx(images, labels, "x", 0), UsageError);
}

TEST_F(IdxTest, CountMismatch) {
  std::string images, labels;
  std::tie(images, labels) = write(test::idx_images(5, 3, 4), test::idx_labels({0, 1, 2, 3}));
  EXPECT_TRUE(throws_with<RuntimeError>([&] { read_idx(images, labels, "x"); },
      {images, labels, "images and labels disagree: 5 images but 4 labels"}));
}

TEST_F(IdxTest, ZeroOrAbsurdDimension) {
  std::string images, labels;
  std::tie(images, labels) = write(test::idx_images(5, 0, 4), test::idx_labels(kLabels));
  EXPECT_TRUE(throws_with<RuntimeError>([&] { read_idx(images, labels, "x"); },
      {images, "bad header: image height (rows) is 0, expected 1..4096"}));
  test::write_file(images, test::idx_images(0, 3, 4));
  EXPECT_TRUE(throws_with<RuntimeError>([&] { read_idx(images, labels, "x"); },
      {images, "image count is 0"}));
  test::write_file(images, test::idx_images(5, 3, 4));
  test::write_file(labels, test::idx_labels({}));
  EXPECT_TRUE(throws_with<RuntimeError>([&] { read_idx(images, labels, "x"); },
      {labels, "label count is 0"}));
  // A huge header must fail on the size check, not try to allocate.
  Bytes huge = test::idx_images(1, 1, 1);
  huge[8] = huge[9] = huge[10] = huge[11] = 0xff;  // rows = 2^32 - 1
  test::write_file(images, huge);
  EXPECT_TRUE(throws_with<RuntimeError>([&] { read_idx(images, labels, "x"); },
      {images, "image height (rows) is 4294967295, expected 1..4096"}));
}

TEST_F(IdxTest, LoadsADirectoryOfRawAndGzipFiles) {
  test::write_file(dir_.file("train-images-idx3-ubyte.gz"), test::gzip(test::idx_images(5, 3, 4)));
  test::write_file(dir_.file("train-labels-idx1-ubyte"), test::idx_labels(kLabels));
  test::write_file(dir_.file("t10k-images-idx3-ubyte"), test::idx_images(2, 3, 4));
  test::write_file(dir_.file("t10k-labels-idx1-ubyte.gz"), test::gzip(test::idx_labels({7, 8})));
  const DataSplit split = load_idx_dir(dir_.path(), "mnist");
  expect_good(split.train);
  EXPECT_EQ(split.train.name, "mnist/train");
  EXPECT_EQ(split.test.name, "mnist/test");
  EXPECT_EQ(split.test.size(), 2);
  EXPECT_EQ(split.test.labels[1].item<int64_t>(), 8);
}

TEST_F(IdxTest, DirectoryWithAMissingFile) {
  test::write_file(dir_.file("train-images-idx3-ubyte"), test::idx_images(5, 3, 4));
  test::write_file(dir_.file("train-labels-idx1-ubyte"), test::idx_labels(kLabels));
  test::write_file(dir_.file("t10k-images-idx3-ubyte"), test::idx_images(2, 3, 4));
  EXPECT_TRUE(throws_with<RuntimeError>([&] { load_idx_dir(dir_.path(), "mnist"); },
      {dir_.file("t10k-labels-idx1-ubyte") + "[.gz]: file not found", "expected",
       "train-images-idx3-ubyte"}));
  const std::string nowhere = dir_.file("nowhere");
  EXPECT_TRUE(throws_with<RuntimeError>([&] { load_idx_dir(nowhere, "mnist"); },
      {nowhere, "does not exist"}));
}

}  // namespace
}  // namespace data
}  // namespace stalepipe
