#include "support/image_tree.h"

#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "stalepipe/data/image.h"

namespace stalepipe::test {

void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream file(path, std::ios::binary);
  file.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!file) throw std::runtime_error("cannot write " + path);
}

void write_text(const std::string& path, const std::string& text) {
  write_bytes(path, std::vector<uint8_t>(text.begin(), text.end()));
}

torch::Tensor pattern_image(int64_t c, int64_t h, int64_t w, int64_t seed) {
  const auto y = torch::arange(h, torch::kInt64).view({1, h, 1});
  const auto x = torch::arange(w, torch::kInt64).view({1, 1, w});
  const auto ch = torch::arange(c, torch::kInt64).view({c, 1, 1});
  return ((y * 7 + x * 3 + ch * 50 + seed * 31 + (x * y * (seed % 5 + 1)) % 17) % 256).to(torch::kUInt8).contiguous();
}

void write_image(const std::string& path, const torch::Tensor& image, bool jpeg) {
  write_bytes(path, jpeg ? data::encode_jpeg(image, 95) : data::encode_png(image));
}

void write_tree(const std::string& dir, const std::string& split, const std::vector<int>& per_class, int64_t c,
                int64_t h, int64_t w) {
  for (size_t k = 0; k < per_class.size(); ++k) {
    for (int i = 0; i < per_class[k]; ++i) {
      write_image(dir + "/" + split + "/c" + std::to_string(k) + "/" + std::to_string(i) + ".png",
                  pattern_image(c, h, w, static_cast<int64_t>(k) * 1000 + i));
    }
  }
}

}  // namespace stalepipe::test
