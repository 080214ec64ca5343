#include "stalepipe/optim/adamw.h"

#include <cmath>

#include "stalepipe/common/error.h"

namespace stalepipe::optim {

AdamW::AdamW(std::vector<torch::Tensor> params, UpdateOptions options, const std::vector<torch::Tensor>& scale_invariant)
    : Optimizer(std::move(params), options, scale_invariant), steps_(params_.size(), 0),
      exp_avg_(params_.size()), exp_avg_sq_(params_.size()) {
  SP_CHECK_ARG(options.beta1() >= 0 && options.beta1() < 1 && options.beta2() >= 0 && options.beta2() < 1,
               "adamw: betas must lie in [0, 1), got ", options.beta1(), ", ", options.beta2());
  SP_CHECK_ARG(options.eps() > 0, "adamw: eps must be > 0, got ", options.eps());
  SP_CHECK_ARG(!options.spike_compensation() && !options.weight_prediction() && !options.delay_nesterov(),
               "adamw: spike compensation, weight prediction and the delay-corrected look-ahead act on SGD's "
               "momentum; AdamW takes none of them");
}

void AdamW::step(double lr, int /*delay*/) {
  torch::NoGradGuard no_grad;
  const double beta1 = options_.beta1(), beta2 = options_.beta2();
  for (size_t i = 0; i < params_.size(); ++i) {
    const torch::Tensor& grad = params_[i].grad();
    if (!grad.defined()) continue;
    // data(): same storage, own version counter (optim/optimizer.h).
    torch::Tensor weight = params_[i].data();
    const torch::Tensor g = grad.data();
    if (options_.weight_decay() != 0) weight.mul_(1 - lr * options_.weight_decay());
    if (!exp_avg_[i].defined()) {
      exp_avg_[i] = torch::zeros_like(weight, torch::MemoryFormat::Preserve);
      exp_avg_sq_[i] = torch::zeros_like(weight, torch::MemoryFormat::Preserve);
    }
    const int64_t t = ++steps_[i];
    const double bias_correction1 = 1 - std::pow(beta1, static_cast<double>(t));
    const double bias_correction2 = 1 - std::pow(beta2, static_cast<double>(t));
    exp_avg_[i].mul_(beta1).add_(g, 1 - beta1);
    exp_avg_sq_[i].mul_(beta2).addcmul_(g, g, 1 - beta2);
    const torch::Tensor denom = (exp_avg_sq_[i].sqrt() / std::sqrt(bias_correction2)).add_(options_.eps());
    weight.addcdiv_(exp_avg_[i], denom, -lr / bias_correction1);
    keep_norm(i, weight);
  }
}

std::vector<std::pair<std::string, torch::Tensor>> AdamW::state_of(size_t i) const {
  return {{"first moment", exp_avg_.at(i)}, {"second moment", exp_avg_sq_.at(i)}};
}

void AdamW::rescale_state(size_t i, const torch::Tensor& c) {
  // The gradient at c w is g / c: the moments stay in the units of the gradients to come.
  if (exp_avg_[i].defined()) exp_avg_[i].div_(c);
  if (exp_avg_sq_[i].defined()) exp_avg_sq_[i].div_(c * c);
}

void AdamW::save(torch::serialize::OutputArchive& archive) const {
  Optimizer::save(archive);
  archive.write("adamw.count", torch::tensor(static_cast<int64_t>(params_.size())), /*is_buffer=*/true);
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!exp_avg_[i].defined()) continue;
    const std::string n = std::to_string(i);
    archive.write("adamw.step." + n, torch::tensor(steps_[i]), /*is_buffer=*/true);
    archive.write("adamw.exp_avg." + n, exp_avg_[i], /*is_buffer=*/true);
    archive.write("adamw.exp_avg_sq." + n, exp_avg_sq_[i], /*is_buffer=*/true);
  }
}

void AdamW::load(torch::serialize::InputArchive& archive) {
  Optimizer::load(archive);
  torch::Tensor count;
  SP_CHECK(archive.try_read("adamw.count", count, /*is_buffer=*/true),
           "the checkpoint holds no AdamW state (written with another optimizer)");
  SP_CHECK(count.item<int64_t>() == static_cast<int64_t>(params_.size()), "checkpoint optimizer state has ",
           count.item<int64_t>(), " parameters, expected ", params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    const std::string n = std::to_string(i);
    torch::Tensor step, m, v;
    if (archive.try_read("adamw.step." + n, step, /*is_buffer=*/true)) {
      archive.read("adamw.exp_avg." + n, m, /*is_buffer=*/true);
      archive.read("adamw.exp_avg_sq." + n, v, /*is_buffer=*/true);
      steps_[i] = step.item<int64_t>();
      exp_avg_[i] = m.to(params_[i].device()).detach();
      exp_avg_sq_[i] = v.to(params_[i].device()).detach();
    } else {
      steps_[i] = 0;
      exp_avg_[i] = exp_avg_sq_[i] = torch::Tensor();
    }
  }
}

}  // namespace stalepipe::optim
