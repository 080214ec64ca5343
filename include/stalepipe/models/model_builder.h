// Building a Model from your own LibTorch modules: the entry point users and the zoo share.
//
//   auto model = stalepipe::models::ModelBuilder("mycnn", {1, 28, 28, 10})
//                    .add("conv1", torch::nn::Sequential(torch::nn::Conv2d(1, 8, 3), torch::nn::ReLU()))
//                    .add("fc", torch::nn::Sequential(torch::nn::Flatten(), torch::nn::Linear(8 * 26 * 26, 10)))
//                    .build();
//
// Units run in the order they are added; each takes the previous unit's output (the first
// takes the input batch [N, channels, height, width]; the last must give logits
// [N, num_classes] for the default cross-entropy loss). Weight layers are numbered 1, 2, ...
// across units (model.h) by counting the Conv1d/2d/3d, ConvTranspose1d/2d/3d, Linear and
// Bilinear modules inside each unit, unless UnitOptions::weight_layers says otherwise. A
// pipeline register may follow any unit that has weight layers, unless its cut_after is false.
//
// Modules are shared, not copied: training the pipeline trains the modules you passed in.
// Parameters are whatever the modules hold when added, so torch::manual_seed(s) before
// constructing them gives reproducible runs.
//
// Threading: a builder is used by one thread.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <torch/nn/cloneable.h>
#include <torch/arg.h>
#include <torch/nn/modules/container/any.h>
#include <torch/nn/modules/container/sequential.h>

#include "stalepipe/models/model.h"

namespace stalepipe::models {

struct UnitOptions {
  // Whether a pipeline register may follow this unit (false: keep it with the next unit).
  TORCH_ARG(bool, cut_after) = true;
  // Unit::joined.
  TORCH_ARG(std::string, joined);
  // Number of weight layers the unit counts for in the PPV numbering; -1 counts its conv and
  // linear modules. Set it for a unit whose weights live in other module types.
  TORCH_ARG(int, weight_layers) = -1;
  // Skip tensors (models/skips.h): names the unit takes besides its input, and names it gives
  // besides its output. A unit with either has forward std::vector<Tensor>(std::vector<Tensor>).
  TORCH_ARG(std::vector<std::string>, pops);
  TORCH_ARG(std::vector<std::string>, stashes);
};

// Holds a torch::nn::Sequential as a unit (Sequential's templated forward cannot be stored in
// an AnyModule directly). Its parameters are named "<unit>.seq.<i>.<name>".
class SequentialUnitImpl : public torch::nn::Cloneable<SequentialUnitImpl> {
 public:
  explicit SequentialUnitImpl(torch::nn::Sequential seq);
  void reset() override;
  torch::Tensor forward(torch::Tensor x);
  torch::nn::Sequential& sequential() { return seq_; }

 private:
  torch::nn::Sequential seq_;
};
TORCH_MODULE(SequentialUnit);

// Conv/linear modules inside `module` (itself included): the default weight-layer count.
int count_weight_layers(const torch::nn::Module& module);

class ModelBuilder {
 public:
  // name: shown in messages and logs. input: one sample's shape and the class count.
  explicit ModelBuilder(std::string name = "custom", InputShape input = {});

  // Appends a unit. `module` is any module holder (torch::nn::Conv2d, your TORCH_MODULE,
  // torch::nn::Sequential) or std::shared_ptr<Impl> whose forward is Tensor(Tensor).
  // Throws UsageError for an empty name, a name with '.', or a name already used.
  template <typename ModuleType>
  ModelBuilder& add(std::string name, ModuleType module, UnitOptions options = {}) {
    return add_any(std::move(name), torch::nn::AnyModule(std::move(module)), options);
  }
  ModelBuilder& add(std::string name, torch::nn::Sequential module, UnitOptions options = {}) {
    return add_any(std::move(name), torch::nn::AnyModule(SequentialUnit(std::move(module))),
                   options);
  }
  ModelBuilder& add_any(std::string name, torch::nn::AnyModule module, UnitOptions options);

  const std::string& name() const { return name_; }
  const InputShape& input() const { return input_; }
  size_t size() const { return units_.size(); }

  // The model. Checks its skips (models/skips.h: check_skips) and that it fits together by
  // running a zero batch of 2 samples through the units in order (no gradient, eval mode, each unit's training flag restored; parameters,
  // buffers and the global RNG are untouched). Throws UsageError when there is no unit, the
  // input shape is not positive, a unit rejects its input, e.g.
  //   "model mycnn: unit 3 (fc1) cannot take the output of unit 2 (conv2), [2, 16, 5, 5]:
  //    mat1 and mat2 shapes cannot be multiplied (2x400 and 256x120)",
  // or the last unit's output is not [2, num_classes].
  Model build() const;

 private:
  std::string name_;
  InputShape input_;
  std::vector<Unit> units_;
  std::vector<int> counts_;  // weight layers per unit
};

}  // namespace stalepipe::models
