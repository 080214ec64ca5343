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
// Staleness mitigations (docs/design.md, "Mitigations"). A partition's gradient of mini-batch
// t has delay D when its forward computed with weights that lacked D updates that are applied
// by the time the gradient is (D = d_k in PPL-SGD's steady state). With D = 0 every mitigation
// reduces to the plain update above.
//   delay_aware_lr (after PipeMare, Yang et al. 2021): lr_D = lr * (1 + D)^-p(t), with
//       p(t) = 1 - min(t / delay_lr_anneal_steps, 1) (p = 1 throughout when that is 0);
//   spike_compensation (Kosson et al. 2021): w = w - lr * (a * buf + b * g) with a = m^D,
//       b = (1 - dampening)(1 - m^D)/(1 - m), m the momentum: the gradient's total impulse
//       on the weights stays that of undelayed momentum SGD, but arrives D steps earlier;
//   weight_prediction (SpecTrain, Chen et al. 2018; Kosson et al.'s LWP): the forward of a
//       partition that lacks D updates uses w - D * lr * buf (see extrapolate()).
//   fixed_weight_norm (projected SGD on the sphere; the norm constraint that Kosson et al.'s
//       "Rotational Equilibrium", ICML 2024, use to balance effective updates): after each
//       update, every scale-invariant weight W (models/scale_invariance.h) is rescaled to the
//       norm it had when the optimizer was built, W = W * |W_0| / |W|. For those weights the
//       network computes the same function, but the effective learning rate ~ lr / |W|^2
//       stays what it was; stale gradients inflate |W| (measured in docs/results.md, where
//       keeping it fixed turns out not to help a stale ResNet-20);
//   reset_norms() does the same rescaling once, on demand (the hybrid scheme's switch).
//
// Threading: one instance per partition, used by one thread at a time.
#pragma once

#include <utility>
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
  // Mitigations (see above).
  TORCH_ARG(bool, delay_aware_lr) = false;
  TORCH_ARG(int64_t, delay_lr_anneal_steps) = 0;
  TORCH_ARG(bool, spike_compensation) = false;
  TORCH_ARG(bool, weight_prediction) = false;
  TORCH_ARG(bool, fixed_weight_norm) = false;
};

class Sgd {
 public:
  // params: the tensors to update (a partition's parameters); gradients are read from
  // param.grad(); parameters without a gradient are skipped, as in PyTorch. The params that
  // are also in `scale_invariant` (same tensor) have their present norm recorded: with
  // fixed_weight_norm they keep it, and reset_norms() restores it.
  Sgd(std::vector<torch::Tensor> params, SgdOptions options,
      const std::vector<torch::Tensor>& scale_invariant = {});

  // Applies one update with learning rate lr, in place, without touching version counters.
  // `delay` is the gradient's delay D (spike compensation); lr is used as given (pass it
  // through effective_lr() first for the delay-aware rate).
  void step(double lr, int delay = 0);

  // The learning rate for a gradient of delay D at global step t: lr itself unless
  // delay_aware_lr is set.
  double effective_lr(double lr, int delay, int64_t step) const;

  // Moves the weights `steps` updates ahead along the momentum: w -= steps * lr * buf, in
  // place, for parameters that have a momentum buffer. The caller restores them.
  void extrapolate(int steps, double lr);

  // Drops the gradients (sets them undefined, so the next backward writes fresh ones).
  void zero_grad();
  // Zeroes the defined gradients where they are: their tensors stay (a captured CUDA graph
  // accumulates into them); undefined ones stay undefined.
  void zero_grad_in_place();

  // The update of step() with its per-step values (lr, and spike compensation's a and b, which
  // depend on the delay) read from tensors on the parameters' device, so that a CUDA graph
  // that captured step_on_device() applies the values set_step_values() wrote before its
  // replay (docs/design.md, "CUDA graphs"). The formula and the roundings are step()'s
  // (addcmul(x, t) where step() has add(x, alpha): bit for bit on the CPU, tests/unit/optim).
  // With spike compensation it always takes the compensating branch, with a = 1
  // and b = 0 where the delay is 0 (buf * 1 + g * 0 = buf exactly), so that the captured
  // work does not depend on the delay. Every parameter with a gradient needs its momentum
  // buffer already (ready_on_device()): one step() makes them.
  void set_step_values(double lr, int delay);
  void step_on_device();
  bool ready_on_device() const;

  const SgdOptions& options() const { return options_; }
  const std::vector<torch::Tensor>& params() const { return params_; }
  // One per parameter; undefined until that parameter's first update.
  const std::vector<torch::Tensor>& momentum_buffers() const { return momentum_buffers_; }
  // How many parameters are scale-invariant (have a recorded norm).
  int scale_invariant_count() const;

  // Rescales each scale-invariant weight to its recorded norm, w *= c with c = |w_0| / |w|,
  // and its momentum buffer by 1/c: the gradient at c w is g / c, so the buffer stays in the
  // units of the gradients to come. The network computes the same function in training mode.
  void reset_norms();

  // Saves/loads the momentum buffers under "sgd.momentum.<i>" (and which ones exist), and the
  // recorded norms under "sgd.norm.<i>".
  void save(torch::serialize::OutputArchive& archive) const;
  void load(torch::serialize::InputArchive& archive);

 private:
  std::vector<torch::Tensor> params_;
  std::vector<torch::Tensor> momentum_buffers_;
  std::vector<torch::Tensor> initial_norms_;  // per parameter: 0-dim recorded norm, or undefined
  SgdOptions options_;
  // step_on_device()'s values: -lr, a, b (0-dim, on the parameters' device).
  torch::Tensor neg_lr_, spike_a_, spike_b_;
  // Spike compensation's factors for a delay.
  std::pair<double, double> spike_factors(int delay) const;
  // One update of parameter i from its gradient: step()'s and step_on_device()'s shared part,
  // with the momentum combination and the descent given as functions.
  template <typename Combine, typename Descend>
  void update_parameter(size_t i, const Combine& combine, const Descend& descend);
};

}  // namespace stalepipe::optim
