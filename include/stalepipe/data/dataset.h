// An in-memory image data set: the whole split as two CPU tensors, images and their targets
// (class indices, or regression targets).
//
// Pixels stay uint8 in memory (Fashion-MNIST's 60000 x 784 is 47 MB); the Loader converts
// each mini-batch to float when it is assembled.
#pragma once

#include <cstdint>
#include <string>

#include <torch/types.h>

namespace stalepipe {
namespace data {

struct Dataset {
  torch::Tensor images;  // uint8, [N, C, H, W], contiguous, CPU
  // The targets: int64 [N] class indices in [0, num_classes), or, where num_classes is 0,
  // float32 [N, D] regression targets.
  torch::Tensor labels;
  int64_t num_classes = 10;
  std::string name;  // e.g. "fashion-mnist/train"; used in messages and logs

  // Number of samples N; 0 when `images` is undefined.
  int64_t size() const;
  // C, H and W of `images`. Throw UsageError when `images` is undefined.
  int64_t channels() const;
  int64_t height() const;
  int64_t width() const;

  // The first n samples (a view sharing storage; still contiguous) under the same name and
  // num_classes. Throws UsageError unless 0 <= n <= size().
  Dataset subset(int64_t n) const;
};

// The usual pair of splits. Both share C, H, W and num_classes.
struct DataSplit {
  Dataset train;
  Dataset test;
};

}  // namespace data
}  // namespace stalepipe
