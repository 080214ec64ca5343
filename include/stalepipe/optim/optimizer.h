// A partition's optimizer: the update rule (SGD, optim/sgd.h, or AdamW, optim/adamw.h) with
// the staleness mitigations that do not depend on it, one instance per partition.
//
// Why not torch::optim's own: a stale pipeline applies an update while autograd graphs of
// earlier mini-batches, which saved references to these very weights, are still pending.
// Updating through the parameter bumps its version counter and the pending backward throws
// "modified by an inplace operation". These classes write through `param.data()`, a tensor
// that shares the storage but not the version counter, so the pending backward runs and reads
// the *current* weights - the semantics the paper specifies (docs/design.md).
//
// The mitigations here (docs/design.md, "Mitigations"), for a gradient of delay D (its forward
// computed with weights that lacked D updates that are applied by the time it is):
//   delay_aware_lr (after PipeMare, Yang et al. 2021): lr_D = lr * (1 + D)^-p(t), with
//       p(t) = 1 - min(t / delay_lr_anneal_steps, 1) (p = 1 throughout when that is 0);
//   fixed_weight_norm (projected descent on the sphere; the norm constraint that Kosson et
//       al.'s "Rotational Equilibrium", ICML 2024, use to balance effective updates): after
//       each update, every scale-invariant weight W (models/scale_invariance.h) is rescaled to
//       the norm it had when the optimizer was built, W = W * |W_0| / |W|; reset_norms() does
//       the same once, on demand (the hybrid scheme's switch).
// The rule's own (momentum's spike compensation, weight prediction, the delay-corrected
// look-ahead) are in sgd.h. With D = 0 every mitigation reduces to the plain update.
//
// Threading: one instance per partition, used by one thread at a time.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <torch/arg.h>
#include <torch/serialize/archive.h>
#include <torch/types.h>

#include "stalepipe/optim/optimizer_kind.h"

namespace stalepipe::optim {

struct UpdateOptions {
  TORCH_ARG(OptimizerKind, kind) = OptimizerKind::kSgd;
  TORCH_ARG(double, weight_decay) = 5e-4;  // SGD: L2 in the gradient; AdamW: decoupled
  // SGD
  TORCH_ARG(double, momentum) = 0.9;
  TORCH_ARG(double, dampening) = 0.0;
  TORCH_ARG(bool, nesterov) = false;
  // AdamW
  TORCH_ARG(double, beta1) = 0.9;
  TORCH_ARG(double, beta2) = 0.999;
  TORCH_ARG(double, eps) = 1e-8;
  // Mitigations (above and in sgd.h).
  TORCH_ARG(bool, delay_aware_lr) = false;
  TORCH_ARG(int64_t, delay_lr_anneal_steps) = 0;
  TORCH_ARG(bool, spike_compensation) = false;
  TORCH_ARG(bool, weight_prediction) = false;
  TORCH_ARG(bool, delay_nesterov) = false;
  TORCH_ARG(bool, fixed_weight_norm) = false;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // Applies one update with learning rate lr, in place, without touching version counters.
  // `delay` is the gradient's delay D; lr is used as given (pass it through effective_lr()
  // first for the delay-aware rate). Parameters without a gradient are skipped.
  virtual void step(double lr, int delay = 0) = 0;

  // The learning rate for a gradient of delay D at global step t: lr itself unless
  // delay_aware_lr is set.
  double effective_lr(double lr, int delay, int64_t step) const;

  // Drops the gradients (sets them undefined, so the next backward writes fresh ones).
  void zero_grad();
  // Zeroes the defined gradients where they are: their tensors stay (a captured CUDA graph
  // accumulates into them); undefined ones stay undefined.
  void zero_grad_in_place();

  // Rescales each scale-invariant weight to its recorded norm, w *= c with c = |w_0| / |w|,
  // and the rule's state to match (rescale_state). The network computes the same function in
  // training mode.
  void reset_norms();
  // How many parameters are scale-invariant (have a recorded norm).
  int scale_invariant_count() const;

  // Weight prediction: moves the weights `steps` updates ahead along the momentum, in place;
  // the caller restores them. SGD's (UsageError for another rule).
  virtual void extrapolate(int steps, double lr);
  // CUDA graphs: the update with its per-step values read from tensors on the device (sgd.h).
  // SGD's (UsageError for another rule; ready_on_device() is false there).
  virtual void set_step_values(double lr, int delay);
  virtual void step_on_device();
  virtual bool ready_on_device() const { return false; }

  // The rule's state tensors of parameter i, named for messages ("momentum buffer"); undefined
  // before its first update.
  virtual std::vector<std::pair<std::string, torch::Tensor>> state_of(size_t i) const = 0;

  // Saves/loads the rule's state and the recorded norms ("sgd.norm.<i>", the name they have
  // had since SGD was the only rule).
  virtual void save(torch::serialize::OutputArchive& archive) const;
  virtual void load(torch::serialize::InputArchive& archive);

  const UpdateOptions& options() const { return options_; }
  const std::vector<torch::Tensor>& params() const { return params_; }

 protected:
  // params: the tensors to update (a partition's parameters); those also in `scale_invariant`
  // (same tensor) have their present norm recorded.
  Optimizer(std::vector<torch::Tensor> params, UpdateOptions options, const std::vector<torch::Tensor>& scale_invariant);
  // After parameter i's update: fixed_weight_norm's projection.
  void keep_norm(size_t i, torch::Tensor& weight) const;
  // reset_norms() multiplied parameter i by c: its state follows.
  virtual void rescale_state(size_t i, const torch::Tensor& c) = 0;

  std::vector<torch::Tensor> params_;
  UpdateOptions options_;

 private:
  std::vector<torch::Tensor> initial_norms_;  // per parameter: 0-dim recorded norm, or undefined
};

// The rule options.kind() names. Throws UsageError for options the rule refuses.
std::unique_ptr<Optimizer> make_optimizer(std::vector<torch::Tensor> params, const UpdateOptions& options,
                                          const std::vector<torch::Tensor>& scale_invariant = {});

}  // namespace stalepipe::optim
