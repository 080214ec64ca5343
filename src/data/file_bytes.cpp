#include "data/file_bytes_impl.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include <zlib.h>

#include "stalepipe/common/error.h"

namespace stalepipe {
namespace data {
namespace detail {
namespace {

std::vector<uint8_t> read_raw(const std::string& path) {
  // Reject directories and FIFOs up front: a stream would open them and then fail or block.
  std::error_code error;
  const auto status = std::filesystem::status(path, error);
  SP_CHECK(!std::filesystem::exists(status) || std::filesystem::is_regular_file(status), path,
      ": expected a regular file, found ",
      std::filesystem::is_directory(status) ? "a directory" : "a special file");
  std::ifstream in(path, std::ios::binary);
  SP_CHECK(in.is_open(), path, ": cannot open file (", std::strerror(errno), ")");
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  SP_CHECK(size >= 0, path, ": cannot determine the file size");
  in.seekg(0, std::ios::beg);
  std::vector<uint8_t> bytes(static_cast<size_t>(size));
  in.read(reinterpret_cast<char*>(bytes.data()), size);
  SP_CHECK(in.gcount() == size, path, ": short read: expected ", size, " bytes, got ", in.gcount());
  return bytes;
}

const char* zlib_message(const z_stream& stream, int code) {
  if (stream.msg != nullptr) {
    return stream.msg;
  }
  return zError(code);
}

// Inflates every gzip member in `in` (gzip allows concatenated members, as `cat a.gz b.gz`
// produces). Anything short of a clean end of the last member is an error, never a short read.
std::vector<uint8_t> inflate_gzip(const std::string& path, const std::vector<uint8_t>& in) {
  z_stream stream;
  std::memset(&stream, 0, sizeof(stream));
  // 16 + MAX_WBITS: expect a gzip header and trailer (checks the CRC-32 and length).
  int code = inflateInit2(&stream, 16 + MAX_WBITS);
  SP_CHECK(code == Z_OK, path, ": cannot initialise zlib (", zError(code), ")");

  std::vector<uint8_t> out;
  // The trailer's ISIZE is the length mod 2^32 of the last member: a good first guess for a
  // good file. For a damaged one it is garbage, so never trust it beyond deflate's maximum
  // ratio (about 1032:1), or a truncated file would cost a multi-gigabyte allocation.
  if (in.size() >= 18) {
    const size_t n = in.size();
    const uint64_t isize = uint64_t{in[n - 4]} | uint64_t{in[n - 3]} << 8 |
        uint64_t{in[n - 2]} << 16 | uint64_t{in[n - 1]} << 24;
    out.reserve(static_cast<size_t>(std::min<uint64_t>(isize + 1, uint64_t{n} * 1032)));
  }
  out.resize(std::max<size_t>(out.capacity(), 1 << 16));

  stream.next_in = const_cast<Bytef*>(in.data());
  size_t in_left = in.size();
  size_t produced = 0;
  bool finished = false;
  try {
    while (true) {
      if (stream.avail_in == 0 && in_left > 0) {
        const uInt chunk = static_cast<uInt>(std::min<size_t>(in_left, 1u << 30));
        stream.avail_in = chunk;
        in_left -= chunk;
      }
      if (produced == out.size()) {
        SP_CHECK(out.size() < kMaxFileBytes, path, ": gzip stream inflates to more than ",
            kMaxFileBytes, " bytes; expected a data file");
        out.resize(std::min<uint64_t>(out.size() * 2, kMaxFileBytes));
      }
      const size_t room = std::min<size_t>(out.size() - produced, 1u << 30);
      stream.next_out = out.data() + produced;
      stream.avail_out = static_cast<uInt>(room);
      code = inflate(&stream, Z_NO_FLUSH);
      produced += room - stream.avail_out;
      if (code == Z_STREAM_END) {
        if (stream.avail_in == 0 && in_left == 0) {
          finished = true;
          break;
        }
        // Another member follows.
        code = inflateReset(&stream);
        SP_CHECK(code == Z_OK, path, ": cannot reset zlib (", zError(code), ")");
        continue;
      }
      if (code == Z_BUF_ERROR && stream.avail_out == 0) {
        continue;  // out of output space: grow and retry
      }
      const bool input_exhausted = stream.avail_in == 0 && in_left == 0;
      SP_CHECK(!(code == Z_BUF_ERROR || (code == Z_OK && input_exhausted && stream.avail_out > 0)),
          path, ": truncated gzip stream: the ", in.size(), " compressed bytes (", produced,
          " bytes inflated) end before the gzip end marker");
      SP_CHECK(code == Z_OK, path, ": gzip stream is corrupt (zlib: ", zlib_message(stream, code),
          ")");
    }
  } catch (...) {
    inflateEnd(&stream);
    throw;
  }
  inflateEnd(&stream);
  SP_CHECK(finished, path, ": gzip stream did not end cleanly");
  out.resize(produced);
  out.shrink_to_fit();
  return out;
}

}  // namespace

FileBytes read_file_bytes(const std::string& path) {
  FileBytes file;
  file.bytes = read_raw(path);
  file.gzipped = file.bytes.size() >= 2 && file.bytes[0] == 0x1f && file.bytes[1] == 0x8b;
  if (file.gzipped) {
    file.bytes = inflate_gzip(path, file.bytes);
  }
  return file;
}

void check_directory(const std::string& dir, const std::string& hint) {
  std::error_code error;
  const bool is_dir = std::filesystem::is_directory(dir, error);
  SP_CHECK(is_dir, dir, ": data set directory does not exist; ", hint);
}

}  // namespace detail
}  // namespace data
}  // namespace stalepipe
