#include "stalepipe/models/in_place.h"

#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>

#include "stalepipe/models/model_builder.h"
#include "torchscript_impl.h"

namespace stalepipe::models {
namespace {

// LibTorch's activations that take an inplace option.
template <typename... Impl>
bool any_inplace(const torch::nn::Module& unit) {
  return ((dynamic_cast<const Impl*>(&unit) && dynamic_cast<const Impl*>(&unit)->options.inplace()) || ...);
}

bool inplace_activation(const torch::nn::Module& unit) {
  using namespace torch::nn;
  return any_inplace<ReLUImpl, ReLU6Impl, LeakyReLUImpl, ELUImpl, SELUImpl, CELUImpl, HardtanhImpl,
                     ThresholdImpl, RReLUImpl>(unit);
}

// The units of a Sequential unit (or of the torch::nn::Sequential it holds), in order; null
// for any other module.
const torch::nn::SequentialImpl* chain_of(const torch::nn::Module& unit) {
  if (const auto* holder = dynamic_cast<const SequentialUnitImpl*>(&unit)) {
    return dynamic_cast<const torch::nn::SequentialImpl*>(holder->children().front().get());
  }
  return dynamic_cast<const torch::nn::SequentialImpl*>(&unit);
}

// Whether the output of `unit` may be its input or a view of it (a later unit writing into
// the output would write into the input).
bool hands_input_on(const torch::nn::Module& unit) {
  if (const auto* script = dynamic_cast<const detail::ScriptUnitImpl*>(&unit)) return script->may_return_input();
  if (dynamic_cast<const torch::nn::FlattenImpl*>(&unit) || dynamic_cast<const torch::nn::IdentityImpl*>(&unit)) {
    return true;
  }
  if (const auto* chain = chain_of(unit)) {
    for (const auto& child : chain->children()) {
      if (!hands_input_on(*child)) return false;
    }
    return true;
  }
  return inplace_activation(unit);
}

}  // namespace

bool writes_its_input(const torch::nn::Module& unit) {
  if (const auto* script = dynamic_cast<const detail::ScriptUnitImpl*>(&unit)) return script->writes_input();
  if (const auto* chain = chain_of(unit)) {
    for (const auto& child : chain->children()) {
      if (writes_its_input(*child)) return true;
      if (!hands_input_on(*child)) return false;
    }
    return false;
  }
  return inplace_activation(unit);
}

}  // namespace stalepipe::models
