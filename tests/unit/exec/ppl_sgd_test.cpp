// PPL-SGD semantics on a model small enough to compute by hand: three scalar partitions
// h1 = w1 x, h2 = w2 h1, y = w3 h2, loss 0.5 (y - target)^2, plain SGD.
#include <map>

#include <gtest/gtest.h>
#include <torch/nn/modules/linear.h>

#include "stalepipe/exec/executor.h"

namespace stalepipe::exec {
namespace {

constexpr double kLr = 0.1;
const double kInitial[3] = {0.9, -1.1, 0.7};

double input_of(int64_t t) { return 1.0 + 0.25 * static_cast<double>(t % 3); }
double target_of(int64_t t) { return 0.5 - 0.3 * static_cast<double>(t % 2); }

// The update rule written out in doubles. `stash`: the backward uses the weights its forward
// used (PipeDream); otherwise the current weights (this paper).
std::vector<double> by_hand(const schedule::Schedule& s, bool stash) {
  using Key = std::pair<int, int64_t>;  // (worker, step)
  std::vector<double> w(kInitial, kInitial + 3);
  std::map<Key, double> saved_input, forward_weight, activation, grad_output, weight_grad;
  for (const auto& g : schedule::global_order(s)) {
    const int k = g.worker;
    const Key key{k, g.op.step};
    switch (g.op.kind) {
      case schedule::OpKind::kForward: {
        const double in = k == 0 ? input_of(g.op.step) : activation[{k - 1, g.op.step}];
        saved_input[key] = in;
        forward_weight[key] = w[k];
        activation[key] = w[k] * in;
        break;
      }
      case schedule::OpKind::kBackward: {
        const double upstream = k == 2 ? activation[key] - target_of(g.op.step) : grad_output[key];
        const double weight = stash ? forward_weight[key] : w[k];
        if (k > 0) grad_output[{k - 1, g.op.step}] = upstream * weight;
        weight_grad[key] = upstream * saved_input[key];
        break;
      }
      case schedule::OpKind::kUpdate:
        w[k] -= kLr * weight_grad[key];
        break;
    }
  }
  return w;
}

std::vector<double> by_engine(const schedule::Schedule& s, const std::string& executor) {
  std::vector<std::unique_ptr<Stage>> stages;
  std::vector<Stage*> ptrs;
  for (int k = 0; k < 3; ++k) {
    torch::nn::Linear linear(torch::nn::LinearOptions(1, 1).bias(false));
    linear->to(torch::kDouble);
    {
      torch::NoGradGuard g;
      linear->weight.fill_(kInitial[k]);
    }
    torch::nn::Sequential seq;
    seq->push_back(linear);
    auto squared = [](const torch::Tensor& y, const torch::Tensor& target) {
      return 0.5 * (y - target).pow(2).sum();
    };
    stages.push_back(std::make_unique<Stage>(k, 3, seq, torch::kCPU,
                                             optim::SgdOptions().momentum(0).weight_decay(0), squared));
    ptrs.push_back(stages.back().get());
  }
  SegmentContext context;
  context.input = [](int64_t t) {
    return Input{torch::full({1, 1}, input_of(t), torch::kDouble),
                 torch::full({1, 1}, target_of(t), torch::kDouble)};
  };
  context.lr = [](int64_t) { return kLr; };
  make_executor(executor)->run(s, ptrs, context);
  std::vector<double> w;
  for (auto* stage : ptrs) w.push_back(stage->module()->parameters()[0].item<double>());
  return w;
}

TEST(PplSgd, EngineMatchesTheUpdateRuleComputedByHand) {
  const auto s = schedule::make_stale(3, 0, 9);
  const auto expected = by_hand(s, /*stash=*/false);
  for (const std::string executor : {"emulated", "threads"}) {
    const auto w = by_engine(s, executor);
    for (int k = 0; k < 3; ++k) {
      EXPECT_NEAR(w[k], expected[k], 1e-12) << executor << " partition " << k + 1;
    }
  }
}

TEST(PplSgd, BackwardUsesCurrentWeightsNotTheForwardsOnes) {
  // Guards the test above against being blind: with weight stashing the result differs.
  const auto s = schedule::make_stale(3, 0, 9);
  const auto ours = by_hand(s, false);
  const auto stashed = by_hand(s, true);
  EXPECT_GT(std::abs(ours[0] - stashed[0]), 1e-6);
  const auto w = by_engine(s, "emulated");
  EXPECT_GT(std::abs(w[0] - stashed[0]), 1e-6);
}

TEST(PplSgd, SequentialScheduleIsPlainSgd) {
  // With no pipelining, the hand rule reduces to SGD on the product w1 w2 w3.
  const auto s = schedule::make_sequential(3, 0, 5);
  std::vector<double> w(kInitial, kInitial + 3);
  for (int64_t t = 0; t < 5; ++t) {
    const double x = input_of(t);
    const double y = w[0] * w[1] * w[2] * x;
    const double g = y - target_of(t);
    const std::vector<double> grad = {g * w[2] * w[1] * x, g * w[2] * w[0] * x, g * w[1] * w[0] * x};
    for (int k = 0; k < 3; ++k) w[k] -= kLr * grad[k];
  }
  const auto engine = by_engine(s, "emulated");
  for (int k = 0; k < 3; ++k) EXPECT_NEAR(engine[k], w[k], 1e-12);
}

}  // namespace
}  // namespace stalepipe::exec
