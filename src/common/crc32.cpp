#include "stalepipe/common/crc32.h"

#include <zlib.h>

#include <algorithm>
#include <cstdio>

namespace stalepipe {

// zlib's CRC-32: the project links zlib already (gzip data sets) and it is fast (several GB/s).
uint32_t crc32_of(const void* data, size_t size) {
  uLong crc = ::crc32(0L, Z_NULL, 0);
  const auto* bytes = static_cast<const Bytef*>(data);
  for (size_t done = 0; done < size;) {
    const uInt n = static_cast<uInt>(std::min<size_t>(size - done, 1u << 30));
    crc = ::crc32(crc, bytes + done, n);
    done += n;
  }
  return static_cast<uint32_t>(crc);
}

uint32_t crc32_of(const std::string& bytes) { return crc32_of(bytes.data(), bytes.size()); }

std::string crc32_hex(uint32_t crc) {
  char text[9];
  std::snprintf(text, sizeof text, "%08x", crc);
  return text;
}

}  // namespace stalepipe
