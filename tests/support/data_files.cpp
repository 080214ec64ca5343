#include "support/data_files.h"

#include <cstring>
#include <fstream>
#include <stdexcept>

#include <zlib.h>

namespace stalepipe {
namespace test {
namespace {

void put_be32(Bytes& out, uint32_t value) {
  out.push_back(static_cast<uint8_t>(value >> 24));
  out.push_back(static_cast<uint8_t>(value >> 16));
  out.push_back(static_cast<uint8_t>(value >> 8));
  out.push_back(static_cast<uint8_t>(value));
}

}  // namespace

uint8_t test_pixel(int64_t i, int64_t p) {
  return static_cast<uint8_t>((i * 37 + p * 11 + (p * p) % 7) % 256);
}

Bytes idx_images(uint32_t count, uint32_t rows, uint32_t cols, uint32_t magic) {
  Bytes out;
  put_be32(out, magic);
  put_be32(out, count);
  put_be32(out, rows);
  put_be32(out, cols);
  const int64_t pixels = int64_t{rows} * cols;
  for (int64_t i = 0; i < count; ++i) {
    for (int64_t p = 0; p < pixels; ++p) {
      out.push_back(test_pixel(i, p));
    }
  }
  return out;
}

Bytes idx_labels(const Bytes& labels, uint32_t magic) {
  Bytes out;
  put_be32(out, magic);
  put_be32(out, static_cast<uint32_t>(labels.size()));
  out.insert(out.end(), labels.begin(), labels.end());
  return out;
}

Bytes cifar_records(const Bytes& labels, int64_t first_id) {
  Bytes out;
  for (size_t r = 0; r < labels.size(); ++r) {
    out.push_back(labels[r]);
    for (int64_t p = 0; p < 3072; ++p) {
      out.push_back(test_pixel(first_id + static_cast<int64_t>(r), p));
    }
  }
  return out;
}

Bytes gzip(const Bytes& bytes) {
  z_stream stream;
  std::memset(&stream, 0, sizeof(stream));
  if (deflateInit2(&stream, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 16 + MAX_WBITS, 8,
          Z_DEFAULT_STRATEGY) != Z_OK) {
    throw std::runtime_error("deflateInit2 failed");
  }
  Bytes out(deflateBound(&stream, bytes.size()) + 32);
  stream.next_in = const_cast<Bytef*>(bytes.data());
  stream.avail_in = static_cast<uInt>(bytes.size());
  stream.next_out = out.data();
  stream.avail_out = static_cast<uInt>(out.size());
  const int code = deflate(&stream, Z_FINISH);
  deflateEnd(&stream);
  if (code != Z_STREAM_END) {
    throw std::runtime_error("deflate did not finish");
  }
  out.resize(stream.total_out);
  return out;
}

void write_file(const std::string& path, const Bytes& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!out) {
    throw std::runtime_error("cannot write " + path);
  }
}

}  // namespace test
}  // namespace stalepipe
