// How fast the input pipeline alone makes training batches: decoding, crops, resizing,
// normalisation, on the loader's threads, with no training beside it.
#pragma once

#include <cstdint>
#include <vector>

#include "stalepipe/api/options.h"

namespace stalepipe::perf {

struct LoaderSpeed {
  int64_t images = 0;          // timed, after one batch of warm-up
  double seconds = 0;
  double images_per_second = 0;
  std::vector<int64_t> shape;  // {C, H, W} of a sample
  int threads = 0;             // decode threads
};

// Makes `batches` (>= 1) training batches of epoch 0 of the data set `options` names (its
// DataOptions as training reads them, the data threads resolved as training resolves them),
// one after the other as the prefetching thread does, and times them.
LoaderSpeed measure_loader(const Options& options, int64_t batches);

}  // namespace stalepipe::perf
