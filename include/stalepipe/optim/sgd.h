// Stochastic gradient descent with momentum and weight decay, PyTorch's formula exactly:
//   g   = grad + weight_decay * w
//   buf = g                                  on the first step,
//   buf = momentum * buf + (1 - dampening) * g   afterwards
//   g   = g + momentum * buf   (nesterov)   or   g = buf
//   w   = w - lr * g
// and bit-identical to torch::optim::SGD for the same inputs (tests/unit/optim).
//
// Why not torch::optim::SGD itself: a stale pipeline applies an update while autograd graphs
// of earlier mini-batches, which saved references to these very weights, are still pending.
// Updating through the parameter bumps its version counter and the pending backward throws
// "modified by an inplace operation". This class writes through `param.data()`, a tensor that
// shares the storage but not the version counter, so the pending backward runs and reads
// the *current* weights - the semantics the paper specifies (docs/design.md).
//
// Threading: one instance per partition, used by one thread at a time.
#pragma once

#include <vector>

#include <torch/arg.h>
#include <torch/serialize/archive.h>
#include <torch/types.h>

namespace stalepipe::optim {

struct SgdOptions {
  TORCH_ARG(double, momentum) = 0.9;
  TORCH_ARG(double, dampening) = 0.0;
  TORCH_ARG(double, weight_decay) = 5e-4;
  TORCH_ARG(bool, nesterov) = false;
};

class Sgd {
 public:
  // params: the tensors to update (a partition's parameters); gradients are read from
  // param.grad(); parameters without a gradient are skipped, as in PyTorch.
  Sgd(std::vector<torch::Tensor> params, SgdOptions options);

  // Applies one update with learning rate lr, in place, without touching version counters.
  void step(double lr);

  // Drops the gradients (sets them undefined, so the next backward writes fresh ones).
  void zero_grad();

  const SgdOptions& options() const { return options_; }
  const std::vector<torch::Tensor>& params() const { return params_; }
  // One per parameter; undefined until that parameter's first update.
  const std::vector<torch::Tensor>& momentum_buffers() const { return momentum_buffers_; }

  // Saves/loads the momentum buffers under "sgd.momentum.<i>" (and which ones exist).
  void save(torch::serialize::OutputArchive& archive) const;
  void load(torch::serialize::InputArchive& archive);

 private:
  std::vector<torch::Tensor> params_;
  std::vector<torch::Tensor> momentum_buffers_;
  SgdOptions options_;
};

}  // namespace stalepipe::optim
