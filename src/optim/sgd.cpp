#include "stalepipe/optim/sgd.h"

#include <cmath>

#include <torch/serialize.h>

#include "stalepipe/common/error.h"

namespace stalepipe::optim {

Sgd::Sgd(std::vector<torch::Tensor> params, UpdateOptions options, const std::vector<torch::Tensor>& scale_invariant)
    : Optimizer(std::move(params), options, scale_invariant), momentum_buffers_(params_.size()) {
  const double m = options.momentum();
  SP_CHECK_ARG(m >= 0, "sgd: momentum must be >= 0, got ", m);
  SP_CHECK_ARG(!options.spike_compensation() || (!options.nesterov() && m < 1),
               "sgd: spike_compensation needs plain momentum below 1 (not nesterov), got momentum ", m);
  SP_CHECK_ARG(!options.delay_nesterov() || (m > 0 && m < 1 && options.dampening() == 0),
               "sgd: delay_nesterov needs a momentum between 0 and 1 without dampening, got momentum ", m,
               ", dampening ", options.dampening());
  SP_CHECK_ARG(!options.delay_nesterov() || (!options.spike_compensation() && !options.weight_prediction()),
               "sgd: delay_nesterov moves the look-ahead itself; it takes neither spike_compensation nor "
               "weight_prediction");
}

void Sgd::extrapolate(int steps, double lr) {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (momentum_buffers_[i].defined()) params_[i].data().add_(momentum_buffers_[i], -lr * steps);
  }
}

bool Sgd::combines_always() const {
  return options_.delay_nesterov() || (options_.spike_compensation() && options_.momentum() != 0);
}

bool Sgd::combines(int delay) const {
  // The look-ahead at every delay, so that graphs and eager agree; spike compensation where late.
  return combines_always() && (options_.delay_nesterov() || delay > 0);
}

std::pair<double, double> Sgd::combine_factors(int delay) const {
  const double m = options_.momentum();
  if (options_.delay_nesterov()) {
    const double c = m + std::max(delay, 0);
    return {1 + c - c / m, c / m};
  }
  if (!combines(delay)) return {1.0, 0.0};
  const double a = std::pow(m, delay);
  return {a, (1 - options_.dampening()) * (1 - a) / (1 - m)};
}

void Sgd::update_parameter(size_t i, double lr, bool combined, double a, double b) {
  const torch::Tensor& grad = params_[i].grad();
  if (!grad.defined()) return;
  // data(): same storage, own version counter (optim/optimizer.h).
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
    if (combined) {
      d_p = buf.mul(a).add_(d_p, b);
    } else {
      d_p = options_.nesterov() ? d_p.add(buf, options_.momentum()) : buf;
    }
  }
  weight.add_(d_p, -lr);
  keep_norm(i, weight);
}

void Sgd::step(double lr, int delay) {
  torch::NoGradGuard no_grad;
  const bool combined = combines(delay);
  const auto [a, b] = combine_factors(delay);
  if (step_grouped(lr, combined, a, b)) return;
  // The first step (or one that starts a weight's momentum): one weight at a time.
  for (size_t i = 0; i < params_.size(); ++i) update_parameter(i, lr, combined, a, b);
}

// update_parameter's arithmetic, each operation once for all the weights: on a GPU a few
// multi-tensor kernels instead of one per weight tensor (ResNet-56 has 167), as PyTorch's SGD
// does there; on the CPU the foreach operations run tensor by tensor, the same bits.
bool Sgd::accumulate_grouped(Group& group) {
  const double m = options_.momentum();
  std::vector<torch::Tensor> grads;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!params_[i].grad().defined()) continue;
    if (m != 0 && !momentum_buffers_[i].defined()) return false;  // the first step makes them
    group.index.push_back(i);
    group.weights.push_back(params_[i].data());
    grads.push_back(params_[i].grad().data());
    if (m != 0) group.bufs.push_back(momentum_buffers_[i]);
  }
  if (group.index.empty()) return true;
  group.d_p = options_.weight_decay() != 0 ? at::_foreach_add(grads, group.weights, options_.weight_decay())
                                           : std::move(grads);
  if (m != 0) {
    at::_foreach_mul_(group.bufs, m);
    at::_foreach_add_(group.bufs, group.d_p, 1 - options_.dampening());
  }
  return true;
}

std::vector<torch::Tensor> Sgd::direction_grouped(Group& group) const {
  const double m = options_.momentum();
  if (m == 0) return std::move(group.d_p);
  return options_.nesterov() ? at::_foreach_add(group.d_p, group.bufs, m) : group.bufs;
}

bool Sgd::step_grouped(double lr, bool combined, double a, double b) {
  Group group;
  if (!accumulate_grouped(group)) return false;
  if (group.index.empty()) return true;
  std::vector<torch::Tensor> d_p;
  if (combined) {
    d_p = at::_foreach_mul(group.bufs, a);
    at::_foreach_add_(d_p, group.d_p, b);
  } else {
    d_p = direction_grouped(group);
  }
  at::_foreach_add_(group.weights, d_p, -lr);
  for (size_t k = 0; k < group.index.size(); ++k) keep_norm(group.index[k], group.weights[k]);
  return true;
}

void Sgd::set_step_values(double lr, int delay) {
  if (params_.empty()) return;
  torch::NoGradGuard no_grad;
  if (!neg_lr_.defined()) {
    const auto on = params_.front().options();
    neg_lr_ = torch::zeros({}, on);
    factor_a_ = torch::zeros({}, on);
    factor_b_ = torch::zeros({}, on);
  }
  const auto [a, b] = combine_factors(delay);
  // Queued on the current stream, before the replay that reads them.
  neg_lr_.fill_(-lr);
  factor_a_.fill_(a);
  factor_b_.fill_(b);
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
  torch::NoGradGuard no_grad;
  Group group;
  SP_CHECK(neg_lr_.defined() && accumulate_grouped(group), "sgd: step_on_device() needs set_step_values() and "
           "the momentum buffers of one step() first");
  if (group.index.empty()) return;
  // step_grouped()'s operations, with lr, a and b read from the device: addcmul_(x, t) adds
  // x * t with one rounding, as add_(x, alpha) adds alpha * x.
  const bool combined = combines_always();
  const std::vector<torch::Tensor> direction = combined ? std::vector<torch::Tensor>() : direction_grouped(group);
  for (size_t k = 0; k < group.index.size(); ++k) {
    const torch::Tensor d_p =
        combined ? group.bufs[k].mul(factor_a_).addcmul_(group.d_p[k], factor_b_) : direction[k];
    group.weights[k].addcmul_(d_p, neg_lr_);
    keep_norm(group.index[k], group.weights[k]);
  }
}

std::vector<std::pair<std::string, torch::Tensor>> Sgd::state_of(size_t i) const {
  return {{"momentum buffer", momentum_buffers_.at(i)}};
}

void Sgd::rescale_state(size_t i, const torch::Tensor& c) {
  // The gradient at c w is g / c: the buffer stays in the units of the gradients to come.
  if (momentum_buffers_[i].defined()) momentum_buffers_[i].div_(c);
}

void Sgd::save(torch::serialize::OutputArchive& archive) const {
  for (size_t i = 0; i < momentum_buffers_.size(); ++i) {
    if (momentum_buffers_[i].defined()) {
      archive.write("sgd.momentum." + std::to_string(i), momentum_buffers_[i], /*is_buffer=*/true);
    }
  }
  Optimizer::save(archive);
  archive.write("sgd.count", torch::tensor(static_cast<int64_t>(momentum_buffers_.size())),
                /*is_buffer=*/true);
}

void Sgd::load(torch::serialize::InputArchive& archive) {
  torch::Tensor count;
  SP_CHECK(archive.try_read("sgd.count", count, /*is_buffer=*/true),
           "the checkpoint holds no SGD state (written with another optimizer)");
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
  }
  Optimizer::load(archive);
}

}  // namespace stalepipe::optim
