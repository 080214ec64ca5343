// 2x2 max pooling with stride 2, optionally followed by a ReLU, as one operation: what
// LeNet-5's, AlexNet's and VGG-16's ConvBlocks pool with.
#pragma once

#include <torch/types.h>

namespace stalepipe::models {

// Equals torch::max_pool2d(x, 2) (then .relu() where relu is true) bit for bit, values and
// gradients: the same first-maximum-wins order within each window, NaN propagated as
// LibTorch propagates it.
//
// On one intra-op thread (a pipeline's workers, or non-pipelined training with --threads 1),
// on a float CPU tensor of 4 dimensions contiguous in NCHW or channels-last, it runs loops of
// its own, vectorised without branches, that keep one byte per output for the backward (which
// window element won) where LibTorch keeps the input and an int64 index per output.
// LibTorch's kernels branch on every comparison, and its channels-last one vectorises only
// across channels: with LeNet-5's 6 it takes 7 times as long on the first pooling. Anything
// else runs the LibTorch operations.
torch::Tensor max_pool_2x2(const torch::Tensor& x, bool relu);

// Whether max_pool_2x2 takes its own loop for x.
bool pools_by_hand(const torch::Tensor& x);

}  // namespace stalepipe::models
