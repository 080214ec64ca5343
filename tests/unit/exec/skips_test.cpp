// Skip tensors across partitions (models/skips.h): a skip goes from the partition that stashes
// it straight to the one that pops it, and its gradient back; nothing else changes.
#include <map>

#include <gtest/gtest.h>
#include <torch/nn/modules/linear.h>

#include "stalepipe/exec/executor.h"
#include "support/pipeline_runs.h"
#include "support/scalar_pipeline.h"

namespace stalepipe::test {
namespace {

RunSpec resnet20(std::vector<int> ppv) { return small_resnet20(std::move(ppv)); }

RunSpec unet(std::vector<int> ppv) {
  RunSpec spec = small_resnet20(std::move(ppv));
  spec.model = "unet";
  spec.data = "synthetic-masks";
  return spec;
}

// Without staleness (each mini-batch's backward and update before the next forward) the
// registers change nothing: the skip gradients reach their producers whole and in time.
::testing::AssertionResult sequential_equals_no_register(RunSpec spec) {
  spec.kind = schedule::ScheduleKind::kSequential;
  const auto pipelined = run_pipeline(spec);
  spec.ppv = {};
  return all_equal(pipelined, run_pipeline(spec));
}

TEST(Skips, ResNet20CutInsideBlocksTrainsAsTheWholeNetwork) {
  EXPECT_TRUE(sequential_equals_no_register(resnet20({8})));         // inside block2_1
  EXPECT_TRUE(sequential_equals_no_register(resnet20({2, 9, 14})));  // inside three blocks
}

TEST(Skips, UNetWithASkipOverAPartitionTrainsAsTheWholeNetwork) {
  // enc1 goes from partition 1 straight to 3, enc2 from 2 to 3 with the activation.
  EXPECT_TRUE(sequential_equals_no_register(unet({1, 3})));
  // enc1 from partition 1 to 4, enc2 from 2 to 3.
  EXPECT_TRUE(sequential_equals_no_register(unet({1, 3, 5})));
}

TEST(Skips, ExecutorsAgreeBitForBit) {
  for (RunSpec spec : {resnet20({8}), unet({1, 3, 5})}) {
    SCOPED_TRACE(spec.model);
    const auto reference = run_pipeline(spec);
    spec.executor = "threads";
    EXPECT_TRUE(all_equal(run_pipeline(spec), reference));
  }
}

TEST(Skips, SchedulesWithMicroBatchesAndStashingRouteSkipsToo) {
  auto gpipe = unet({1, 3});
  gpipe.kind = schedule::ScheduleKind::kGPipe;
  gpipe.micro_batches = 2;
  auto stashing = unet({1, 3});
  stashing.kind = schedule::ScheduleKind::kOneFOneB;
  for (RunSpec spec : {gpipe, stashing}) {
    const auto reference = run_pipeline(spec);
    spec.executor = "threads";
    EXPECT_TRUE(all_equal(run_pipeline(spec), reference));
  }
}

// A recomputed unit that stashes a skip sends it once, with the forward (the emulated
// executor's mailboxes would hold a second copy and the next receive would name the wrong
// step), and its recomputation gives the same gradients.
TEST(Skips, RecomputingAUnitThatStashesChangesNothing) {
  auto spec = resnet20({8});  // partition 1 ends with block2_1a, which stashes block2_1
  const auto reference = run_pipeline(spec);
  spec.recompute = 9;  // all of partition 1, and block2_1b, which pops it, in partition 2
  EXPECT_TRUE(all_equal(run_pipeline(spec), reference));
  auto u = unet({1, 3});
  const auto unet_reference = run_pipeline(u);
  u.recompute = 3;  // enc1 (stashes to partition 3), enc2 (stashes) and bottom
  EXPECT_TRUE(all_equal(run_pipeline(u), unet_reference));
}

}  // namespace
}  // namespace stalepipe::test

namespace stalepipe::exec {
namespace {

// By hand: three scalar partitions with a skip from the first to the third,
//   h1 = w1 x (stashed as s), h2 = w2 h1, y = w3 (h2 + s), loss 0.5 (y - target)^2, plain SGD.
using test::scalar::input_of;
using test::scalar::kInitial;
using test::scalar::kLr;
using test::scalar::target_of;

struct HandRun {
  std::vector<double> weights;
  std::map<int64_t, int64_t> producer_forward_version;  // step -> updates of w1 before forward
  std::map<int64_t, int64_t> consumer_backward_version;  // step -> updates of w3 before backward
};

// The stale schedule's rule for the skip (docs/design.md, "Skip tensors"): partition 1's
// backward of t adds the skip's gradient, computed by partition 3's backward of t with the
// w3 current then, to its main gradient.
HandRun by_hand(const schedule::Schedule& s) {
  HandRun run;
  std::vector<double> w(kInitial, kInitial + 3);
  std::vector<int64_t> updates(3, 0);
  std::map<std::pair<int, int64_t>, double> in, out, grad_in;
  std::map<int64_t, double> skip, skip_grad, weight_grad0, weight_grad1, weight_grad2;
  for (const auto& g : schedule::global_order(s)) {
    const int k = g.worker;
    const int64_t t = g.op.step;
    if (g.op.kind == schedule::OpKind::kForward) {
      const double x = k == 0 ? input_of(t) : k == 1 ? out[{0, t}] : out[{1, t}] + skip[t];
      in[{k, t}] = x;
      out[{k, t}] = w[k] * x;
      if (k == 0) {
        skip[t] = out[{0, t}];
        run.producer_forward_version[t] = updates[0];
      }
    } else if (g.op.kind == schedule::OpKind::kBackward) {
      double upstream = k == 2 ? out[{2, t}] - target_of(t) : grad_in[{k + 1, t}];
      if (k == 0) upstream += skip_grad[t];
      if (k == 2) {
        skip_grad[t] = upstream * w[2];
        run.consumer_backward_version[t] = updates[2];
      }
      grad_in[{k, t}] = upstream * w[k];
      (k == 0 ? weight_grad0 : k == 1 ? weight_grad1 : weight_grad2)[t] = upstream * in[{k, t}];
    } else {
      w[k] -= kLr * (k == 0 ? weight_grad0 : k == 1 ? weight_grad1 : weight_grad2)[t];
      ++updates[k];
    }
  }
  run.weights = w;
  return run;
}

// {x} -> {w x, w x}: the output, and the same value stashed as "s".
struct StashingScalarImpl : torch::nn::Module {
  StashingScalarImpl() : linear(register_module("linear", torch::nn::Linear(torch::nn::LinearOptions(1, 1).bias(false)))) {}
  std::vector<torch::Tensor> forward(std::vector<torch::Tensor> in) {
    torch::Tensor y = linear(in[0]);
    return {y, y};
  }
  torch::nn::Linear linear;
};
TORCH_MODULE(StashingScalar);

// {h, s} -> {w (h + s)}.
struct PoppingScalarImpl : torch::nn::Module {
  PoppingScalarImpl() : linear(register_module("linear", torch::nn::Linear(torch::nn::LinearOptions(1, 1).bias(false)))) {}
  std::vector<torch::Tensor> forward(std::vector<torch::Tensor> in) { return {linear(in[0] + in[1])}; }
  torch::nn::Linear linear;
};
TORCH_MODULE(PoppingScalar);

std::vector<double> by_engine(const schedule::Schedule& s, const std::string& executor) {
  std::vector<std::unique_ptr<Stage>> stages;
  std::vector<Stage*> ptrs;
  const std::vector<std::vector<models::Skips>> skips = {{{{}, {"s"}}}, {}, {{{"s"}, {}}}};
  for (int k = 0; k < 3; ++k) {
    torch::nn::Sequential seq;
    if (k == 0) seq->push_back(StashingScalar());
    if (k == 1) seq->push_back(torch::nn::Linear(torch::nn::LinearOptions(1, 1).bias(false)));
    if (k == 2) seq->push_back(PoppingScalar());
    seq->to(torch::kDouble);
    {
      torch::NoGradGuard g;
      seq->parameters()[0].fill_(kInitial[k]);
    }
    auto squared = [](const torch::Tensor& y, const torch::Tensor& target) { return 0.5 * (y - target).pow(2).sum(); };
    stages.push_back(std::make_unique<Stage>(seq, StageOptions(k, 3)
                                                      .update(optim::UpdateOptions().momentum(0).weight_decay(0))
                                                      .objective(Objective{Loss(squared, "squared")})
                                                      .skips(skips[k])));
    ptrs.push_back(stages.back().get());
  }
  EXPECT_EQ(ptrs[0]->skip_outputs(), (std::vector<std::string>{"s"}));
  EXPECT_EQ(ptrs[2]->skip_inputs(), (std::vector<std::string>{"s"}));
  make_executor(executor_from_name(executor))->run(s, ptrs, test::scalar::context());
  return test::scalar::scalar_weights(ptrs);
}

TEST(SkipSemantics, AThreePartitionSkipUsesTheWeightVersionsTheScheduleImplies) {
  const auto s = schedule::make_stale(3, 0, 12);
  const HandRun hand = by_hand(s);
  // Partition 1 misses the updates of its d_1 = 3 previous mini-batches (`stalepipe schedule
  // --partitions 3`); partition 3 computes the skip's gradient of t right after its forward of
  // t, with every earlier update applied.
  const int d1 = schedule::analyze(s).workers[0].staleness;
  EXPECT_EQ(d1, 3);
  for (int64_t t = 0; t < 12; ++t) {
    EXPECT_EQ(hand.producer_forward_version.at(t), std::max<int64_t>(0, t - d1)) << "step " << t;
    EXPECT_EQ(hand.consumer_backward_version.at(t), t) << "step " << t;
  }
  for (const std::string executor : {"emulated", "threads"}) {
    const auto w = by_engine(s, executor);
    for (int k = 0; k < 3; ++k) EXPECT_NEAR(w[k], hand.weights[k], 1e-12) << executor << " partition " << k + 1;
  }
}

}  // namespace
}  // namespace stalepipe::exec
