// PPL-SGD semantics on a model small enough to compute by hand: three scalar partitions
// h1 = w1 x, h2 = w2 h1, y = w3 h2, loss 0.5 (y - target)^2, plain SGD.
#include <cmath>
#include <map>

#include <gtest/gtest.h>
#include <torch/nn/modules/linear.h>

#include "stalepipe/exec/executor.h"
#include "support/scalar_pipeline.h"

namespace stalepipe::exec {
namespace {

using test::scalar::input_of;
using test::scalar::kInitial;
using test::scalar::kLr;
using test::scalar::target_of;

// What the hand rule applies besides plain PPL-SGD.
struct Rule {
  bool stash = false;  // the backward uses the weights its forward used (PipeDream)
  double momentum = 0;
  bool delay_aware_lr = false;
  int64_t anneal_steps = 0;
  bool weight_prediction = false;
  bool spike_compensation = false;
  bool delay_nesterov = false;
  bool adamw = false;  // with beta1 0.9, beta2 0.99, eps 1e-8, no weight decay
};

// The update rule written out in doubles, following docs/design.md ("Mitigations") rather
// than the engine's code. D, a gradient's delay, is the number of earlier updates its forward
// lacked.
std::vector<double> by_hand(const schedule::Schedule& s, const Rule& rule) {
  using Key = std::pair<int, int64_t>;  // (worker, step)
  std::vector<double> w(kInitial, kInitial + 3), buf(3, 0.0), second(3, 0.0);
  std::vector<int64_t> adam_steps(3, 0);
  std::vector<bool> has_buf(3, false);
  std::vector<int64_t> last_update(3, s.first_step - 1);
  std::map<Key, double> saved_input, forward_weight, activation, grad_output, weight_grad;
  std::map<Key, int> delay;
  auto lr_for = [&](int d, int64_t t) {
    if (!rule.delay_aware_lr || d == 0) return kLr;
    const double p = rule.anneal_steps > 0 ? 1.0 - std::min(1.0, double(t) / rule.anneal_steps) : 1.0;
    return kLr * std::pow(1.0 + d, -p);
  };
  for (const auto& g : schedule::global_order(s)) {
    const int k = g.worker;
    const int64_t t = g.op.step;
    const Key key{k, t};
    switch (g.op.kind) {
      case schedule::OpKind::kForward: {
        const int d = static_cast<int>(t - 1 - last_update[k]);
        delay[key] = d;
        double used = w[k];
        if (rule.weight_prediction && d > 0 && has_buf[k]) used = w[k] - d * lr_for(d, t) * buf[k];
        const double in = k == 0 ? input_of(t) : activation[{k - 1, t}];
        saved_input[key] = in;
        forward_weight[key] = used;
        activation[key] = used * in;
        break;
      }
      case schedule::OpKind::kBackward: {
        const double upstream = k == 2 ? activation[key] - target_of(t) : grad_output[key];
        const double weight = rule.stash ? forward_weight[key] : w[k];
        if (k > 0) grad_output[{k - 1, t}] = upstream * weight;
        weight_grad[key] = upstream * saved_input[key];
        break;
      }
      case schedule::OpKind::kUpdate: {
        const double grad = weight_grad[key];
        const int d = delay[key];
        double step = grad;
        if (rule.adamw) {
          const int64_t n = ++adam_steps[k];
          buf[k] = 0.9 * buf[k] + 0.1 * grad;
          second[k] = 0.99 * second[k] + 0.01 * grad * grad;
          step = buf[k] / (1 - std::pow(0.9, n)) / (std::sqrt(second[k]) / std::sqrt(1 - std::pow(0.99, n)) + 1e-8);
        } else if (rule.momentum != 0) {
          buf[k] = has_buf[k] ? rule.momentum * buf[k] + grad : grad;
          has_buf[k] = true;
          step = buf[k];
          if (rule.spike_compensation && d > 0) {
            const double a = std::pow(rule.momentum, d);
            step = a * buf[k] + (1 - a) / (1 - rule.momentum) * grad;
          }
          if (rule.delay_nesterov) {  // the stored weights: heavy ball's, c = m + D steps ahead
            const double c = rule.momentum + d;
            step = (1 + c - c / rule.momentum) * buf[k] + c / rule.momentum * grad;
          }
        }
        w[k] -= lr_for(d, t) * step;
        last_update[k] = t;
        break;
      }
    }
  }
  return w;
}

std::vector<double> by_hand(const schedule::Schedule& s, bool stash) {
  Rule rule;
  rule.stash = stash;
  return by_hand(s, rule);
}

std::vector<double> by_engine(const schedule::Schedule& s, const std::string& executor,
                              const Rule& rule = {}) {
  std::vector<std::unique_ptr<Stage>> stages;
  std::vector<Stage*> ptrs;
  const auto update = optim::UpdateOptions()
                       .kind(rule.adamw ? optim::OptimizerKind::kAdamW : optim::OptimizerKind::kSgd)
                       .beta2(0.99)
                       .momentum(rule.momentum)
                       .weight_decay(0)
                       .delay_aware_lr(rule.delay_aware_lr)
                       .delay_lr_anneal_steps(rule.anneal_steps)
                       .weight_prediction(rule.weight_prediction)
                       .spike_compensation(rule.spike_compensation)
                       .delay_nesterov(rule.delay_nesterov);
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
    stages.push_back(std::make_unique<Stage>(seq, StageOptions(k, 3).update(update).objective(Objective{Loss(squared, "squared")})));
    ptrs.push_back(stages.back().get());
  }
  make_executor(executor_from_name(executor))->run(s, ptrs, test::scalar::context());
  return test::scalar::scalar_weights(ptrs);
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

void expect_engine_matches(const schedule::Schedule& s, const Rule& rule, const char* what) {
  const auto expected = by_hand(s, rule);
  for (const std::string executor : {"emulated", "threads"}) {
    const auto w = by_engine(s, executor, rule);
    for (int k = 0; k < 3; ++k) {
      EXPECT_NEAR(w[k], expected[k], 1e-12) << what << ", " << executor << ", partition " << k + 1;
    }
  }
  // Not blind: the rule must differ from plain PPL-SGD with the same momentum.
  Rule plain;
  plain.momentum = rule.momentum;
  EXPECT_GT(std::abs(by_hand(s, plain)[0] - expected[0]), 1e-6) << what << " changes nothing";
}

TEST(PplSgd, WeightStashingBackwardUsesTheForwardsWeights) {
  // PipeDream's 1F1B: the engine follows the stashing rule, not the current-weights rule.
  const auto s = schedule::make_one_f_one_b(3, 0, 9);
  Rule stash;
  stash.stash = true;
  const auto expected = by_hand(s, stash);
  const auto current = by_hand(s, false);
  EXPECT_GT(std::abs(expected[0] - current[0]), 1e-6);
  for (const std::string executor : {"emulated", "threads"}) {
    const auto w = by_engine(s, executor);
    for (int k = 0; k < 3; ++k) EXPECT_NEAR(w[k], expected[k], 1e-12) << executor << " " << k + 1;
  }
}

TEST(PplSgd, DelayAwareLearningRate) {
  Rule rule;
  rule.momentum = 0.9;
  rule.delay_aware_lr = true;
  expect_engine_matches(schedule::make_stale(3, 0, 9), rule, "delay-aware lr");
  rule.anneal_steps = 6;  // p falls from 1 to 0 within the segment
  expect_engine_matches(schedule::make_stale(3, 0, 9), rule, "annealed delay-aware lr");
}

TEST(PplSgd, WeightPrediction) {
  Rule rule;
  rule.momentum = 0.9;
  rule.weight_prediction = true;
  expect_engine_matches(schedule::make_stale(3, 0, 9), rule, "weight prediction");
}

TEST(PplSgd, SpikeCompensation) {
  Rule rule;
  rule.momentum = 0.9;
  rule.spike_compensation = true;
  expect_engine_matches(schedule::make_stale(3, 0, 9), rule, "spike compensation");
}

TEST(PplSgd, DelayCorrectedLookAhead) {
  Rule rule;
  rule.momentum = 0.9;
  rule.delay_nesterov = true;
  expect_engine_matches(schedule::make_stale(3, 0, 9), rule, "delay-corrected look-ahead");
  rule.delay_aware_lr = true;
  expect_engine_matches(schedule::make_stale(3, 0, 9), rule, "look-ahead with delay-aware lr");
}

TEST(PplSgd, AdamWWithItsStatePerPartition) {
  Rule rule;
  rule.adamw = true;
  expect_engine_matches(schedule::make_stale(3, 0, 9), rule, "adamw");
  rule.delay_aware_lr = true;
  expect_engine_matches(schedule::make_stale(3, 0, 9), rule, "adamw with delay-aware lr");
}

TEST(PplSgd, MitigationsCompose) {
  Rule rule;
  rule.momentum = 0.9;
  rule.delay_aware_lr = true;
  rule.weight_prediction = true;
  rule.spike_compensation = true;
  expect_engine_matches(schedule::make_stale(3, 0, 9), rule, "all three");
  rule.stash = true;
  expect_engine_matches(schedule::make_one_f_one_b(3, 0, 9), rule, "all three with stashing");
}

TEST(PplSgd, MitigationsChangeNothingWithoutStaleness) {
  // Sequential training has D = 0 everywhere: every mitigation is the plain update.
  Rule rule;
  rule.momentum = 0.9;
  const auto s = schedule::make_sequential(3, 0, 6);
  const auto plain = by_engine(s, "emulated", rule);
  rule.delay_aware_lr = rule.weight_prediction = rule.spike_compensation = true;
  const auto mitigated = by_engine(s, "emulated", rule);
  for (int k = 0; k < 3; ++k) EXPECT_EQ(mitigated[k], plain[k]);
}

}  // namespace
}  // namespace stalepipe::exec
