// AdamW (Loshchilov & Hutter, "Decoupled Weight Decay Regularization", ICLR 2019), the formula
// of torch::optim::AdamW exactly, per parameter with a gradient:
//   w   = w * (1 - lr * weight_decay)                         (decoupled decay)
//   m   = beta1 * m + (1 - beta1) * g
//   v   = beta2 * v + (1 - beta2) * g * g
//   w   = w - lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
// t counting that parameter's updates; bit-identical to torch::optim::AdamW for the same
// inputs (tests/unit/optim). Of the mitigations, delay-aware lr and fixed weight norms apply
// (optim/optimizer.h); the others act on SGD's momentum and are refused.
#pragma once

#include <cstdint>
#include <vector>

#include "stalepipe/optim/optimizer.h"

namespace stalepipe::optim {

class AdamW : public Optimizer {
 public:
  // Throws UsageError for betas outside [0, 1), eps <= 0, weight_decay < 0 or a mitigation of
  // SGD's momentum.
  AdamW(std::vector<torch::Tensor> params, UpdateOptions options, const std::vector<torch::Tensor>& scale_invariant = {});

  void step(double lr, int delay = 0) override;
  std::vector<std::pair<std::string, torch::Tensor>> state_of(size_t i) const override;
  // "adamw.step.<i>", "adamw.exp_avg.<i>", "adamw.exp_avg_sq.<i>" and the recorded norms.
  void save(torch::serialize::OutputArchive& archive) const override;
  void load(torch::serialize::InputArchive& archive) override;

 private:
  void rescale_state(size_t i, const torch::Tensor& c) override;

  std::vector<int64_t> steps_;  // per parameter: updates applied
  std::vector<torch::Tensor> exp_avg_, exp_avg_sq_;
};

}  // namespace stalepipe::optim
