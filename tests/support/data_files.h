// Small generated data files for the data module's tests: IDX (raw or gzip) and CIFAR-10 binary.
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace stalepipe {
namespace test {

using Bytes = std::vector<uint8_t>;

// A deterministic pixel value for sample i, byte p (so tests can check values after reading).
uint8_t test_pixel(int64_t i, int64_t p);

// An IDX image file: magic, count, rows, cols (big-endian), then count*rows*cols test_pixel()s.
Bytes idx_images(uint32_t count, uint32_t rows, uint32_t cols, uint32_t magic = 2051);
// An IDX label file: magic, labels.size(), then the labels.
Bytes idx_labels(const Bytes& labels, uint32_t magic = 2049);
// A CIFAR-10 binary batch: per label, 1 label byte and 3072 test_pixel()s of sample first_id + r.
Bytes cifar_records(const Bytes& labels, int64_t first_id = 0);

// gzip-compresses `bytes` (one gzip member, zlib's default level).
Bytes gzip(const Bytes& bytes);
// Writes `bytes` to `path`, replacing it. Throws std::runtime_error on failure.
void write_file(const std::string& path, const Bytes& bytes);

// Success iff f() throws an E whose what() contains every string of `parts`.
template <typename E>
::testing::AssertionResult throws_with(
    const std::function<void()>& f, const std::vector<std::string>& parts) {
  try {
    f();
  } catch (const E& e) {
    const std::string message = e.what();
    for (const std::string& part : parts) {
      if (message.find(part) == std::string::npos) {
        return ::testing::AssertionFailure()
            << "message lacks \"" << part << "\": " << message;
      }
    }
    return ::testing::AssertionSuccess() << message;
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "threw the wrong type: " << e.what();
  }
  return ::testing::AssertionFailure() << "did not throw";
}

}  // namespace test
}  // namespace stalepipe
