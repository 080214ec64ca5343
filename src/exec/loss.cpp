#include "stalepipe/exec/loss.h"

#include <torch/nn/functional/loss.h>

#include "stalepipe/common/error.h"

namespace stalepipe::exec {
namespace F = torch::nn::functional;
namespace {

struct Named {
  const char* name;
  LossFn fn;
};

const std::vector<Named>& named_losses() {
  static const std::vector<Named> losses = {
      {"cross-entropy", cross_entropy_loss},
      {"nll", [](const torch::Tensor& o, const torch::Tensor& t) { return F::nll_loss(o, t); }},
      {"mse", [](const torch::Tensor& o, const torch::Tensor& t) { return F::mse_loss(o, t); }},
      {"l1", [](const torch::Tensor& o, const torch::Tensor& t) { return F::l1_loss(o, t); }},
      {"smooth-l1", [](const torch::Tensor& o, const torch::Tensor& t) { return F::smooth_l1_loss(o, t); }},
      {"bce-with-logits",
       [](const torch::Tensor& o, const torch::Tensor& t) { return F::binary_cross_entropy_with_logits(o, t); }},
  };
  return losses;
}

LossFn by_name(const std::string& name) {
  for (const Named& n : named_losses()) {
    if (name == n.name) return n.fn;
  }
  std::string names;
  for (const std::string& n : loss_names()) names += (names.empty() ? "" : ", ") + n;
  throw UsageError(c10::str("'", name, "' is not a loss stalepipe knows by name; expected ",
                            names, " (or set a function)"));
}

}  // namespace

torch::Tensor cross_entropy_loss(const torch::Tensor& output, const torch::Tensor& target) {
  return F::cross_entropy(output, target);
}

Loss::Loss() : Loss("cross-entropy") {}
Loss::Loss(const char* name) : Loss(std::string(name)) {}
Loss::Loss(const std::string& name) : fn_(by_name(name)), name_(name) {}
Loss::Loss(LossFn fn, std::string name) : fn_(std::move(fn)), name_(std::move(name)) {
  SP_CHECK_ARG(fn_, "loss: the loss function ", name_, " is empty");
}

std::vector<std::string> loss_names() {
  std::vector<std::string> names;
  for (const Named& n : named_losses()) names.emplace_back(n.name);
  return names;
}

Score top1_accuracy(const torch::Tensor& output, const torch::Tensor& target) {
  if (output.dim() < 2 || target.dim() != output.dim() - 1 || target.scalar_type() != torch::kLong) return {};
  for (int64_t d = 2; d < output.dim(); ++d) {
    if (output.size(d) != target.size(d - 1)) return {};
  }
  if (output.size(0) != target.size(0)) return {};
  return {0, target.numel(), output.argmax(1).eq(target).sum()};
}

int64_t correct_of(const Score& score) {
  return score.correct_count.defined() ? score.correct_count.item<int64_t>() : score.correct;
}

}  // namespace stalepipe::exec
