// relu(batch_norm(x) [+ residual]) as one operation: what every BatchNorm2d of the zoo is
// followed by (ConvBlock: conv-bn-relu; BasicBlock: conv-bn-relu and conv-bn-add-relu).
#pragma once

#include <torch/nn/modules/batchnorm.h>
#include <torch/types.h>

namespace stalepipe::models {

// Equals (bn(x) + residual).relu() (residual undefined: bn(x).relu()) up to floating-point
// reassociation, with the same running-statistics update as bn's own forward.
//
// In training mode, on a float CPU tensor in channels-last layout, on one intra-op thread (a
// pipeline's workers, or non-pipelined training with --threads 1), it runs fused: the forward
// reads x twice (statistics, then normalise + add + clamp in one pass) where the separate
// operations read and write the activation six to eight times, and the backward applies the
// ReLU's mask inside batch norm's backward instead of a pass of its own. Autograd keeps x and
// the output, as the separate operations did. Everything else (evaluation mode, NCHW, other
// dtypes and devices) runs the separate LibTorch operations.
torch::Tensor batch_norm_relu(torch::nn::BatchNorm2dImpl& bn, const torch::Tensor& x,
                              const torch::Tensor& residual = {});

// Whether batch_norm_relu(bn, x, residual) takes the fused path (a residual, where given,
// must be a float CPU tensor too).
bool runs_fused(const torch::nn::BatchNorm2dImpl& bn, const torch::Tensor& x,
                const torch::Tensor& residual = {});

}  // namespace stalepipe::models
