#include "stalepipe/optim/optimizer.h"

#include <cmath>

#include <c10/util/StringUtil.h>

#include "stalepipe/common/error.h"
#include "stalepipe/optim/adamw.h"
#include "stalepipe/optim/sgd.h"

namespace stalepipe::optim {

Optimizer::Optimizer(std::vector<torch::Tensor> params, UpdateOptions options,
                     const std::vector<torch::Tensor>& scale_invariant)
    : params_(std::move(params)), options_(options), initial_norms_(params_.size()) {
  SP_CHECK_ARG(options.weight_decay() >= 0, "optimizer: weight_decay must be >= 0, got ", options.weight_decay());
  SP_CHECK_ARG(options.delay_lr_anneal_steps() >= 0, "optimizer: delay_lr_anneal_steps must be >= 0, got ",
               options.delay_lr_anneal_steps());
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    for (const auto& w : scale_invariant) {
      if (w.is_same(params_[i])) initial_norms_[i] = params_[i].detach().norm().clone();
    }
  }
}

double Optimizer::effective_lr(double lr, int delay, int64_t step) const {
  if (!options_.delay_aware_lr() || delay <= 0) return lr;
  const double anneal = static_cast<double>(options_.delay_lr_anneal_steps());
  const double p = anneal > 0 ? 1.0 - std::min(static_cast<double>(step) / anneal, 1.0) : 1.0;
  return lr * std::pow(1.0 + delay, -p);
}

void Optimizer::zero_grad() {
  for (auto& p : params_) p.mutable_grad() = torch::Tensor();
}

void Optimizer::zero_grad_in_place() {
  torch::NoGradGuard no_grad;
  for (auto& p : params_) {
    if (p.grad().defined()) p.mutable_grad().zero_();
  }
}

int Optimizer::scale_invariant_count() const {
  int count = 0;
  for (const auto& norm : initial_norms_) count += norm.defined();
  return count;
}

void Optimizer::reset_norms() {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!initial_norms_[i].defined()) continue;
    const torch::Tensor c = initial_norms_[i] / params_[i].data().norm();
    params_[i].data().mul_(c);
    rescale_state(i, c);
  }
}

void Optimizer::keep_norm(size_t i, torch::Tensor& weight) const {
  if (options_.fixed_weight_norm() && initial_norms_[i].defined()) {
    weight.mul_(initial_norms_[i] / weight.norm());  // on the device: no sync with the host
  }
}

void Optimizer::extrapolate(int, double) {
  throw UsageError("weight prediction extrapolates along SGD's momentum; this optimizer has none");
}

namespace {

[[noreturn]] void refuse_graphed_update() {
  throw UsageError("CUDA graphs capture SGD's update only; train this optimizer without them");
}

}  // namespace

void Optimizer::set_step_values(double, int) { refuse_graphed_update(); }

void Optimizer::step_on_device() { refuse_graphed_update(); }

void Optimizer::save(torch::serialize::OutputArchive& archive) const {
  for (size_t i = 0; i < initial_norms_.size(); ++i) {
    if (initial_norms_[i].defined()) {
      archive.write("sgd.norm." + std::to_string(i), initial_norms_[i], /*is_buffer=*/true);
    }
  }
}

void Optimizer::load(torch::serialize::InputArchive& archive) {
  for (size_t i = 0; i < initial_norms_.size(); ++i) {
    // The recorded norm is the run's first, not the resumed weights'.
    torch::Tensor norm;
    if (initial_norms_[i].defined() && archive.try_read("sgd.norm." + std::to_string(i), norm, /*is_buffer=*/true)) {
      initial_norms_[i] = norm.to(params_[i].device());
    }
  }
}

std::string to_string(OptimizerKind kind) { return kind == OptimizerKind::kAdamW ? "adamw" : "sgd"; }

OptimizerKind optimizer_from_name(const std::string& name, const std::string& field) {
  if (name == "sgd") return OptimizerKind::kSgd;
  if (name == "adamw") return OptimizerKind::kAdamW;
  throw UsageError(c10::str(field, " '", name, "': not an optimizer; choose sgd or adamw"));
}

std::unique_ptr<Optimizer> make_optimizer(std::vector<torch::Tensor> params, const UpdateOptions& options,
                                          const std::vector<torch::Tensor>& scale_invariant) {
  if (options.kind() == OptimizerKind::kAdamW) return std::make_unique<AdamW>(std::move(params), options, scale_invariant);
  return std::make_unique<Sgd>(std::move(params), options, scale_invariant);
}

}  // namespace stalepipe::optim
