#include "stalepipe/exec/stage.h"

#include <torch/autograd.h>
#include <torch/nn/functional/loss.h>

#include "stalepipe/common/error.h"

namespace stalepipe::exec {

torch::Tensor cross_entropy_loss(const torch::Tensor& output, const torch::Tensor& target) {
  return torch::nn::functional::cross_entropy(output, target);
}

Stage::Stage(int index, int num_stages, torch::nn::Sequential module, torch::Device device,
             optim::SgdOptions sgd, LossFn loss)
    : index_(index), num_stages_(num_stages), module_(std::move(module)), device_(device),
      loss_(std::move(loss)) {
  module_->to(device_);
  module_->train();
  optimizer_ = std::make_unique<optim::Sgd>(module_->parameters(), sgd);
}

torch::Tensor Stage::prepare_input(const torch::Tensor& input) const {
  torch::Tensor x = input.to(device_);
  if (is_first()) return x;
  // A leaf of this stage's graph, so backward() yields the gradient to send upstream.
  return x.detach().requires_grad_(true);
}

torch::Tensor Stage::forward(int64_t step, const torch::Tensor& input) {
  SP_CHECK(!is_last(), "partition ", index_ + 1, ": forward() called on the last partition");
  SP_CHECK(!in_flight_.count(step), "partition ", index_ + 1, ", mini-batch ", step,
           ": forward twice without backward");
  Pending p;
  p.input = prepare_input(input);
  p.output = module_->forward(p.input);
  torch::Tensor register_value = p.output.detach();
  in_flight_.emplace(step, std::move(p));
  return register_value;
}

StepLoss Stage::forward_loss(int64_t step, const torch::Tensor& input,
                             const torch::Tensor& labels) {
  SP_CHECK(is_last(), "partition ", index_ + 1, ": forward_loss() on a non-last partition");
  SP_CHECK(!in_flight_.count(step), "partition ", index_ + 1, ", mini-batch ", step,
           ": forward twice without backward");
  Pending p;
  p.input = prepare_input(input);
  torch::Tensor logits = module_->forward(p.input);
  const torch::Tensor y = labels.to(device_);
  p.output = loss_(logits, y);
  StepLoss result;
  result.loss = p.output.item<double>();
  if (logits.dim() == 2 && y.dim() == 1 && y.scalar_type() == torch::kLong) {
    result.correct = logits.detach().argmax(1).eq(y).sum().item<int64_t>();
  }
  result.samples = y.size(0);
  in_flight_.emplace(step, std::move(p));
  return result;
}

Stage::Pending& Stage::pending(int64_t step, const char* what) {
  auto it = in_flight_.find(step);
  SP_CHECK(it != in_flight_.end(), "partition ", index_ + 1, ", mini-batch ", step, ": ", what,
           " without a forward in flight");
  return it->second;
}

torch::Tensor Stage::backward(int64_t step, const torch::Tensor& grad_output) {
  Pending& p = pending(step, "backward");
  if (is_last()) {
    p.output.backward();
  } else {
    SP_CHECK(grad_output.defined(), "partition ", index_ + 1, ", mini-batch ", step,
             ": backward needs the gradient of the partition's output");
    p.output.backward(grad_output.to(device_));
  }
  torch::Tensor grad_input = is_first() ? torch::Tensor() : p.input.grad();
  in_flight_.erase(step);
  return grad_input;
}

void Stage::update(double lr) {
  optimizer_->step(lr);
  optimizer_->zero_grad();
}

torch::Tensor Stage::predict(const torch::Tensor& input) {
  torch::NoGradGuard no_grad;
  module_->eval();
  torch::Tensor out = module_->forward(input.to(device_));
  module_->train();
  return out;
}

}  // namespace stalepipe::exec
