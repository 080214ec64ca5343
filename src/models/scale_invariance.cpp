#include "stalepipe/models/scale_invariance.h"

#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>

namespace stalepipe::models {

namespace {

// The weight of `layer` if `layer` is a bias-free conv or linear whose output `next` normalizes.
torch::Tensor invariant_weight(const torch::nn::Module& layer, const torch::nn::Module& next) {
  if (const auto* conv = layer.as<torch::nn::Conv2dImpl>()) {
    const auto* bn = next.as<torch::nn::BatchNorm2dImpl>();
    if (bn && !conv->options.bias() && bn->options.num_features() == conv->options.out_channels()) {
      return conv->weight;
    }
  }
  if (const auto* linear = layer.as<torch::nn::LinearImpl>()) {
    const auto* bn = next.as<torch::nn::BatchNorm1dImpl>();
    if (bn && !linear->options.bias() &&
        bn->options.num_features() == linear->options.out_features()) {
      return linear->weight;
    }
  }
  return {};
}

void collect(const torch::nn::Module& module, std::vector<torch::Tensor>& out) {
  const auto children = module.children();
  for (size_t i = 0; i < children.size(); ++i) {
    if (i + 1 < children.size()) {
      if (torch::Tensor w = invariant_weight(*children[i], *children[i + 1]); w.defined()) {
        out.push_back(w);
      }
    }
    collect(*children[i], out);
  }
}

}  // namespace

std::vector<torch::Tensor> scale_invariant_weights(const torch::nn::Module& module) {
  std::vector<torch::Tensor> out;
  collect(module, out);
  return out;
}

}  // namespace stalepipe::models
