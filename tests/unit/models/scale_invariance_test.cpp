// Which weights --fixed-weight-norm may rescale: exactly those a batch norm makes irrelevant
// to the output's scale.
#include <gtest/gtest.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>

#include "stalepipe/models/scale_invariance.h"
#include "stalepipe/models/zoo.h"

namespace stalepipe::models {
namespace {

int count_in(const Model& model) {
  return static_cast<int>(scale_invariant_weights(*model.as_sequential()).size());
}

TEST(ScaleInvariance, EveryResNetConvFeedsABatchNormButNoLinearDoes) {
  EXPECT_EQ(count_in(make_model("resnet20", InputShape{})), 19);
  EXPECT_EQ(count_in(make_model("resnet56", InputShape{})), 55);
}

TEST(ScaleInvariance, NetworksWithoutBatchNormHaveNone) {
  EXPECT_EQ(count_in(make_model("lenet5", InputShape{})), 0);
  EXPECT_EQ(count_in(make_model("alexnet", InputShape{})), 0);
}

TEST(ScaleInvariance, NeedsABiasFreeLayerRightBeforeAMatchingBatchNorm) {
  torch::nn::Conv2d free(torch::nn::Conv2dOptions(1, 4, 3).bias(false));
  torch::nn::Conv2d biased(torch::nn::Conv2dOptions(4, 4, 3));
  torch::nn::Linear linear(torch::nn::LinearOptions(4, 3).bias(false));
  torch::nn::Sequential net(free, torch::nn::BatchNorm2d(4), torch::nn::ReLU(), biased,
                            torch::nn::BatchNorm2d(4), torch::nn::Flatten(), linear,
                            torch::nn::BatchNorm1d(3));
  const auto found = scale_invariant_weights(*net);
  ASSERT_EQ(found.size(), 2u);
  EXPECT_TRUE(found[0].is_same(free->weight));
  EXPECT_TRUE(found[1].is_same(linear->weight));
  // A batch norm of other width, or nothing after the layer, is not enough.
  torch::nn::Sequential mismatched(torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 4, 3).bias(false)),
                                   torch::nn::BatchNorm2d(5));
  EXPECT_TRUE(scale_invariant_weights(*mismatched).empty());
  torch::nn::Sequential last(torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 4, 3).bias(false)));
  EXPECT_TRUE(scale_invariant_weights(*last).empty());
}

}  // namespace
}  // namespace stalepipe::models
