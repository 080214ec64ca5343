// Reader for the binary version of CIFAR-10 (cifar-10-binary.tar.gz).
//
// Each file is a sequence of 3073-byte records: 1 label byte (0..9), then 3072 pixel bytes,
// the 32x32 red plane, then green, then blue, each row-major. The official files hold 10000
// records each, but any positive number of whole records is accepted (tests use tiny files).
#pragma once

#include <cstdint>
#include <string>

#include "stalepipe/data/dataset.h"

namespace stalepipe {
namespace data {

constexpr int64_t kCifar10RecordBytes = 1 + 3 * 32 * 32;  // 3073

// Loads data_batch_1.bin .. data_batch_5.bin (train, concatenated in that order) and
// test_batch.bin (test) from `dir`, or from `dir`/cifar-10-batches-bin/ when `dir` itself does
// not hold them. Images are [N, 3, 32, 32]; splits are named "cifar10/train" and "cifar10/test".
// Throws RuntimeError for a missing directory or file, an empty file, a size that is not a
// multiple of 3073 bytes, or a label outside 0..9, naming the file.
DataSplit load_cifar10(const std::string& dir);

}  // namespace data
}  // namespace stalepipe
