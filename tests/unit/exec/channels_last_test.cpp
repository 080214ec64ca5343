// PipelineOptions::layout channels-last: weights, activations, registers and the gradients sent
// back are channels-last all the way (no conversion at a partition boundary), the executors
// still agree bit for bit, and the results equal NCHW training up to reduction order.
#include <gtest/gtest.h>

#include "stalepipe/exec/pipeline.h"
#include "stalepipe/exec/stage.h"
#include "stalepipe/models/blocks.h"
#include "stalepipe/models/memory_format.h"
#include "stalepipe/models/zoo.h"
#include "stalepipe/partition/plan.h"
#include "stalepipe/train/trainer.h"
#include "support/pipeline_runs.h"
#include "support/train_runs.h"

namespace stalepipe::exec {
namespace {

constexpr auto kChannelsLast = torch::MemoryFormat::ChannelsLast;

// Strictly channels-last: in that layout and not also plain contiguous.
bool strictly_channels_last(const torch::Tensor& t) {
  return t.dim() == 4 && t.is_contiguous(kChannelsLast) && !t.is_contiguous();
}

TEST(ChannelsLast, RegistersAndTheGradientsSentBackStayChannelsLast) {
  torch::manual_seed(3);
  models::InputShape input;
  input.channels = 1;
  const auto model = models::make_model("resnet8", input);
  const auto plan = partition::make_plan(model, {3});  // after the first residual block
  Pipeline pipeline(model, plan, {torch::kCPU, torch::kCPU}, optim::UpdateOptions(), {}, 1, kChannelsLast);
  for (int k = 0; k < 2; ++k) {
    for (const auto& p : pipeline.stage(k).module()->parameters()) {
      // By strides: a weight with one input channel is contiguous in both layouts.
      if (p.dim() == 4) EXPECT_EQ(p.suggest_memory_format(), kChannelsLast) << "partition " << k + 1 << " weight " << p.sizes();
    }
  }
  const torch::Tensor x = torch::randn({4, 1, 32, 32});  // NCHW, as the loader gives it
  const torch::Tensor y = torch::randint(10, {4}, torch::kLong);
  const torch::Tensor reg = pipeline.stage(0).forward(0, x);
  EXPECT_TRUE(strictly_channels_last(reg)) << reg.sizes() << " strides " << reg.strides();
  pipeline.stage(1).forward_loss(0, reg, y);
  const torch::Tensor grad = pipeline.stage(1).backward(0, torch::Tensor());
  EXPECT_TRUE(strictly_channels_last(grad)) << grad.sizes() << " strides " << grad.strides();
  pipeline.stage(0).backward(0, grad);
  for (const auto& p : pipeline.stage(0).module()->parameters()) {
    if (p.dim() == 4) EXPECT_TRUE(p.grad().is_contiguous(kChannelsLast)) << p.sizes();
  }
}

// A register hands back its input's gradient as autograd made it: in an NCHW pipeline, a
// partition whose first operation works on a channels-last copy of its input sends back a
// channels-last gradient, as the uncut network would hand the partition before, not the
// contiguous copy of it that the input leaf's .grad holds.
TEST(ChannelsLast, AGradientGoesBackInTheLayoutAutogradMadeIt) {
  torch::nn::Sequential module;
  module->push_back("nhwc_scale", torch::nn::Functional([](const torch::Tensor& x) {
    return x.permute({0, 2, 3, 1}).contiguous().mul(2);  // [N, H, W, C], as a transformer block reads it
  }));
  module->push_back("flatten", torch::nn::Flatten());
  Stage last(module, StageOptions(1, 2));
  const torch::Tensor x = torch::randn({2, 3, 4, 4});
  last.forward_loss(0, x, torch::randint(3, {2}, torch::kLong));
  const torch::Tensor grad = last.backward(0, torch::Tensor());
  EXPECT_TRUE(strictly_channels_last(grad)) << grad.sizes() << " strides " << grad.strides();
}

// oneDNN takes a convolution's layout from its weight's and input's strides; with both
// NCHW-strided (a 1-channel weight on a grey input), the first conv ran in NCHW and its output
// and gradients were reordered every step.
TEST(ChannelsLast, AFirstConvOnOneChannelRunsChannelsLast) {
  torch::manual_seed(3);
  models::ConvBlock conv(models::ConvBlockOptions(1, 16, 3).padding(1).batch_norm(true));
  models::to_memory_format(*conv, kChannelsLast);
  EXPECT_EQ(conv->conv->weight.suggest_memory_format(), kChannelsLast) << conv->conv->weight.strides();
  const torch::Tensor out = conv->forward(torch::randn({4, 1, 32, 32}));  // NCHW, as the loader gives it
  EXPECT_TRUE(strictly_channels_last(out)) << out.sizes() << " strides " << out.strides();
}

TEST(ChannelsLast, ExecutorsAgreeBitForBitAndMatchNchwUpToReductionOrder) {
  const nlohmann::json common = {{"model", "resnet8"}, {"data", "synthetic:64"}, {"batch_size", 16}, {"lr", 0.01}};
  auto run = [&](const char* executor, bool channels_last) {
    nlohmann::json j = common;
    j["executor"] = executor;
    j["layout"] = channels_last ? "channels-last" : "nchw";
    return train::train(test::small_run("3", j), test::quiet_hooks()).parameters;
  };
  const auto emulated = run("emulated", true);
  EXPECT_TRUE(test::all_equal(run("threads", true), emulated));
  EXPECT_TRUE(test::all_close(run("emulated", false), emulated, 1e-3, 2e-4));  // 8 steps apart
}

}  // namespace
}  // namespace stalepipe::exec
