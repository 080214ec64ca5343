// Stochastic gradient descent with momentum and weight decay, PyTorch's formula exactly:
//   g   = grad + weight_decay * w
//   buf = g                                  on the first step,
//   buf = momentum * buf + (1 - dampening) * g   afterwards
//   g   = g + momentum * buf   (nesterov)   or   g = buf
//   w   = w - lr * g
// and bit-identical to torch::optim::SGD for the same inputs (tests/unit/optim). Why not
// torch::optim::SGD itself: optim/optimizer.h.
//
// The mitigations that act on the momentum (docs/design.md, "Mitigations"), for a gradient of
// delay D (optim/optimizer.h has the others); with D = 0 each is the plain update:
//   spike_compensation (Kosson et al. 2021): w = w - lr * (a * buf + b * g) with a = m^D,
//       b = (1 - dampening)(1 - m^D)/(1 - m), m the momentum: the gradient's total impulse
//       on the weights stays that of undelayed momentum SGD, but arrives D steps earlier;
//   weight_prediction (SpecTrain, Chen et al. 2018; Kosson et al.'s LWP): the forward of a
//       partition that lacks D updates uses w - D * lr * buf (see extrapolate());
//   delay_nesterov (after Ajanthan et al., "Nesterov Method for Asynchronous Pipeline
//       Parallel Optimization", ICML 2025): Nesterov's look-ahead moved by the delay, with
//       one weight copy. The stored weights are the look-ahead point u = w - lr * c * buf of
//       heavy-ball iterates w, c = m + D, so that a forward that lacks D updates computes its
//       gradient where Nesterov's method would evaluate it now (m steps ahead of the current
//       iterate). In u the update is u = u - lr * (a * buf + b * g) with a = 1 + c - c / m and
//       b = c / m (buf updated first); with D = 0 that is Nesterov's g + m * buf, and for every
//       D a gradient's total impulse is heavy-ball's 1 / (1 - m). docs/design.md derives it.
//
// Threading: one instance per partition, used by one thread at a time.
#pragma once

#include <utility>
#include <vector>

#include "stalepipe/optim/optimizer.h"

namespace stalepipe::optim {

class Sgd : public Optimizer {
 public:
  // Throws UsageError for a negative momentum, or a mitigation the momentum cannot carry.
  Sgd(std::vector<torch::Tensor> params, UpdateOptions options, const std::vector<torch::Tensor>& scale_invariant = {});

  void step(double lr, int delay = 0) override;

  // Moves the weights `steps` updates ahead along the momentum: w -= steps * lr * buf, in
  // place, for parameters that have a momentum buffer. The caller restores them.
  void extrapolate(int steps, double lr) override;

  // The update of step() with its per-step values (lr, and the momentum's a and b, which
  // depend on the delay) read from tensors on the parameters' device, so that a CUDA graph
  // that captured step_on_device() applies the values set_step_values() wrote before its
  // replay (docs/design.md, "CUDA graphs"). The formula and the roundings are step()'s
  // (addcmul(x, t) where step() has add(x, alpha): bit for bit on the CPU, tests/unit/optim).
  // With spike compensation it always takes the compensating branch, with a = 1
  // and b = 0 where the delay is 0 (buf * 1 + g * 0 = buf exactly), so that the captured
  // work does not depend on the delay. Every parameter with a gradient needs its momentum
  // buffer already (ready_on_device()): one step() makes them.
  void set_step_values(double lr, int delay) override;
  void step_on_device() override;
  bool ready_on_device() const override;

  // One per parameter; undefined until that parameter's first update.
  const std::vector<torch::Tensor>& momentum_buffers() const { return momentum_buffers_; }
  std::vector<std::pair<std::string, torch::Tensor>> state_of(size_t i) const override;

  // Saves/loads the momentum buffers under "sgd.momentum.<i>" (and which ones exist), and the
  // recorded norms.
  void save(torch::serialize::OutputArchive& archive) const override;
  void load(torch::serialize::InputArchive& archive) override;

 private:
  void rescale_state(size_t i, const torch::Tensor& c) override;
  // Whether the update is a * buf + b * g (spike compensation, the delay-corrected look-ahead)
  // for a gradient of this delay, and a and b.
  bool combines(int delay) const;
  std::pair<double, double> combine_factors(int delay) const;
  // One update of parameter i from its gradient, making its momentum buffer if it has none:
  // step() where step_grouped() cannot run yet.
  void update_parameter(size_t i, double lr, bool combined, double a, double b);
  // Whether some delay's update is a * buf + b * g: step_on_device() then always computes it,
  // so that the captured work does not depend on the delay.
  bool combines_always() const;
  // The parameters with a gradient, each operation once for all of them (multi-tensor
  // foreach operations): their weights, d_p = grad + weight_decay * w, and their momentum
  // buffers updated. False (nothing done) while one of them lacks its buffer (the first step).
  struct Group {
    std::vector<size_t> index;
    std::vector<torch::Tensor> weights, d_p, bufs;
  };
  bool accumulate_grouped(Group& group);
  // An update's direction without the combination: g + m * buf (Nesterov), buf, or g
  // without momentum.
  std::vector<torch::Tensor> direction_grouped(Group& group) const;
  // step() for every parameter at once; false (nothing done) before every buffer exists.
  bool step_grouped(double lr, bool combined, double a, double b);

  std::vector<torch::Tensor> momentum_buffers_;
  // step_on_device()'s values: -lr, a, b (0-dim, on the parameters' device).
  torch::Tensor neg_lr_, factor_a_, factor_b_;
};

}  // namespace stalepipe::optim
