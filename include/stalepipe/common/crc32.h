// CRC-32 (zlib's crc32, the IEEE polynomial that zip, gzip and PNG use): a checksum against
// accidental damage (truncation, flipped bits) and of a file's content, no cryptography.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace stalepipe {

uint32_t crc32_of(const void* data, size_t size);
uint32_t crc32_of(const std::string& bytes);
// "1a2b3c4d": how messages and files write a CRC-32.
std::string crc32_hex(uint32_t crc);

}  // namespace stalepipe
