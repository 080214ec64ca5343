// A model: its name, the input it expects, and its ordered list of units.
//
// Weight layers (conv and linear; batch norm is not one) are numbered 1, 2, ... from the input
// in forward order, across units. A pipeline placement vector (PPV) lists weight-layer indices
// and puts a register right after each; cut_layers() says which indices are allowed.
//
// Copying a Model is shallow: the copy shares the unit modules (and so the parameters).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <torch/nn/modules/container/sequential.h>

#include "stalepipe/models/unit.h"

namespace torch::jit {
struct Module;  // torch/csrc/jit/api/module.h; only models/torchscript.cpp needs its definition
}  // namespace torch::jit

namespace stalepipe::models {

// Shape of one input sample and the number of classes. The zoo's networks are CIFAR-style and
// expect 32x32 (28x28 data is zero-padded to 32x32 by the loader).
struct InputShape {
  int64_t channels = 1;
  int64_t height = 32;
  int64_t width = 32;
  int64_t num_classes = 10;
};

class Model {
 public:
  std::string name;  // "lenet5", "alexnet", "vgg16", "resnet20", ...
  InputShape input;
  std::vector<Unit> units;
  // The scripted module the units were loaded from (models/torchscript.h), sharing their
  // tensors, so that save_torchscript can write the trained network; null for other models.
  std::shared_ptr<torch::jit::Module> script;

  // Total number of weight layers: the largest index in any unit's weight_layers (0 if none).
  int num_weight_layers() const;

  // Increasing weight-layer indices L after which a register may go: L is the last weight
  // layer of a unit with cut_after == true, and L < num_weight_layers() (a register after the
  // last layer would leave an empty partition).
  std::vector<int> cut_layers() const;

  // Index into `units` of the unit with cut_after == true whose last weight layer is `layer`;
  // -1 if there is none (layer out of range, or inside a unit, or in a unit without cut_after).
  // The partitioner cuts the unit list right after this index.
  int unit_ending_at_layer(int layer) const;

  // A Sequential of all units in order, named by unit name. It shares the unit modules, so
  // training it trains this model. Throws c10::Error on duplicate or invalid unit names. Its
  // forward() runs a chain only; forward() below also runs units with skip tensors.
  torch::nn::Sequential as_sequential() const;

  // The whole network on x (units in order, skip tensors handed on): the model without any
  // pipeline register.
  torch::Tensor forward(torch::Tensor x) const;

  // Whether any unit stashes or pops a skip tensor.
  bool has_skips() const;

  // Number of trainable parameter elements (buffers such as BN running stats not included).
  int64_t num_parameters() const;
};

// A copy with modules of its own (parameters and buffers copied, the global RNG left as it
// was): a second replica of the network in this process. Units must be torch::nn::Cloneable
// (the zoo's, torch::nn's, a ModelBuilder Sequential) or come from TorchScript; UsageError
// naming the first unit that is neither.
Model independent_copy(const Model& model);

}  // namespace stalepipe::models
