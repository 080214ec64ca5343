// Reader for the IDX format of MNIST, Fashion-MNIST and KMNIST.
//
// Layout (all integers big-endian uint32):
//   images: magic 2051 (0x00000803), count N, rows H, cols W, then N*H*W uint8 pixels
//   labels: magic 2049 (0x00000801), count N, then N uint8 labels
// Files may be raw or gzip-compressed; gzip is detected by its magic bytes 0x1f 0x8b, not by
// the file name.
//
// Everything is validated and reported as stalepipe::RuntimeError with a one-line message that
// names the file and says what was expected and what was found: open failures, bad magic,
// zero or absurd dimensions, a payload shorter (truncated) or longer (trailing bytes) than the
// header says, a truncated or corrupt gzip stream, labels outside [0, num_classes), and image
// and label files with different counts.
#pragma once

#include <cstdint>
#include <string>

#include "stalepipe/data/dataset.h"

namespace stalepipe {
namespace data {

constexpr uint32_t kIdxImagesMagic = 2051;  // 0x00000803: unsigned byte, 3 dimensions
constexpr uint32_t kIdxLabelsMagic = 2049;  // 0x00000801: unsigned byte, 1 dimension

// Upper bounds that no real IDX file reaches; they stop a corrupt header from asking for
// terabytes before the size check can catch it.
constexpr uint32_t kIdxMaxSide = 4096;
constexpr uint32_t kIdxMaxCount = 100000000;

// Reads one image file and its label file into a Dataset of shape [N, 1, H, W] named `name`.
// Throws UsageError if num_classes is not in 1..256, RuntimeError for any problem with a file.
Dataset read_idx(
    const std::string& images_path,
    const std::string& labels_path,
    const std::string& name,
    int64_t num_classes = 10);

// Loads the four standard files from `dir`, each either raw or with a .gz suffix:
//   train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte
// The splits are named "<name>/train" and "<name>/test". Throws RuntimeError if `dir` does not
// exist or a file is missing (naming the path tried and the files expected).
DataSplit load_idx_dir(const std::string& dir, const std::string& name);

}  // namespace data
}  // namespace stalepipe
