// Reads a whole data file into memory, inflating it first if it is gzip-compressed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace stalepipe {
namespace data {
namespace detail {

struct FileBytes {
  std::vector<uint8_t> bytes;  // decompressed content
  bool gzipped = false;        // the file started with the gzip magic 0x1f 0x8b
};

// Largest decompressed size accepted; far above any data set we read (CIFAR-10 train is 150 MB).
constexpr uint64_t kMaxFileBytes = uint64_t{8} << 30;

// Throws RuntimeError naming `path` if it cannot be opened or read, or if its gzip stream is
// truncated, corrupt or inflates beyond kMaxFileBytes.
FileBytes read_file_bytes(const std::string& path);

// Throws RuntimeError "<dir>: data set directory does not exist; <hint>" unless `dir` is a
// directory.
void check_directory(const std::string& dir, const std::string& hint);

// "the file has" / "the decompressed file has": for size messages.
inline const char* file_noun(const FileBytes& file) {
  return file.gzipped ? "the decompressed file" : "the file";
}

}  // namespace detail
}  // namespace data
}  // namespace stalepipe
