#include "stalepipe/data/image_cache.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "stalepipe/common/crc32.h"
#include "stalepipe/common/error.h"
#include "stalepipe/common/files.h"

namespace stalepipe {
namespace data {
namespace {

constexpr char kMagic[8] = {'S', 'P', 'C', 'A', 'C', 'H', 'E', '1'};
constexpr uint64_t kAlign = 64;

// What the file must hold: these files (paths, labels, sizes), at this output size.
nlohmann::json expected_header(const FolderSource& source, const std::vector<int64_t>& shape) {
  std::string files;
  for (const auto& f : source.files()) {
    files += c10::str(f.path, '\t', f.label, '\t', f.bytes, '\t', f.mtime_ns, '\t', f.info.height, 'x', f.info.width, '\n');
  }
  return {{"name", source.name()}, {"count", source.size()}, {"shape", shape},
          {"num_classes", source.num_classes()}, {"files_crc32", crc32_hex(crc32_of(files))}};
}

uint64_t aligned(uint64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// The pixels and labels of `source` at the loader's view, in a file at `path`.
void write_cache(const std::string& path, const Loader& loader, nlohmann::json header) {
  const int64_t n = loader.source().size();
  const torch::Tensor images = loader.pixels(torch::arange(n, torch::kInt64), 0);
  const torch::Tensor labels = loader.source().targets().contiguous();
  const size_t image_bytes = images.numel(), label_bytes = labels.numel() * sizeof(int64_t);
  uint32_t crc = crc32_of(images.data_ptr<uint8_t>(), image_bytes);
  header["crc32"] = crc32_hex(crc32_of(labels.data_ptr<int64_t>(), label_bytes) ^ crc);
  const std::string text = header.dump();
  std::string bytes(kMagic, sizeof kMagic);
  const uint64_t length = text.size();
  bytes.append(reinterpret_cast<const char*>(&length), sizeof length);
  bytes += text;
  bytes.resize(aligned(bytes.size()), '\0');
  bytes.append(reinterpret_cast<const char*>(images.data_ptr<uint8_t>()), image_bytes);
  bytes.append(reinterpret_cast<const char*>(labels.data_ptr<int64_t>()), label_bytes);
  write_file_atomic(path, bytes);
}

struct Mapping {
  void* address = MAP_FAILED;
  size_t size = 0;
  ~Mapping() {
    if (address != MAP_FAILED) ::munmap(address, size);
  }
};

// The split the file at `path` holds, or nullptr where it holds other files or another size;
// RuntimeError naming it where it is damaged.
std::shared_ptr<const SampleSource> open_cache(const std::string& path, const nlohmann::json& expected,
                                               const std::string& name) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return nullptr;
  struct stat st {};
  auto mapping = std::make_shared<Mapping>();
  if (::fstat(fd, &st) == 0 && st.st_size > 0) {
    mapping->size = static_cast<size_t>(st.st_size);
    mapping->address = ::mmap(nullptr, mapping->size, PROT_READ, MAP_SHARED, fd, 0);
  }
  ::close(fd);
  SP_CHECK(mapping->address != MAP_FAILED, path, ": image cache cannot be mapped: ", std::strerror(errno),
           "; delete it to have it made again");
  const auto* base = static_cast<const uint8_t*>(mapping->address);
  uint64_t length = 0;
  const bool magic = mapping->size >= sizeof kMagic + sizeof length && std::memcmp(base, kMagic, sizeof kMagic) == 0;
  if (magic) std::memcpy(&length, base + sizeof kMagic, sizeof length);
  const uint64_t header_end = sizeof kMagic + sizeof length + length;
  SP_CHECK(magic && header_end <= mapping->size, path, ": not a stalepipe image cache; delete it to have it made again");
  nlohmann::json header = nlohmann::json::parse(base + sizeof kMagic + sizeof length, base + header_end, nullptr, false);
  SP_CHECK(header.is_object() && header.contains("crc32"), path, ": image cache header is damaged; delete it");
  const std::string crc = header["crc32"].get<std::string>();
  header.erase("crc32");
  if (header != expected) return nullptr;  // another tree, split or size: made again
  const auto shape = expected["shape"].get<std::vector<int64_t>>();
  const int64_t n = expected["count"].get<int64_t>();
  const uint64_t image_bytes = static_cast<uint64_t>(n * shape[0] * shape[1] * shape[2]);
  const uint64_t begin = aligned(header_end);
  SP_CHECK(begin + image_bytes + n * sizeof(int64_t) == mapping->size, path, ": image cache is ", mapping->size,
           " bytes, not the ", begin + image_bytes + n * sizeof(int64_t), " its header describes; delete it");
  const uint32_t images_crc = crc32_of(base + begin, image_bytes);
  const uint32_t labels_crc = crc32_of(base + begin + image_bytes, n * sizeof(int64_t));
  SP_CHECK(crc32_hex(images_crc ^ labels_crc) == crc, path, ": image cache fails its checksum; delete it");
  Dataset d;
  d.name = name;
  d.num_classes = expected["num_classes"].get<int64_t>();
  // Read-only views of the mapping; the deleter keeps it mapped while a tensor lives.
  auto keep = [mapping](void*) {};
  d.images = torch::from_blob(const_cast<uint8_t*>(base + begin), {n, shape[0], shape[1], shape[2]}, keep, torch::kUInt8);
  d.labels = torch::from_blob(const_cast<uint8_t*>(base + begin + image_bytes), {n}, keep, torch::kInt64);
  return std::make_shared<TensorSource>(std::move(d));
}

}  // namespace

std::shared_ptr<const SampleSource> cached_source(std::shared_ptr<const FolderSource> source,
                                                  const LoaderOptions& options, const std::string& dir) {
  SP_CHECK_ARG(!options.resized_crop(), "an image cache holds one view of each image; random resized crops "
               "take theirs from the full image");
  const Loader loader(source, LoaderOptions(options).augment(false).pad_to(0).normalization({}));
  const std::vector<int64_t> shape{source->channels(), loader.output_shape()[1], loader.output_shape()[2]};
  const nlohmann::json expected = expected_header(*source, shape);
  std::string file = source->name();
  std::replace(file.begin(), file.end(), '/', '-');
  const std::string path = c10::str(dir, "/", file, "-", shape[0], "x", shape[1], "x", shape[2], "-",
                                    expected["files_crc32"].get<std::string>(), ".cache");
  if (auto cached = open_cache(path, expected, source->name())) return cached;
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  SP_CHECK(!error, dir, ": image cache folder cannot be created: ", error.message());
  write_cache(path, loader, expected);
  auto cached = open_cache(path, expected, source->name());
  SP_CHECK(cached, path, ": image cache was written but does not read back");
  return cached;
}

}  // namespace data
}  // namespace stalepipe
