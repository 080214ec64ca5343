// The memory layout of a network's 4-D tensors. Channels-last (NHWC) is what LibTorch's
// oneDNN convolutions and its CPU batch-norm and pooling kernels run fastest on; a module
// whose weights are channels-last, fed a channels-last input, computes (and autograd
// returns gradients) in that layout throughout, so nothing is converted between layers.
#pragma once

#include <torch/nn/module.h>
#include <torch/types.h>

namespace stalepipe::models {

// Gives every 4-D parameter and buffer of `module` (and its children) the strides of `format`,
// in place (the tensors stay the same objects: an optimizer holding them keeps working).
void to_memory_format(torch::nn::Module& module, torch::MemoryFormat format);

// `x` in `format` if it is 4-D (a copy only where it is not already); anything else as is.
torch::Tensor in_memory_format(const torch::Tensor& x, torch::MemoryFormat format);

}  // namespace stalepipe::models
