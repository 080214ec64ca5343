// batch_norm_relu: the fused path equals LibTorch's batch norm, add and ReLU (values, every
// gradient, running statistics) computed in double, up to float rounding, and runs only
// where it applies.
#include <ATen/Parallel.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "stalepipe/common/error.h"
#include "stalepipe/models/batch_norm_relu.h"
#include "support/error_of.h"

namespace stalepipe::models {
namespace {

using test::error_of;

constexpr auto kChannelsLast = torch::MemoryFormat::ChannelsLast;

struct Result {
  torch::Tensor y, dx, dweight, dbias, dresidual, running_mean, running_var, batches;
};

// One training-mode forward and backward from the same input, weights and running statistics:
// fused, or LibTorch's operations in double (the reference).
Result run(bool fused, const torch::Tensor& input_float, const torch::Tensor& residual_float) {
  const auto dtype = fused ? torch::kFloat : torch::kDouble;
  const torch::Tensor input = input_float.to(dtype);
  const torch::Tensor residual_input = residual_float.defined() ? residual_float.to(dtype) : residual_float;
  torch::manual_seed(3);
  torch::nn::BatchNorm2d bn(input.size(1));
  {
    torch::NoGradGuard no_grad;
    bn->weight.uniform_(0.5, 1.5);
    bn->bias.uniform_(-0.5, 0.5);
    bn->running_mean.uniform_(-1, 1);
    bn->running_var.uniform_(0.5, 2);
  }
  bn->to(dtype);
  const torch::Tensor x = input.clone().requires_grad_();
  torch::Tensor residual;
  if (residual_input.defined()) residual = residual_input.clone().requires_grad_();
  torch::Tensor y;
  if (fused) {
    EXPECT_TRUE(runs_fused(*bn, x));
    y = batch_norm_relu(*bn, x, residual);
  } else {
    y = bn(x);
    if (residual.defined()) y = y + residual;
    y = y.relu();
  }
  const torch::Tensor dy = torch::randn(y.sizes(), torch::TensorOptions().dtype(torch::kFloat)).to(dtype);
  y.backward(dy);
  return {y.detach(), x.grad(), bn->weight.grad(), bn->bias.grad(),
          residual.defined() ? residual.grad() : torch::Tensor(), bn->running_mean.clone(),
          bn->running_var.clone(), bn->num_batches_tracked.clone()};
}

void expect_near(const torch::Tensor& fused, const torch::Tensor& reference, double tolerance, const char* what) {
  ASSERT_TRUE(fused.defined()) << what;
  ASSERT_EQ(fused.sizes(), reference.sizes()) << what;
  const torch::Tensor exact = reference.to(torch::kDouble);
  const double scale = std::max(1.0, exact.abs().max().item<double>());
  EXPECT_LE((fused.to(torch::kDouble) - exact).abs().max().item<double>(), tolerance * scale) << what;
}

void expect_same_training_step(const torch::Tensor& x, const torch::Tensor& residual) {
  at::set_num_threads(1);
  const Result fused = run(true, x, residual), reference = run(false, x, residual);
  expect_near(fused.y, reference.y, 1e-5, "output");
  EXPECT_TRUE(fused.y.is_contiguous(kChannelsLast));
  expect_near(fused.dx, reference.dx, 1e-5, "input gradient");
  EXPECT_TRUE(fused.dx.is_contiguous(kChannelsLast));
  expect_near(fused.dweight, reference.dweight, 1e-4, "weight gradient");
  expect_near(fused.dbias, reference.dbias, 1e-4, "bias gradient");
  if (residual.defined()) expect_near(fused.dresidual, reference.dresidual, 1e-6, "residual gradient");
  expect_near(fused.running_mean, reference.running_mean, 1e-6, "running mean");
  expect_near(fused.running_var, reference.running_var, 1e-5, "running variance");
  EXPECT_TRUE(torch::equal(fused.batches, reference.batches));
}

torch::Tensor channels_last_input(std::vector<int64_t> shape, double mean, double std) {
  torch::manual_seed(1);
  return (torch::randn(shape) * std + mean).contiguous(kChannelsLast);
}

TEST(BatchNormRelu, EqualsBatchNormThenReluWithEveryGradient) {
  expect_same_training_step(channels_last_input({8, 16, 6, 6}, 0.3, 1.0), {});
}

TEST(BatchNormRelu, EqualsBatchNormAddReluWithTheResidualsGradient) {
  const torch::Tensor x = channels_last_input({8, 16, 6, 6}, 0.3, 1.0);
  expect_same_training_step(x, torch::randn(x.sizes()).contiguous(kChannelsLast));
  // An NCHW residual (the option-A shortcut's padding) is taken as well.
  expect_same_training_step(x, torch::randn(x.sizes()));
}

TEST(BatchNormRelu, KeepsTheVarianceOfValuesFarFromZero) {
  // mean 1000, std 0.5: sums of squares in float would lose the variance entirely (LibTorch's
  // own float batch norm is 2e-3 off here).
  expect_same_training_step(channels_last_input({16, 8, 10, 10}, 1000.0, 0.5), {});
}

TEST(BatchNormRelu, RunsFusedOnlyInTrainingOnOneThreadOnChannelsLastFloat) {
  at::set_num_threads(1);
  torch::nn::BatchNorm2d bn(4);
  const torch::Tensor x = torch::randn({2, 4, 3, 3}).contiguous(kChannelsLast);
  EXPECT_TRUE(runs_fused(*bn, x));
  EXPECT_FALSE(runs_fused(*bn, x.contiguous()));                  // NCHW
  EXPECT_FALSE(runs_fused(*bn, x.to(torch::kDouble)));            // not float
  EXPECT_FALSE(runs_fused(*bn, torch::randn({1, 4, 1, 1})));      // one value per channel
  EXPECT_FALSE(runs_fused(*bn, x, x.to(torch::kDouble)));         // a double residual
  at::set_num_threads(2);
  EXPECT_FALSE(runs_fused(*bn, x));                               // LibTorch's threads do it
  at::set_num_threads(1);
  bn->eval();
  EXPECT_FALSE(runs_fused(*bn, x));
  // Evaluation mode runs LibTorch's operations: exactly their result.
  const torch::Tensor residual = torch::randn(x.sizes());
  EXPECT_TRUE(torch::equal(batch_norm_relu(*bn, x, residual), (bn(x) + residual).relu()));
}

TEST(BatchNormRelu, ARefusedShapeIsAUsageError) {
  at::set_num_threads(1);
  torch::nn::BatchNorm2d bn(4);
  const torch::Tensor x = torch::randn({2, 4, 3, 3}).contiguous(kChannelsLast);
  EXPECT_EQ(error_of<UsageError>([&] { batch_norm_relu(*bn, x, torch::randn({2, 4, 2, 2})); }),
            "batch_norm_relu: residual of shape [2, 4, 2, 2] for an input of shape [2, 4, 3, 3]");
  EXPECT_EQ(error_of<UsageError>([&] { batch_norm_relu(*bn, torch::randn({2, 3, 3, 3}).contiguous(kChannelsLast)); }),
            "batch_norm_relu: input has 3 channels, batch norm 4");
}

}  // namespace
}  // namespace stalepipe::models
