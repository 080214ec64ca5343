// Which weights a network's output cannot tell apart from their multiples.
//
// A conv or linear layer without bias that feeds a batch norm is scale-invariant in training
// mode: BN(c * W x) = BN(W x) for any c > 0. SGD still changes such a weight's norm, and its
// norm sets its effective learning rate (the update's angle is ~ lr / |W|^2). Stale gradients
// inflate these norms (docs/results.md); --fixed-weight-norm and --hybrid-norm-reset act on them.
#pragma once

#include <vector>

#include <torch/nn/module.h>
#include <torch/types.h>

namespace stalepipe::models {

// The weights of every Conv2d (or Linear) without bias registered immediately before a
// BatchNorm2d (or BatchNorm1d) of as many features, in the same parent module, anywhere in
// `module`'s tree, in tree order. Registration order stands in for data flow: it holds for
// the zoo's blocks (conv, bn) and for Sequential(conv, bn, ...); a module that registers a
// conv before a batch norm it does not feed would be misread.
std::vector<torch::Tensor> scale_invariant_weights(const torch::nn::Module& module);

}  // namespace stalepipe::models
