// Units that write into their input tensor. A pipeline register hands the next partition a
// leaf of its graph that shares its storage with the previous partition's output, which an
// in-place operation must not modify (autograd refuses, and the previous partition may need
// those values for its backward); such a unit is given a copy (exec::Stage).
#pragma once

#include <torch/nn/module.h>

namespace stalepipe::models {

// Whether `unit`'s forward may write into its input: a scripted unit whose forward does
// anywhere (torch.nn.ReLU(inplace=True) first, as torchvision writes it; read from the graph's
// alias analysis), a Sequential unit whose first child does (or a later one, through children
// that hand their input on, as Flatten does), LibTorch's activations built with inplace(true).
bool writes_its_input(const torch::nn::Module& unit);

}  // namespace stalepipe::models
