#include <algorithm>
#include <cmath>
#include <functional>

#include <ATen/record_function.h>
#include <gtest/gtest.h>
#include <torch/autograd.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>

#include "stalepipe/common/error.h"
#include "stalepipe/optim/sgd.h"

namespace stalepipe::optim {
namespace {

// Our Sgd must be PyTorch's SGD, bit for bit.
void expect_matches_torch(double momentum, double weight_decay, bool nesterov, double dampening) {
  torch::manual_seed(3);
  torch::nn::Linear ours(5, 3), theirs(5, 3);
  {
    torch::NoGradGuard g;
    for (size_t i = 0; i < ours->parameters().size(); ++i) theirs->parameters()[i].copy_(ours->parameters()[i]);
  }
  Sgd sgd(ours->parameters(), UpdateOptions().momentum(momentum).weight_decay(weight_decay).nesterov(nesterov).dampening(dampening));
  torch::optim::SGD reference(theirs->parameters(), torch::optim::SGDOptions(0.1)
                                                        .momentum(momentum)
                                                        .weight_decay(weight_decay)
                                                        .nesterov(nesterov)
                                                        .dampening(dampening));
  for (int step = 0; step < 6; ++step) {
    const auto x = torch::randn({4, 5});
    ours->forward(x).pow(2).sum().backward();
    theirs->forward(x).pow(2).sum().backward();
    sgd.step(0.1);
    sgd.zero_grad();
    reference.step();
    reference.zero_grad();
    for (size_t i = 0; i < ours->parameters().size(); ++i) {
      ASSERT_TRUE(torch::equal(ours->parameters()[i], theirs->parameters()[i])) << "step " << step;
    }
  }
}

TEST(Sgd, MatchesTorchOptimSgd) {
  expect_matches_torch(0.0, 0.0, false, 0.0);
  expect_matches_torch(0.9, 5e-4, false, 0.0);
  expect_matches_torch(0.9, 1e-4, true, 0.0);
  expect_matches_torch(0.5, 0.0, false, 0.1);
}

// A weight without a gradient is left alone and keeps no state; one whose gradient appears
// later starts its momentum then (PyTorch's SGD, bit for bit), whether the step updates the
// weights one at a time (a weight without its buffer yet) or all at once.
TEST(Sgd, AWeightWithoutAGradientOrStateYetUpdatesAsPyTorchs) {
  torch::manual_seed(5);
  torch::nn::Linear first(4, 3), second(3, 2), first_ref(4, 3), second_ref(3, 2);
  {
    torch::NoGradGuard g;
    for (size_t i = 0; i < 2; ++i) {
      first_ref->parameters()[i].copy_(first->parameters()[i]);
      second_ref->parameters()[i].copy_(second->parameters()[i]);
    }
  }
  auto params = first->parameters(), ref_params = first_ref->parameters();
  for (const auto& p : second->parameters()) params.push_back(p);
  for (const auto& p : second_ref->parameters()) ref_params.push_back(p);
  Sgd sgd(params, UpdateOptions().momentum(0.9).weight_decay(1e-3).nesterov(true));
  torch::optim::SGD reference(ref_params, torch::optim::SGDOptions(0.05).momentum(0.9).weight_decay(1e-3).nesterov(true));
  for (int step = 0; step < 5; ++step) {
    const auto x = torch::randn({6, 4});
    // Step 0 trains the first layer only; from step 1 both (the second's buffer starts then).
    const auto loss = [&](torch::nn::Linear& a, torch::nn::Linear& b) {
      return step == 0 ? a->forward(x).pow(2).sum() : b->forward(a->forward(x)).pow(2).sum();
    };
    loss(first, second).backward();
    loss(first_ref, second_ref).backward();
    sgd.step(0.05);
    reference.step();
    sgd.zero_grad();
    reference.zero_grad();
    for (size_t i = 0; i < params.size(); ++i) {
      ASSERT_TRUE(torch::equal(params[i], ref_params[i])) << "step " << step << ", weight " << i;
    }
  }
}

// Once every weight has its momentum buffer, a step is a few multi-tensor operations for all
// the weights, not a few per weight tensor: what a GPU launches per step. The update a CUDA
// graph captures (step_on_device) shares them up to its descent, whose lr is on the device.
TEST(Sgd, AStepAfterTheFirstIsAFewOperationsForAllTheWeights) {
  static int foreach_ops = 0;
  torch::nn::Sequential net(torch::nn::Linear(4, 4), torch::nn::Linear(4, 4), torch::nn::Linear(4, 4));
  Sgd sgd(net->parameters(), UpdateOptions().momentum(0.9).weight_decay(5e-4));
  const auto step = [&](const std::function<void()>& update) {
    net->forward(torch::ones({2, 4})).sum().backward();
    foreach_ops = 0;
    const at::CallbackHandle handle = at::addThreadLocalCallback(
        at::RecordFunctionCallback([](const at::RecordFunction& fn) -> std::unique_ptr<at::ObserverContext> {
          foreach_ops += std::string(fn.name()).rfind("aten::_foreach_", 0) == 0;
          return nullptr;
        }));
    update();
    at::removeCallback(handle);
    sgd.zero_grad();
  };
  const auto eager = [&] { sgd.step(0.1); };
  step(eager);
  EXPECT_EQ(foreach_ops, 0) << "the first step makes the buffers one weight at a time";
  step(eager);
  EXPECT_EQ(foreach_ops, 4) << "weight decay, the buffers' scale and sum, the descent";
  sgd.set_step_values(0.1, 0);
  step([&] { sgd.step_on_device(); });
  EXPECT_EQ(foreach_ops, 3) << "weight decay, the buffers' scale and sum";
}

// The property the stale pipeline relies on: an update between a forward and its backward
// does not make the backward throw, and the backward then sees the updated weights.
TEST(Sgd, UpdateBetweenForwardAndBackwardIsVisibleToBackward) {
  torch::manual_seed(0);
  torch::nn::Conv2d conv(torch::nn::Conv2dOptions(2, 3, 3).bias(false));
  Sgd sgd(conv->parameters(), UpdateOptions().momentum(0).weight_decay(0));
  const auto x = torch::randn({1, 2, 5, 5}, torch::requires_grad());
  const auto y = conv->forward(x);  // graph saves a reference to the weight
  const auto g = torch::randn_like(y);
  conv->weight.mutable_grad() = torch::ones_like(conv->weight);
  sgd.step(0.5);  // weight -= 0.5
  sgd.zero_grad();
  ASSERT_NO_THROW(y.backward(g));
  // dL/dx computed with the current (updated) weight.
  const auto expected = torch::autograd::grad({conv->forward(x)}, {x}, {g})[0];
  EXPECT_TRUE(torch::allclose(x.grad(), expected));
}

TEST(Sgd, SaveLoadRoundTrip) {
  torch::nn::Linear a(3, 2);
  Sgd sgd(a->parameters(), UpdateOptions());
  a->forward(torch::ones({1, 3})).sum().backward();
  sgd.step(0.1);
  torch::serialize::OutputArchive out;
  sgd.save(out);
  std::stringstream bytes;
  out.save_to(bytes);
  Sgd other(a->parameters(), UpdateOptions());
  torch::serialize::InputArchive in;
  in.load_from(bytes);
  other.load(in);
  for (size_t i = 0; i < sgd.momentum_buffers().size(); ++i) {
    EXPECT_TRUE(torch::equal(sgd.momentum_buffers()[i], other.momentum_buffers()[i]));
  }
}

// fixed_weight_norm, written out by hand: the plain update, then the scale-invariant weight
// alone is rescaled to its norm at construction; the other parameters update as usual.
TEST(Sgd, FixedWeightNormRescalesOnlyTheScaleInvariantWeightsToTheirInitialNorm) {
  torch::manual_seed(1);
  torch::nn::Conv2d conv(torch::nn::Conv2dOptions(2, 3, 3).bias(false));
  torch::nn::Linear other(2, 2);
  std::vector<torch::Tensor> params = conv->parameters();
  for (const auto& p : other->parameters()) params.push_back(p);
  const double m = 0.9, lr = 0.5;
  Sgd sgd(params, UpdateOptions().momentum(m).weight_decay(0).fixed_weight_norm(true), {conv->weight});
  EXPECT_EQ(sgd.scale_invariant_count(), 1);
  const torch::Tensor w0 = conv->weight.detach().clone(), b0 = other->weight.detach().clone();
  const double norm0 = w0.norm().item<double>();
  const torch::Tensor g1 = torch::randn_like(w0), g2 = torch::randn_like(w0), h = torch::randn_like(b0);

  for (const auto& g : {g1, g2}) {
    conv->weight.mutable_grad() = g.clone();
    other->weight.mutable_grad() = h.clone();
    sgd.step(lr);
    sgd.zero_grad();
  }
  const torch::Tensor w1 = (w0 - lr * g1) * (norm0 / (w0 - lr * g1).norm().item<double>());
  const torch::Tensor w2_free = w1 - lr * (m * g1 + g2);
  const torch::Tensor w2 = w2_free * (norm0 / w2_free.norm().item<double>());
  EXPECT_TRUE(torch::allclose(conv->weight, w2, 1e-5, 1e-6));
  EXPECT_NEAR(conv->weight.norm().item<double>(), norm0, 1e-5);
  EXPECT_TRUE(torch::allclose(other->weight, b0 - lr * h - lr * (m * h + h), 1e-5, 1e-6));

  // The norm to keep is the run's first, also after a resume from a checkpoint.
  torch::serialize::OutputArchive out;
  sgd.save(out);
  std::stringstream bytes;
  out.save_to(bytes);
  {
    torch::NoGradGuard no_grad;
    conv->weight.mul_(3);
  }
  Sgd resumed(params, UpdateOptions().momentum(m).weight_decay(0).fixed_weight_norm(true), {conv->weight});
  torch::serialize::InputArchive in;
  in.load_from(bytes);
  resumed.load(in);
  conv->weight.mutable_grad() = torch::zeros_like(w0);
  resumed.step(lr);
  EXPECT_NEAR(conv->weight.norm().item<double>(), norm0, 1e-5);
}

TEST(Sgd, WithoutTheFlagWeightsLeaveTheirNormUntilResetNorms) {
  torch::manual_seed(2);
  torch::nn::Conv2d conv(torch::nn::Conv2dOptions(2, 3, 3).bias(false));
  Sgd sgd(conv->parameters(), UpdateOptions().momentum(0.9).weight_decay(0), {conv->weight});
  const double norm0 = conv->weight.norm().item<double>();
  const torch::Tensor g = torch::randn_like(conv->weight);
  conv->weight.mutable_grad() = g.clone();
  sgd.step(1.0);
  const torch::Tensor moved = conv->weight.detach().clone();
  const double c = norm0 / moved.norm().item<double>();
  ASSERT_GT(std::abs(c - 1), 1e-3);  // the step changed the norm
  sgd.reset_norms();
  EXPECT_TRUE(torch::allclose(conv->weight, moved * c, 1e-5, 1e-6));
  // The buffer (= g after one step) is now in the units of gradients at the rescaled weights.
  EXPECT_TRUE(torch::allclose(sgd.momentum_buffers()[0], g / c, 1e-5, 1e-6));
  sgd.reset_norms();  // idempotent
  EXPECT_TRUE(torch::allclose(conv->weight, moved * c, 1e-5, 1e-6));
}

// step_on_device() (what a CUDA graph captures: lr, a and b read from tensors) against step()
// with the same values: max |difference| of the weights over 8 updates with a changing lr and
// delay, relative to the largest weight.
double device_step_difference(UpdateOptions options) {
  torch::manual_seed(5);
  torch::nn::Conv2d host(torch::nn::Conv2dOptions(3, 4, 3).bias(false));
  torch::nn::Conv2d device(torch::nn::Conv2dOptions(3, 4, 3).bias(false));
  {
    torch::NoGradGuard g;
    device->weight.copy_(host->weight);
  }
  Sgd a(host->parameters(), options, host->parameters());
  Sgd b(device->parameters(), options, device->parameters());
  double worst = 0;
  for (int step = 0; step < 8; ++step) {
    const auto x = torch::randn({2, 3, 6, 6});
    host->forward(x).pow(2).sum().backward();
    device->forward(x).pow(2).sum().backward();
    const double lr = 0.1 * (1 + std::cos(step * 0.4));
    const int delay = step % 3;
    a.step(lr, delay);
    a.zero_grad();
    if (step == 0) {
      b.step(lr, delay);  // the momentum buffers, as the eager warm-up makes them
    } else {
      b.set_step_values(lr, delay);
      b.step_on_device();
    }
    b.zero_grad_in_place();
    EXPECT_TRUE(device->weight.grad().defined());  // zeroed where it is, not dropped
    EXPECT_EQ(device->weight.grad().abs().max().item<double>(), 0.0);
    worst = std::max(worst, ((host->weight - device->weight).abs().max() / host->weight.abs().max()).item<double>());
  }
  return worst;
}

// Bit for bit on the CPU: addcmul(x, t) rounds x * t + w once, as add(x, alpha) does (with
// mul + add instead, 3.6e-7 to 5.8e-7 relative after 8 updates, measured on this build). A
// GPU's kernels are not checked here; the graphed-training tests there allow a tolerance.
TEST(Sgd, StepOnDeviceEqualsStepWithTheSameValues) {
  const double tolerance = 0;  // bit for bit
  EXPECT_LE(device_step_difference(UpdateOptions()), tolerance) << "momentum";
  EXPECT_LE(device_step_difference(UpdateOptions().nesterov(true)), tolerance) << "nesterov";
  EXPECT_LE(device_step_difference(UpdateOptions().momentum(0)), tolerance) << "no momentum";
  EXPECT_LE(device_step_difference(UpdateOptions().weight_decay(0.01)), tolerance) << "weight decay";
  EXPECT_LE(device_step_difference(UpdateOptions().spike_compensation(true)), tolerance) << "spike compensation";
  EXPECT_LE(device_step_difference(UpdateOptions().delay_nesterov(true)), tolerance) << "delay-corrected look-ahead";
  EXPECT_LE(device_step_difference(UpdateOptions().fixed_weight_norm(true)), tolerance) << "fixed weight norm";
  EXPECT_LE(device_step_difference(UpdateOptions().delay_aware_lr(true).dampening(0.1)), tolerance) << "dampening";
}

TEST(Sgd, StepOnDeviceNeedsTheMomentumBuffersOfOneStep) {
  torch::nn::Linear net(3, 2);
  Sgd sgd(net->parameters(), UpdateOptions());
  net->forward(torch::ones({1, 3})).sum().backward();
  EXPECT_FALSE(sgd.ready_on_device());
  sgd.set_step_values(0.1, 0);
  EXPECT_THROW(sgd.step_on_device(), RuntimeError);
  sgd.step(0.1);
  EXPECT_TRUE(sgd.ready_on_device());
}

// The delay-corrected look-ahead keeps the heavy-ball iterate w (plain momentum SGD on the same
// gradients) shifted to its look-ahead point: the stored weights are u = w - lr c buf with
// c = m + D, after every step, for any constant delay D (the gradients here do not depend on
// the weights, so both runs see the same ones).
TEST(Sgd, DelayNesterovStoresHeavyBallsLookAheadPoint) {
  for (int delay : {0, 1, 3}) {
    torch::manual_seed(7);
    const auto start = torch::randn({6}, torch::kFloat64);
    auto heavy = start.clone().requires_grad_(), ahead = start.clone().requires_grad_();
    Sgd plain({heavy}, UpdateOptions().momentum(0.9).weight_decay(0));
    Sgd looked({ahead}, UpdateOptions().momentum(0.9).weight_decay(0).delay_nesterov(true));
    const double lr = 0.05, c = 0.9 + delay;
    for (int step = 0; step < 12; ++step) {
      const auto g = torch::randn({6}, torch::kFloat64);
      heavy.mutable_grad() = g.clone();
      ahead.mutable_grad() = g.clone();
      plain.step(lr, delay);
      looked.step(lr, delay);
      const auto expected = heavy.detach() - lr * c * plain.momentum_buffers()[0];
      ASSERT_TRUE(torch::allclose(ahead.detach(), expected, 1e-12, 1e-12)) << "delay " << delay << ", step " << step;
    }
  }
}

// With D = 0 the look-ahead is Nesterov's momentum (g + m buf), up to rounding.
TEST(Sgd, DelayNesterovWithoutDelayIsNesterov) {
  torch::manual_seed(2);
  torch::nn::Linear a(4, 3), b(4, 3);
  {
    torch::NoGradGuard g;
    for (size_t i = 0; i < a->parameters().size(); ++i) b->parameters()[i].copy_(a->parameters()[i]);
  }
  Sgd nesterov(a->parameters(), UpdateOptions().nesterov(true));
  Sgd looked(b->parameters(), UpdateOptions().delay_nesterov(true));
  for (int step = 0; step < 6; ++step) {
    const auto x = torch::randn({5, 4});
    a->forward(x).pow(2).sum().backward();
    b->forward(x).pow(2).sum().backward();
    nesterov.step(0.01, 0);
    looked.step(0.01, 0);
    nesterov.zero_grad();
    looked.zero_grad();
  }
  for (size_t i = 0; i < a->parameters().size(); ++i) {
    EXPECT_TRUE(torch::allclose(a->parameters()[i], b->parameters()[i], 1e-6, 1e-7))
        << (a->parameters()[i] - b->parameters()[i]).abs().max().item<double>();
  }
}

TEST(Sgd, DelayNesterovRefusesWhatItCannotCarry) {
  torch::nn::Linear net(3, 2);
  const auto refuses = [&](UpdateOptions o) { return Sgd(net->parameters(), o.delay_nesterov(true)); };
  EXPECT_THROW(refuses(UpdateOptions().momentum(0)), UsageError);
  EXPECT_THROW(refuses(UpdateOptions().dampening(0.1)), UsageError);
  EXPECT_THROW(refuses(UpdateOptions().weight_prediction(true)), UsageError);
  EXPECT_THROW(refuses(UpdateOptions().spike_compensation(true)), UsageError);
}

}  // namespace
}  // namespace stalepipe::optim
