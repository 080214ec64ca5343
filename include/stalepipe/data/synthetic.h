// A synthetic, learnable classification task for tests and benchmarks without data files.
//
// Each class has a fixed random prototype image made of 4x4-pixel blocks (coarse, so it
// survives pooling, crops and flips); a sample is its class's prototype plus independent
// per-pixel noise in [-64, 63], clipped to 0..255. Labels are uniform over the classes.
// A small CNN separates the classes within an epoch or two.
//
// The output is a pure function of the options: the generator is std::mt19937_64 and every
// random integer is derived from its raw output with our own arithmetic (no std::*_distribution,
// whose results differ between standard libraries), so the same seed gives the same bytes on
// every platform. Train and test draw from different streams but share the prototypes.
#pragma once

#include <cstdint>

#include <torch/arg.h>

#include "stalepipe/data/dataset.h"

namespace stalepipe {
namespace data {

struct SyntheticOptions {
  TORCH_ARG(int64_t, train_size) = 2048;  // >= 1
  TORCH_ARG(int64_t, test_size) = 512;    // >= 1
  TORCH_ARG(int64_t, channels) = 1;       // 1..64
  TORCH_ARG(int64_t, height) = 28;        // 1..1024
  TORCH_ARG(int64_t, width) = 28;         // 1..1024
  TORCH_ARG(int64_t, num_classes) = 10;   // 1..256
  TORCH_ARG(uint64_t, seed) = 0;
};

// Splits named "synthetic/train" and "synthetic/test". Throws UsageError for options outside
// the ranges above.
DataSplit make_synthetic(const SyntheticOptions& options);

// A synthetic segmentation task: each sample is noise over a background (class 0) with 1-3
// rectangles of random classes 1..num_classes-1 painted in turn, every class at its own
// brightness; the target is each pixel's class, int64 [N, height, width]. Splits named
// "synthetic-masks/train" and "synthetic-masks/test"; num_classes must be 2..256.
DataSplit make_synthetic_masks(const SyntheticOptions& options);

}  // namespace data
}  // namespace stalepipe
