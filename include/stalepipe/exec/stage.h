// A partition at run time: its units, its device, its optimizer and the mini-batches in flight.
//
// Weight semantics (docs/design.md, "Which weights each pass uses"):
//   forward(t)  uses the partition's weights as they are at that moment;
//   backward(t) uses the weights current at backward time (updates applied since forward(t)
//               are visible) together with the activations saved by forward(t);
//   update(t)   applies t's gradient at once, in place, keeping no copy of older weights.
// This falls out of LibTorch's autograd: the graph of forward(t) keeps references to the live
// weight tensors, and optim::Sgd writes them through `data()` without bumping the version
// counter that would otherwise make the pending backward throw.
//
// Threading: a Stage is used by one thread at a time (its worker). Different stages may run
// concurrently on different threads.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>

#include <torch/nn/modules/container/sequential.h>
#include <torch/types.h>

#include "stalepipe/optim/sgd.h"

namespace stalepipe::exec {

// What the last stage reports for a mini-batch.
struct StepLoss {
  double loss = 0;      // mean cross-entropy over the batch
  int64_t correct = 0;  // top-1 hits
  int64_t samples = 0;
};

// The training loss of the last stage: a scalar from the model output and the targets.
using LossFn = std::function<torch::Tensor(const torch::Tensor& output, const torch::Tensor& target)>;

// Mean cross-entropy of logits [B, classes] against class indices [B] (the default).
torch::Tensor cross_entropy_loss(const torch::Tensor& output, const torch::Tensor& target);

class Stage {
 public:
  // index: 0-based partition number; module: the partition's units in order (already built
  // and initialised); the module is moved to `device`. `loss` is used by the last stage only.
  Stage(int index, int num_stages, torch::nn::Sequential module, torch::Device device,
        optim::SgdOptions sgd, LossFn loss = cross_entropy_loss);

  int index() const { return index_; }
  bool is_first() const { return index_ == 0; }
  bool is_last() const { return index_ == num_stages_ - 1; }
  const torch::Device& device() const { return device_; }

  // Forward of mini-batch `step` on a non-last stage. `input` (any device) is copied to this
  // stage's device. Keeps the graph until backward(step). Returns the output, detached: the
  // contents of the pipeline register.
  torch::Tensor forward(int64_t step, const torch::Tensor& input);

  // Forward of the last stage: output, loss against `labels`, and top-1 accuracy when the
  // output is [B, classes] and the labels are class indices (otherwise correct = 0).
  StepLoss forward_loss(int64_t step, const torch::Tensor& input, const torch::Tensor& labels);

  // Backward of `step`: from the saved loss (last stage, grad_output undefined) or from
  // grad_output (the gradient of this stage's output). Accumulates parameter gradients and
  // returns the gradient of the stage's input (undefined for the first stage).
  // Throws RuntimeError if `step` has no forward in flight.
  torch::Tensor backward(int64_t step, const torch::Tensor& grad_output);

  // Applies the accumulated gradient with learning rate lr and clears it.
  void update(double lr);

  // Evaluation forward: no graph, eval mode (batch-norm running statistics), train mode restored.
  torch::Tensor predict(const torch::Tensor& input);

  size_t in_flight() const { return in_flight_.size(); }
  void clear_in_flight() { in_flight_.clear(); }

  torch::nn::Sequential& module() { return module_; }
  optim::Sgd& optimizer() { return *optimizer_; }

 private:
  struct Pending {
    torch::Tensor input;   // leaf requiring grad (non-first stages)
    torch::Tensor output;  // output or loss, with its graph
  };

  torch::Tensor prepare_input(const torch::Tensor& input) const;
  Pending& pending(int64_t step, const char* what);

  int index_;
  int num_stages_;
  torch::nn::Sequential module_;
  torch::Device device_;
  std::unique_ptr<optim::Sgd> optimizer_;
  LossFn loss_;
  std::map<int64_t, Pending> in_flight_;
};

}  // namespace stalepipe::exec
