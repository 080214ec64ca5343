#include "stalepipe/data/export.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <vector>

#include "data/decode_pool_impl.h"
#include "stalepipe/common/error.h"

namespace stalepipe {
namespace data {
namespace {

// n as text, zero-padded to the width of `largest`.
std::string padded(int64_t n, int64_t largest) {
  std::string text = std::to_string(n);
  const size_t width = std::to_string(largest).size();
  return std::string(width > text.size() ? width - text.size() : 0, '0') + text;
}

void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::FILE* file = std::fopen(path.c_str(), "wb");
  SP_CHECK(file, path, ": cannot be written: ", std::strerror(errno));
  const bool written = std::fwrite(bytes.data(), 1, bytes.size(), file) == bytes.size();
  const bool closed = std::fclose(file) == 0;
  SP_CHECK(written && closed, path, ": cannot be written: ", std::strerror(errno));
}

}  // namespace

void export_images(const SampleSource& source, const std::string& dir, const std::string& split,
                   const ExportOptions& options) {
  SP_CHECK_ARG(source.num_classes() > 0, "data set '", source.name(), "' has regression targets, no classes to make "
               "folders of");
  SP_CHECK_ARG(options.format == ImageFormat::kPng || (options.quality >= 1 && options.quality <= 100),
               "JPEG quality must be in 1..100, got ", options.quality);
  const int64_t classes = source.num_classes();
  const std::string root = dir + "/" + split;
  for (int64_t c = 0; c < classes; ++c) {
    std::error_code error;
    std::filesystem::create_directories(root + "/" + padded(c, classes - 1), error);
    SP_CHECK(!error, root, "/", padded(c, classes - 1), ": cannot be created: ", error.message());
  }
  const torch::Tensor labels = source.targets().contiguous();
  const int64_t* label = labels.data_ptr<int64_t>();
  const char* extension = options.format == ImageFormat::kPng ? ".png" : ".jpg";
  const RegionPicker whole = [](int64_t h, int64_t w) { return Region{0, 0, h, w}; };
  detail::DecodePool pool(options.threads);
  pool.run(source.size(), [&](int64_t i) {
    const torch::Tensor image = source.read(i, whole, 0, 0).contiguous();
    const auto bytes = options.format == ImageFormat::kPng ? encode_png(image) : encode_jpeg(image, options.quality);
    write_bytes(c10::str(root, "/", padded(label[i], classes - 1), "/", padded(i, source.size() - 1), extension), bytes);
  });
}

}  // namespace data
}  // namespace stalepipe
