#include "stalepipe/data/idx.h"

#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "data/file_bytes_impl.h"
#include "stalepipe/common/error.h"

namespace stalepipe {
namespace data {
namespace {

constexpr int64_t kImagesHeaderBytes = 16;  // magic, count, rows, cols
constexpr int64_t kLabelsHeaderBytes = 8;   // magic, count

uint32_t read_be32(const uint8_t* p) {
  return uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 | uint32_t{p[3]};
}

std::string hex32(uint32_t value) {
  char text[16];
  std::snprintf(text, sizeof(text), "0x%08" PRIx32, value);
  return text;
}

// Checks the magic number and that the whole header is present; returns nothing on success.
void check_header(const std::string& path, const detail::FileBytes& file, uint32_t magic,
    int64_t header_bytes, const char* kind) {
  const int64_t size = static_cast<int64_t>(file.bytes.size());
  SP_CHECK(size >= 4, path, ": truncated: an IDX ", kind, " file starts with a ", header_bytes,
      "-byte header but ", detail::file_noun(file), " has ", size, " bytes");
  const uint32_t found = read_be32(file.bytes.data());
  if (found != magic) {
    std::string hint;
    if (found == kIdxImagesMagic || found == kIdxLabelsMagic) {
      hint = found == kIdxImagesMagic ? "; this is an IDX image file" : "; this is an IDX label file";
    }
    SP_CHECK(false, path, ": bad magic number: expected ", magic, " (", hex32(magic), "), found ",
        found, " (", hex32(found), ")", hint);
  }
  SP_CHECK(size >= header_bytes, path, ": truncated: an IDX ", kind, " file starts with a ",
      header_bytes, "-byte header but ", detail::file_noun(file), " has ", size, " bytes");
}

uint32_t header_field(const std::string& path, const detail::FileBytes& file, int64_t offset,
    const char* what, uint32_t max) {
  const uint32_t value = read_be32(file.bytes.data() + offset);
  SP_CHECK(value >= 1 && value <= max, path, ": bad header: ", what, " is ", value,
      ", expected 1..", max);
  return value;
}

// Too short => truncated, too long => trailing bytes; `described` is the header's claim.
void check_payload_size(const std::string& path, const detail::FileBytes& file,
    const std::string& described, uint64_t expected) {
  const uint64_t size = file.bytes.size();
  SP_CHECK(size >= expected, path, ": truncated: header says ", described, " (", expected,
      " bytes) but ", detail::file_noun(file), " has ", size, " bytes");
  SP_CHECK(size == expected, path, ": trailing bytes: header says ", described, " (", expected,
      " bytes) but ", detail::file_noun(file), " has ", size, " bytes (", size - expected,
      " too many)");
}

torch::Tensor read_images(const std::string& path) {
  const detail::FileBytes file = detail::read_file_bytes(path);
  check_header(path, file, kIdxImagesMagic, kImagesHeaderBytes, "image");
  const uint32_t count = header_field(path, file, 4, "image count", kIdxMaxCount);
  const uint32_t rows = header_field(path, file, 8, "image height (rows)", kIdxMaxSide);
  const uint32_t cols = header_field(path, file, 12, "image width (cols)", kIdxMaxSide);
  const uint64_t pixels = uint64_t{count} * rows * cols;
  check_payload_size(path, file, c10::str(count, " images of ", rows, "x", cols),
      kImagesHeaderBytes + pixels);

  torch::Tensor images = torch::empty({count, 1, rows, cols}, torch::kUInt8);
  std::memcpy(images.data_ptr<uint8_t>(), file.bytes.data() + kImagesHeaderBytes, pixels);
  return images;
}

torch::Tensor read_labels(const std::string& path, int64_t num_classes) {
  const detail::FileBytes file = detail::read_file_bytes(path);
  check_header(path, file, kIdxLabelsMagic, kLabelsHeaderBytes, "label");
  const uint32_t count = header_field(path, file, 4, "label count", kIdxMaxCount);
  check_payload_size(path, file, c10::str(count, " labels"), kLabelsHeaderBytes + uint64_t{count});

  torch::Tensor labels = torch::empty({count}, torch::kInt64);
  int64_t* out = labels.data_ptr<int64_t>();
  const uint8_t* in = file.bytes.data() + kLabelsHeaderBytes;
  for (uint32_t i = 0; i < count; ++i) {
    SP_CHECK(in[i] < num_classes, path, ": label ", int{in[i]}, " at record ", i,
        " is out of range 0..", num_classes - 1);
    out[i] = in[i];
  }
  return labels;
}

std::string find_idx_file(const std::filesystem::path& dir, const std::string& base) {
  for (const std::string& name : {base, base + ".gz"}) {
    std::error_code error;
    if (std::filesystem::is_regular_file(dir / name, error)) {
      return (dir / name).string();
    }
  }
  SP_CHECK(false, (dir / base).string(), "[.gz]: file not found; expected train-images-idx3-ubyte, "
      "train-labels-idx1-ubyte, t10k-images-idx3-ubyte and t10k-labels-idx1-ubyte (each raw or "
      ".gz) in ", dir.string());
  return {};
}

}  // namespace

Dataset read_idx(const std::string& images_path, const std::string& labels_path,
    const std::string& name, int64_t num_classes) {
  SP_CHECK_ARG(num_classes >= 1 && num_classes <= 256, "IDX data set '", name,
      "': num_classes must be in 1..256 (labels are bytes), got ", num_classes);
  Dataset data;
  data.images = read_images(images_path);
  data.labels = read_labels(labels_path, num_classes);
  SP_CHECK(data.images.size(0) == data.labels.size(0), images_path, ", ", labels_path,
      ": images and labels disagree: ", data.images.size(0), " images but ", data.labels.size(0),
      " labels");
  data.num_classes = num_classes;
  data.name = name;
  return data;
}

DataSplit load_idx_dir(const std::string& dir, const std::string& name) {
  detail::check_directory(dir, "expected a directory holding train-images-idx3-ubyte, "
      "train-labels-idx1-ubyte, t10k-images-idx3-ubyte and t10k-labels-idx1-ubyte (each raw or .gz)");
  const std::filesystem::path root(dir);
  // Find all four before reading any, so a missing file is reported without a long read first.
  const std::string train_images = find_idx_file(root, "train-images-idx3-ubyte");
  const std::string train_labels = find_idx_file(root, "train-labels-idx1-ubyte");
  const std::string test_images = find_idx_file(root, "t10k-images-idx3-ubyte");
  const std::string test_labels = find_idx_file(root, "t10k-labels-idx1-ubyte");
  DataSplit split;
  split.train = read_idx(train_images, train_labels, name + "/train");
  split.test = read_idx(test_images, test_labels, name + "/test");
  SP_CHECK(split.train.images.sizes().slice(1) == split.test.images.sizes().slice(1), test_images,
      ": image size disagrees with the training set: expected ", split.train.height(), "x",
      split.train.width(), " as in ", train_images, ", found ", split.test.height(), "x",
      split.test.width());
  return split;
}

}  // namespace data
}  // namespace stalepipe
