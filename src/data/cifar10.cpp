#include "stalepipe/data/cifar10.h"

#include <cstring>
#include <filesystem>
#include <vector>

#include "data/file_bytes_impl.h"
#include "stalepipe/common/error.h"

namespace stalepipe {
namespace data {
namespace {

constexpr int64_t kCifar10Classes = 10;
constexpr int64_t kCifar10Pixels = kCifar10RecordBytes - 1;
constexpr const char* kCifar10Files =
    "data_batch_1.bin .. data_batch_5.bin and test_batch.bin (CIFAR-10 binary version)";

Dataset read_batches(const std::vector<std::string>& paths, const std::string& name) {
  std::vector<detail::FileBytes> files;
  int64_t total = 0;
  for (const std::string& path : paths) {
    files.push_back(detail::read_file_bytes(path));
    const int64_t size = static_cast<int64_t>(files.back().bytes.size());
    SP_CHECK(size > 0 && size % kCifar10RecordBytes == 0, path, ": bad size: expected a positive "
        "multiple of the ", kCifar10RecordBytes, "-byte record (1 label + 3072 pixels), found ",
        size, " bytes (", size / kCifar10RecordBytes, " records and ", size % kCifar10RecordBytes,
        " bytes over)");
    total += size / kCifar10RecordBytes;
  }

  Dataset data;
  data.images = torch::empty({total, 3, 32, 32}, torch::kUInt8);
  data.labels = torch::empty({total}, torch::kInt64);
  data.num_classes = kCifar10Classes;
  data.name = name;
  uint8_t* images = data.images.data_ptr<uint8_t>();
  int64_t* labels = data.labels.data_ptr<int64_t>();
  int64_t sample = 0;
  for (size_t f = 0; f < files.size(); ++f) {
    const std::vector<uint8_t>& bytes = files[f].bytes;
    const int64_t records = static_cast<int64_t>(bytes.size()) / kCifar10RecordBytes;
    for (int64_t r = 0; r < records; ++r, ++sample) {
      const uint8_t* record = bytes.data() + r * kCifar10RecordBytes;
      SP_CHECK(record[0] < kCifar10Classes, paths[f], ": label ", int{record[0]}, " at record ",
          r, " is out of range 0..", kCifar10Classes - 1);
      labels[sample] = record[0];
      // The record's planes are already in [C, H, W] order.
      std::memcpy(images + sample * kCifar10Pixels, record + 1, kCifar10Pixels);
    }
  }
  return data;
}

std::string require_file(const std::filesystem::path& dir, const std::string& name) {
  const std::filesystem::path path = dir / name;
  std::error_code error;
  SP_CHECK(std::filesystem::is_regular_file(path, error), path.string(), ": file not found; "
      "expected ", kCifar10Files, " in ", dir.string());
  return path.string();
}

}  // namespace

DataSplit load_cifar10(const std::string& dir) {
  detail::check_directory(dir, c10::str("expected a directory holding ", kCifar10Files,
      " or a cifar-10-batches-bin/ directory with them"));
  std::filesystem::path root(dir);
  std::error_code error;
  if (!std::filesystem::exists(root / "data_batch_1.bin", error) &&
      std::filesystem::is_directory(root / "cifar-10-batches-bin", error)) {
    root /= "cifar-10-batches-bin";
  }
  std::vector<std::string> train_paths;
  for (int i = 1; i <= 5; ++i) {
    train_paths.push_back(require_file(root, c10::str("data_batch_", i, ".bin")));
  }
  const std::string test_path = require_file(root, "test_batch.bin");

  DataSplit split;
  split.train = read_batches(train_paths, "cifar10/train");
  split.test = read_batches({test_path}, "cifar10/test");
  return split;
}

}  // namespace data
}  // namespace stalepipe
