// The CRC-32 of every record of a TorchScript archive against the one its zip directory
// records. LibTorch's zip reader is built without that check (miniz's
// MINIZ_DISABLE_ZIP_READER_CRC32_CHECKS), so damaged weights would load and train.
#include <cstring>
#include <fstream>
#include <map>

#include <caffe2/serialize/inline_container.h>

#include "stalepipe/common/crc32.h"
#include "stalepipe/common/error.h"
#include "torchscript_impl.h"

namespace stalepipe::models::detail {
namespace {

constexpr uint32_t kEndOfDirectory = 0x06054b50, kZip64Locator = 0x07064b50, kZip64End = 0x06064b50,
                   kDirectoryEntry = 0x02014b50;

uint64_t little_endian(const std::string& bytes, size_t at, size_t width) {
  uint64_t value = 0;
  for (size_t i = width; i-- > 0;) value = (value << 8) | static_cast<unsigned char>(bytes.at(at + i));
  return value;
}

std::string read_at(std::ifstream& in, uint64_t offset, uint64_t size) {
  std::string bytes(size, '\0');
  in.seekg(static_cast<std::streamoff>(offset));
  in.read(bytes.data(), static_cast<std::streamsize>(size));
  SP_CHECK(in.gcount() == static_cast<std::streamsize>(size), "short read");
  return bytes;
}

// The zip's central directory: where it starts and how long it is (zip64 where the archive
// needs it).
std::pair<uint64_t, uint64_t> central_directory(std::ifstream& in, uint64_t file_size) {
  const uint64_t tail_size = std::min<uint64_t>(file_size, 22 + 0xffff);  // the record + a comment
  const std::string tail = read_at(in, file_size - tail_size, tail_size);
  for (size_t at = tail_size >= 22 ? tail_size - 22 + 1 : 0; at-- > 0;) {
    if (little_endian(tail, at, 4) != kEndOfDirectory) continue;
    uint64_t size = little_endian(tail, at + 12, 4), offset = little_endian(tail, at + 16, 4);
    if (offset == 0xffffffff && at >= 20 && little_endian(tail, at - 20, 4) == kZip64Locator) {
      const std::string end = read_at(in, little_endian(tail, at - 20 + 8, 8), 56);
      SP_CHECK(little_endian(end, 0, 4) == kZip64End, "no zip64 end of central directory");
      size = little_endian(end, 40, 8);
      offset = little_endian(end, 48, 8);
    }
    return {offset, size};
  }
  SP_CHECK(false, "no end of central directory");
  return {};
}

// Record name (as PyTorchStreamReader names it: without the archive's top folder) -> CRC-32.
std::map<std::string, uint32_t> recorded_crcs(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  const auto file_size = static_cast<uint64_t>(in.tellg());
  const auto [offset, size] = central_directory(in, file_size);
  const std::string directory = read_at(in, offset, size);
  std::map<std::string, uint32_t> crcs;
  for (size_t at = 0; at + 46 <= directory.size() && little_endian(directory, at, 4) == kDirectoryEntry;) {
    const size_t name_size = little_endian(directory, at + 28, 2), extra = little_endian(directory, at + 30, 2),
                 comment = little_endian(directory, at + 32, 2);
    const std::string name = directory.substr(at + 46, name_size);
    crcs[name.substr(name.find('/') + 1)] = static_cast<uint32_t>(little_endian(directory, at + 16, 4));
    at += 46 + name_size + extra + comment;
  }
  return crcs;
}

}  // namespace

void check_record_crcs(const std::string& path) {
  std::map<std::string, uint32_t> recorded;
  try {
    recorded = recorded_crcs(path);
  } catch (const std::exception& e) {
    throw RuntimeError(c10::str(path, ": damaged: its zip directory cannot be read (", e.what(), ")"));
  }
  caffe2::serialize::PyTorchStreamReader reader(path);
  for (const std::string& name : reader.getAllRecords()) {
    const auto found = recorded.find(name);
    SP_CHECK(found != recorded.end(), path, ": damaged: record ", name, " is not in the zip directory");
    const auto [data, size] = reader.getRecord(name);
    const uint32_t crc = crc32_of(data.get(), size);
    SP_CHECK(crc == found->second, path, ": damaged: record ", name, " has CRC-32 ", crc32_hex(crc),
             ", the zip directory records ", crc32_hex(found->second));
  }
}

}  // namespace stalepipe::models::detail
