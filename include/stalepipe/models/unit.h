// One unit of a model: the smallest piece a pipeline partition is made of.
//
// A model is a flat, ordered list of units (model.h). A partition is a contiguous range of
// units, built by the engine as a torch::nn::Sequential with push_back(unit.name, unit.module),
// so a unit must satisfy everything Sequential, torch::save/load, to(device) and train()/eval()
// require of a child module. Each unit takes the previous unit's output; a unit may also hand
// named *skip tensors* to a later unit (Skips below, models/skips.h), which is how networks
// that are not a chain (residual blocks cut in two, U-Nets) are written.
#pragma once

#include <string>
#include <vector>

#include <torch/nn/modules/container/any.h>

namespace stalepipe::models {

// The skip tensors a unit takes and gives besides its input and output. A unit with any has
// forward: std::vector<Tensor>(std::vector<Tensor>) taking {input, popped...} in the order of
// `pops` and returning {output, stashed...} in the order of `stashes`; a unit without any has
// forward: Tensor(Tensor). Every name is stashed by one unit and popped by one later unit.
struct Skips {
  std::vector<std::string> pops;
  std::vector<std::string> stashes;
  bool empty() const { return pops.empty() && stashes.empty(); }
};

struct Unit {
  // A valid torch module name, unique within the model: non-empty, no '.'.
  // Examples: "conv1", "block1_2", "fc".
  std::string name;

  // forward: Tensor(Tensor), input [N, ...] -> output [N, ...] (with skips: as Skips says).
  // Contract: never modifies its input or a popped tensor in place (the input may be a leaf that requires grad,
  // e.g. the detached activation a pipeline register hands over), and never draws from the
  // global RNG in forward (the same mini-batch must give the same result on any thread).
  // Copying a Unit shares the module (AnyModule copies are shallow).
  torch::nn::AnyModule module;

  // 1-based indices of the weight layers (conv, linear) inside, in forward order; consecutive.
  // Empty for a unit without weights (e.g. a lone pooling unit).
  std::vector<int> weight_layers;

  // Whether a pipeline register may follow this unit. False inside structures that must not
  // be split (none in the zoo: a ResNet block is already one unit).
  bool cut_after = true;

  // Why no register may go between its weight layers, in a few words, where it holds pieces of
  // a network that a register could not separate ("aten::split at net.py:31 makes a Tensor[]
  // that a later layer uses"); shown by `layers` and in errors. Empty: nothing to say.
  std::string joined;

  // The skip tensors it pops and stashes (none for a unit of a chain).
  Skips skips;
};

}  // namespace stalepipe::models
