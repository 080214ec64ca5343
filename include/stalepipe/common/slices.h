// How replicas of a pipeline divide their work: slices of a mini-batch, buckets of gradients.
//
// slice_range: where each of `count` near-equal slices of `n` items begins and ends: the first
// n % count slices have one item more (torch::tensor_split's rule). The loader's shards and
// the executors' split of a mini-batch between replicas both use it, so a replica trains the
// same samples whichever of them cut its slice.
#pragma once

#include <cstdint>
#include <utility>

namespace stalepipe {

// [begin, end) of slice `index` (0 <= index < count).
inline std::pair<int64_t, int64_t> slice_range(int64_t n, int64_t count, int64_t index) {
  const int64_t base = n / count, extra = n % count;
  const int64_t begin = index * base + (index < extra ? index : extra);
  return {begin, begin + base + (index < extra ? 1 : 0)};
}

// The most bytes of gradient one sum between replicas moves at a time (the executors' buckets;
// the simulator's model of them). DDP's first bucket is 1 MB too: a first sum starts early in
// the backward.
constexpr int64_t kGradientBucketBytes = 1 << 20;

}  // namespace stalepipe
