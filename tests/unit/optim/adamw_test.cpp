#include <sstream>

#include <gtest/gtest.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/adamw.h>
#include <torch/serialize.h>

#include "stalepipe/common/error.h"
#include "stalepipe/optim/adamw.h"
#include "stalepipe/optim/sgd.h"

namespace stalepipe::optim {
namespace {

void copy_parameters(torch::nn::Linear& to, torch::nn::Linear& from) {
  torch::NoGradGuard g;
  for (size_t i = 0; i < to->parameters().size(); ++i) to->parameters()[i].copy_(from->parameters()[i]);
}

// Our AdamW must be LibTorch's, bit for bit.
void expect_matches_torch(double weight_decay, double beta1, double beta2, double eps) {
  torch::manual_seed(4);
  torch::nn::Linear ours(5, 3), theirs(5, 3);
  copy_parameters(theirs, ours);
  AdamW adamw(ours->parameters(), UpdateOptions().kind(OptimizerKind::kAdamW).weight_decay(weight_decay)
                                      .beta1(beta1).beta2(beta2).eps(eps));
  torch::optim::AdamW reference(theirs->parameters(), torch::optim::AdamWOptions(0.01)
                                                          .weight_decay(weight_decay)
                                                          .betas({beta1, beta2})
                                                          .eps(eps));
  for (int step = 0; step < 6; ++step) {
    const auto x = torch::randn({4, 5});
    ours->forward(x).pow(2).sum().backward();
    theirs->forward(x).pow(2).sum().backward();
    adamw.step(0.01);
    adamw.zero_grad();
    reference.step();
    reference.zero_grad();
    for (size_t i = 0; i < ours->parameters().size(); ++i) {
      ASSERT_TRUE(torch::equal(ours->parameters()[i], theirs->parameters()[i])) << "step " << step;
    }
  }
}

TEST(AdamW, MatchesTorchOptimAdamW) {
  expect_matches_torch(0.0, 0.9, 0.999, 1e-8);
  expect_matches_torch(0.05, 0.9, 0.999, 1e-8);
  expect_matches_torch(0.01, 0.8, 0.95, 1e-6);
}

// Three steps, save, load into a fresh optimizer, three more: the weights of six straight.
TEST(AdamW, SaveLoadContinuesExactly) {
  torch::manual_seed(1);
  torch::nn::Linear straight(4, 2), resumed(4, 2);
  copy_parameters(resumed, straight);
  const UpdateOptions options = UpdateOptions().kind(OptimizerKind::kAdamW).weight_decay(0.01);
  AdamW a(straight->parameters(), options);
  auto b = std::make_unique<AdamW>(resumed->parameters(), options);
  std::vector<torch::Tensor> inputs;
  for (int i = 0; i < 6; ++i) inputs.push_back(torch::randn({3, 4}));
  for (int step = 0; step < 6; ++step) {
    if (step == 3) {
      torch::serialize::OutputArchive out;
      b->save(out);
      std::stringstream bytes;
      out.save_to(bytes);
      b = std::make_unique<AdamW>(resumed->parameters(), options);
      torch::serialize::InputArchive in;
      in.load_from(bytes);
      b->load(in);
    }
    straight->forward(inputs[step]).pow(2).sum().backward();
    resumed->forward(inputs[step]).pow(2).sum().backward();
    a.step(0.01);
    b->step(0.01);
    a.zero_grad();
    b->zero_grad();
  }
  for (size_t i = 0; i < straight->parameters().size(); ++i) {
    EXPECT_TRUE(torch::equal(straight->parameters()[i], resumed->parameters()[i]));
  }
}

TEST(AdamW, RefusesBadHyperparametersAndSgdsMitigations) {
  torch::nn::Linear net(3, 2);
  const auto make = [&](UpdateOptions o) { return AdamW(net->parameters(), o.kind(OptimizerKind::kAdamW)); };
  EXPECT_THROW(make(UpdateOptions().beta1(1.0)), UsageError);
  EXPECT_THROW(make(UpdateOptions().beta2(-0.1)), UsageError);
  EXPECT_THROW(make(UpdateOptions().eps(0)), UsageError);
  EXPECT_THROW(make(UpdateOptions().weight_prediction(true)), UsageError);
  EXPECT_THROW(make(UpdateOptions().delay_nesterov(true)), UsageError);
  AdamW adamw(net->parameters(), UpdateOptions().kind(OptimizerKind::kAdamW));
  EXPECT_THROW(adamw.set_step_values(0.1, 0), UsageError);  // CUDA graphs capture SGD only
}

TEST(AdamW, ACheckpointOfAnotherOptimizerIsRefusedInOneLine) {
  torch::nn::Linear net(3, 2);
  Sgd sgd(net->parameters(), UpdateOptions());
  torch::serialize::OutputArchive out;
  sgd.save(out);
  std::stringstream bytes;
  out.save_to(bytes);
  AdamW adamw(net->parameters(), UpdateOptions().kind(OptimizerKind::kAdamW));
  torch::serialize::InputArchive in;
  in.load_from(bytes);
  try {
    adamw.load(in);
    FAIL() << "loaded SGD state into AdamW";
  } catch (const RuntimeError& e) {
    EXPECT_STREQ(e.what(), "the checkpoint holds no AdamW state (written with another optimizer)");
  }
}

}  // namespace
}  // namespace stalepipe::optim
