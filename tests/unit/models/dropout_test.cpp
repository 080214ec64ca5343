// Exact dropout: masks come from the thread's unit generator, LibTorch's stock dropout modules
// are replaced where they can be and refused with their path where they cannot.
#include <gtest/gtest.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/linear.h>

#include <thread>

#include "stalepipe/common/error.h"
#include "stalepipe/models/dropout.h"
#include "stalepipe/models/model_builder.h"

namespace stalepipe::models {
namespace {

namespace nn = torch::nn;

torch::Tensor ones() { return torch::ones({64, 8, 4, 4}); }

TEST(Dropout, ARandomScopeFixesTheMaskWhateverTheGlobalGeneratorDid) {
  torch::Tensor a, b, c;
  torch::manual_seed(1);
  {
    RandomScope scope(42);
    a = models::dropout(ones(), 0.5, true);
  }
  torch::manual_seed(2);
  torch::rand({100});  // the global generator moves on; the scope's does not care
  {
    RandomScope scope(42);
    b = models::dropout(ones(), 0.5, true);
  }
  {
    RandomScope scope(43);
    c = models::dropout(ones(), 0.5, true);
  }
  EXPECT_TRUE(torch::equal(a, b));
  EXPECT_FALSE(torch::equal(a, c)) << "another seed must give another mask, or the test above proves nothing";
  // Kept values are scaled by 1/(1-p); about half are kept.
  EXPECT_TRUE(torch::logical_or(a.eq(0), a.eq(2)).all().item<bool>());
  EXPECT_NEAR(a.mean().item<double>(), 1.0, 0.05);
}

TEST(Dropout, ScopesAreThreadLocalAndNest) {
  torch::Tensor here, there, inner, outer_after;
  RandomScope outer(7);
  std::thread other([&] {
    RandomScope scope(7);
    there = models::dropout(ones(), 0.3, true);
  });
  other.join();
  here = models::dropout(ones(), 0.3, true);
  EXPECT_TRUE(torch::equal(here, there));
  {
    RandomScope nested(8);
    inner = models::dropout(ones(), 0.3, true);
  }
  outer_after = models::dropout(ones(), 0.3, true);  // the outer generator again, one draw further
  EXPECT_FALSE(torch::equal(inner, outer_after));
  RandomScope replay(7);
  models::dropout(ones(), 0.3, true);
  EXPECT_TRUE(torch::equal(models::dropout(ones(), 0.3, true), outer_after));
}

TEST(Dropout, OutsideAnyScopeItDrawsFromLibTorchsGenerator) {
  torch::manual_seed(5);
  const auto a = models::dropout(ones(), 0.5, true);
  torch::manual_seed(5);
  EXPECT_TRUE(torch::equal(a, models::dropout(ones(), 0.5, true)));
}

TEST(Dropout, FeatureKindsDropWholeChannelsAndAlphaKeepsTheMoments) {
  RandomScope scope(3);
  const auto f = models::dropout(ones(), 0.5, true, DropoutKind::kFeature);
  const auto per_channel = f.amax({2, 3}).eq(f.amin({2, 3}));
  EXPECT_TRUE(per_channel.all().item<bool>()) << "a channel is kept or dropped as a whole";
  const auto x = torch::randn({200000});
  const auto a = models::alpha_dropout(x, 0.2, true);
  EXPECT_NEAR(a.mean().item<double>(), 0.0, 0.02);
  EXPECT_NEAR(a.std().item<double>(), 1.0, 0.02);
}

TEST(Dropout, IsTheIdentityInEvalModeOrAtZeroAndRefusesABadProbability) {
  const auto x = torch::randn({4, 3});
  EXPECT_TRUE(torch::equal(models::dropout(x, 0.5, false), x));
  EXPECT_TRUE(torch::equal(models::dropout(x, 0.0, true), x));
  Dropout module(0.5);
  module->eval();
  EXPECT_TRUE(torch::equal(module(x), x));
  EXPECT_THROW(models::dropout(x, 1.0, true), UsageError);
  EXPECT_THROW(Dropout(-0.1), UsageError);
}

// A module that holds a stock dropout as a member: nothing can swap what `drop` points to.
struct HeadImpl : nn::Module {
  HeadImpl() : fc(register_module("fc", nn::Linear(16, 10))), drop(register_module("drop", nn::Dropout(0.5))) {}
  torch::Tensor forward(torch::Tensor x) { return fc(drop(x.flatten(1))); }
  nn::Linear fc;
  nn::Dropout drop;
};
TORCH_MODULE(Head);

TEST(Dropout, TheBuilderReplacesStockDropoutInSequentialsAndAsUnits) {
  auto seq = nn::Sequential(nn::Flatten(), nn::Dropout(0.25), nn::Linear(16, 16), nn::Dropout2d(0.1));
  const Model model = ModelBuilder("m", {1, 4, 4, 10})
                          .add("body", seq)
                          .add("drop", nn::AlphaDropout(0.3))
                          .add("fc", nn::Linear(16, 10))
                          .build();
  int ours = 0;
  for (const auto& unit : model.units) {
    for (const auto& m : unit.module.ptr()->modules()) {
      EXPECT_FALSE(stock_dropout_options(*m)) << unit.name << " still holds " << m->name();
      if (auto* d = m->as<Dropout>()) {
        ++ours;
        if (d->options.p() == 0.25) EXPECT_EQ(d->options.kind(), DropoutKind::kElement);
        if (d->options.p() == 0.1) EXPECT_EQ(d->options.kind(), DropoutKind::kFeature);
        if (d->options.p() == 0.3) EXPECT_EQ(d->options.kind(), DropoutKind::kAlpha);
      }
    }
  }
  EXPECT_EQ(ours, 3);
  // The Sequential runs the replacement, not only its registered children.
  RandomScope a(1);
  const auto y1 = seq->forward(torch::ones({64, 1, 4, 4}));
  RandomScope b(1);
  EXPECT_TRUE(torch::equal(y1, seq->forward(torch::ones({64, 1, 4, 4}))));
}

TEST(Dropout, StockDropoutHeldAsAMemberIsRefusedWithItsPath) {
  try {
    ModelBuilder("m", {1, 4, 4, 10}).add("head", Head()).build();
    FAIL() << "expected a UsageError";
  } catch (const UsageError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("model m: unit 1 (head): head.drop is torch::nn::DropoutImpl"), std::string::npos) << what;
    EXPECT_NE(what.find("stalepipe::models::Dropout"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace stalepipe::models
