#include "stalepipe/optim/sgd.h"

#include <cmath>

#include <torch/serialize.h>

#include "stalepipe/common/error.h"

namespace stalepipe::optim {

Sgd::Sgd(std::vector<torch::Tensor> params, SgdOptions options,
         const std::vector<torch::Tensor>& scale_invariant)
    : params_(std::move(params)), momentum_buffers_(params_.size()),
      initial_norms_(params_.size()), options_(options) {
  SP_CHECK_ARG(options.momentum() >= 0, "sgd: momentum must be >= 0, got ", options.momentum());
  SP_CHECK_ARG(options.weight_decay() >= 0, "sgd: weight_decay must be >= 0, got ",
               options.weight_decay());
  SP_CHECK_ARG(!options.spike_compensation() || (!options.nesterov() && options.momentum() < 1),
               "sgd: spike_compensation needs plain momentum below 1 (not nesterov), got momentum ",
               options.momentum());
  SP_CHECK_ARG(options.delay_lr_anneal_steps() >= 0, "sgd: delay_lr_anneal_steps must be >= 0, got ",
               options.delay_lr_anneal_steps());
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    for (const auto& w : scale_invariant) {
      if (w.is_same(params_[i])) initial_norms_[i] = params_[i].detach().norm().clone();
    }
  }
}

int Sgd::scale_invariant_count() const {
  int count = 0;
  for (const auto& norm : initial_norms_) count += norm.defined();
  return count;
}

void Sgd::reset_norms() {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!initial_norms_[i].defined()) continue;
    const torch::Tensor c = initial_norms_[i] / params_[i].data().norm();
    params_[i].data().mul_(c);
    if (momentum_buffers_[i].defined()) momentum_buffers_[i].div_(c);
  }
}

double Sgd::effective_lr(double lr, int delay, int64_t step) const {
  if (!options_.delay_aware_lr() || delay <= 0) return lr;
  const double anneal = static_cast<double>(options_.delay_lr_anneal_steps());
  const double p = anneal > 0 ? 1.0 - std::min(static_cast<double>(step) / anneal, 1.0) : 1.0;
  return lr * std::pow(1.0 + delay, -p);
}

void Sgd::extrapolate(int steps, double lr) {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (momentum_buffers_[i].defined()) params_[i].data().add_(momentum_buffers_[i], -lr * steps);
  }
}

std::pair<double, double> Sgd::spike_factors(int delay) const {
  const bool compensate = options_.spike_compensation() && delay > 0 && options_.momentum() != 0;
  const double m = options_.momentum();
  const double a = compensate ? std::pow(m, delay) : 1.0;
  const double b = compensate ? (1 - options_.dampening()) * (1 - a) / (1 - m) : 0.0;
  return {a, b};
}

template <typename Combine, typename Descend>
void Sgd::update_parameter(size_t i, const Combine& combine, const Descend& descend) {
  const torch::Tensor& grad = params_[i].grad();
  if (!grad.defined()) return;
  // data(): same storage, own version counter (see the header).
  torch::Tensor weight = params_[i].data();
  torch::Tensor d_p = grad.data();
  if (options_.weight_decay() != 0) {
    d_p = d_p.add(weight, options_.weight_decay());
  }
  if (options_.momentum() != 0) {
    torch::Tensor& buf = momentum_buffers_[i];
    if (!buf.defined()) {
      buf = torch::clone(d_p).detach();
    } else {
      buf.mul_(options_.momentum()).add_(d_p, 1 - options_.dampening());
    }
    d_p = combine(buf, d_p);
  }
  descend(weight, d_p);
  if (options_.fixed_weight_norm() && initial_norms_[i].defined()) {
    weight.mul_(initial_norms_[i] / weight.norm());  // on the device: no sync with the host
  }
}

void Sgd::step(double lr, int delay) {
  torch::NoGradGuard no_grad;
  const bool compensate = options_.spike_compensation() && delay > 0 && options_.momentum() != 0;
  // Plain variables: C++17 lambdas cannot capture structured bindings (clang refuses).
  const std::pair<double, double> factors = spike_factors(delay);
  const double a = factors.first, b = factors.second;
  const auto combine = [&](const torch::Tensor& buf, const torch::Tensor& d_p) -> torch::Tensor {
    if (compensate) return buf.mul(a).add_(d_p, b);
    return options_.nesterov() ? d_p.add(buf, options_.momentum()) : buf;
  };
  const auto descend = [&](torch::Tensor& weight, const torch::Tensor& d_p) { weight.add_(d_p, -lr); };
  for (size_t i = 0; i < params_.size(); ++i) update_parameter(i, combine, descend);
}

void Sgd::set_step_values(double lr, int delay) {
  if (params_.empty()) return;
  torch::NoGradGuard no_grad;
  if (!neg_lr_.defined()) {
    const auto on = params_.front().options();
    neg_lr_ = torch::zeros({}, on);
    spike_a_ = torch::zeros({}, on);
    spike_b_ = torch::zeros({}, on);
  }
  const auto [a, b] = spike_factors(delay);
  // Queued on the current stream, before the replay that reads them.
  neg_lr_.fill_(-lr);
  spike_a_.fill_(a);
  spike_b_.fill_(b);
}

bool Sgd::ready_on_device() const {
  if (options_.momentum() == 0) return true;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (params_[i].grad().defined() && !momentum_buffers_[i].defined()) return false;
  }
  return true;
}

void Sgd::step_on_device() {
  if (params_.empty()) return;
  SP_CHECK(neg_lr_.defined() && ready_on_device(), "sgd: step_on_device() needs set_step_values() and the momentum "
           "buffers of one step() first");
  torch::NoGradGuard no_grad;
  const bool compensate = options_.spike_compensation() && options_.momentum() != 0;
  const auto combine = [&](const torch::Tensor& buf, const torch::Tensor& d_p) -> torch::Tensor {
    // addcmul_(x, t): x * t added with one rounding, as add_(x, alpha) adds alpha * x.
    if (compensate) return buf.mul(spike_a_).addcmul_(d_p, spike_b_);
    return options_.nesterov() ? d_p.add(buf, options_.momentum()) : buf;
  };
  const auto descend = [&](torch::Tensor& weight, const torch::Tensor& d_p) { weight.addcmul_(d_p, neg_lr_); };
  for (size_t i = 0; i < params_.size(); ++i) update_parameter(i, combine, descend);
}

void Sgd::zero_grad() {
  for (auto& p : params_) {
    p.mutable_grad() = torch::Tensor();
  }
}

void Sgd::zero_grad_in_place() {
  torch::NoGradGuard no_grad;
  for (auto& p : params_) {
    if (p.grad().defined()) p.mutable_grad().zero_();
  }
}

void Sgd::save(torch::serialize::OutputArchive& archive) const {
  for (size_t i = 0; i < momentum_buffers_.size(); ++i) {
    if (momentum_buffers_[i].defined()) {
      archive.write("sgd.momentum." + std::to_string(i), momentum_buffers_[i], /*is_buffer=*/true);
    }
  }
  for (size_t i = 0; i < initial_norms_.size(); ++i) {
    if (initial_norms_[i].defined()) {
      archive.write("sgd.norm." + std::to_string(i), initial_norms_[i], /*is_buffer=*/true);
    }
  }
  archive.write("sgd.count", torch::tensor(static_cast<int64_t>(momentum_buffers_.size())),
                /*is_buffer=*/true);
}

void Sgd::load(torch::serialize::InputArchive& archive) {
  torch::Tensor count;
  archive.read("sgd.count", count, /*is_buffer=*/true);
  SP_CHECK(count.item<int64_t>() == static_cast<int64_t>(params_.size()),
           "checkpoint optimizer state has ", count.item<int64_t>(), " parameters, expected ",
           params_.size());
  for (size_t i = 0; i < momentum_buffers_.size(); ++i) {
    torch::Tensor buf;
    if (archive.try_read("sgd.momentum." + std::to_string(i), buf, /*is_buffer=*/true)) {
      momentum_buffers_[i] = buf.to(params_[i].device()).detach();
    } else {
      momentum_buffers_[i] = torch::Tensor();
    }
    // The recorded norm is the run's first, not the resumed weights'.
    torch::Tensor norm;
    if (initial_norms_[i].defined() &&
        archive.try_read("sgd.norm." + std::to_string(i), norm, /*is_buffer=*/true)) {
      initial_norms_[i] = norm.to(params_[i].device());
    }
  }
}

}  // namespace stalepipe::optim
