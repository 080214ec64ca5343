// balance(): exact min-max partitioning, checked against brute force over every combination
// of allowed cut points (ties broken toward earlier cuts, as balance.h promises).
#include <algorithm>
#include <functional>
#include <limits>
#include <random>

#include <gtest/gtest.h>

#include "stalepipe/common/error.h"
#include "stalepipe/models/skips.h"
#include "stalepipe/models/zoo.h"
#include "stalepipe/partition/balance.h"
#include "stalepipe/partition/plan.h"
#include "stalepipe/partition/profile.h"

namespace stalepipe::partition {
namespace {

models::Model model_named(const std::string& name) {
  models::InputShape input;
  input.channels = 1;
  return models::make_model(name, input);
}

// Every (K-1)-subset of the cut layers in lexicographic order; keeps the first strict minimum.
std::vector<int> brute_force(const models::Model& model, const std::vector<double>& cost, int K) {
  const auto layers = model.cut_layers();
  std::vector<int> best, chosen;
  double best_cost = std::numeric_limits<double>::infinity();
  std::function<void(size_t)> visit = [&](size_t from) {
    if (static_cast<int>(chosen.size()) == K - 1) {
      const double c = max_partition_cost(model, cost, chosen);
      if (c < best_cost) best_cost = c, best = chosen;
      return;
    }
    for (size_t i = from; i < layers.size(); ++i) {
      chosen.push_back(layers[i]);
      visit(i + 1);
      chosen.pop_back();
    }
  };
  visit(0);
  return best;
}

TEST(Balance, MatchesBruteForceOnRandomCosts) {
  std::mt19937 rng(12345);
  // resnet8: 7 register positions, two of them inside each block; unet: a unit of two layers.
  for (const std::string name : {"lenet5", "resnet8", "unet"}) {
    const auto model = model_named(name);
    const int max_k = static_cast<int>(model.cut_layers().size()) + 1;
    for (int trial = 0; trial < 12; ++trial) {
      std::vector<double> cost(model.units.size());
      // Small integers make ties common, which exercises the tie-break.
      std::uniform_int_distribution<int> small(0, 4);
      std::uniform_real_distribution<double> real(0.0, 10.0);
      for (auto& c : cost) c = trial % 2 ? small(rng) : real(rng);
      for (int K = 1; K <= max_k; ++K) {
        const auto got = balance(model, cost, K);
        EXPECT_EQ(got, brute_force(model, cost, K)) << name << " trial " << trial << " K " << K;
        EXPECT_EQ(static_cast<int>(got.size()), K - 1);
        make_plan(model, got);  // a valid PPV
      }
    }
  }
}

TEST(Balance, EqualCostsOnResnet20SplitInTheMiddle) {
  // resnet20: conv1, 9 blocks of two units, fc = 20 units, one weight layer each. With costs
  // 1 each and K = 2 the best split is 10 + 10: after layer 10, inside block2_2.
  const auto model = model_named("resnet20");
  EXPECT_EQ(balance(model, std::vector<double>(20, 1.0), 2), std::vector<int>({10}));
}

// A profile in which every unit of resnet20 takes 1 ms: the balanced cut of 2 partitions lies
// inside a block (after layer 10, block2_2's first convolution) and beats the best cut between
// blocks, whose slower partition takes 11 ms against 10.
TEST(Balance, APicksACutInsideABlockWhereTheProfileSaysItBalancesBetter) {
  auto model = model_named("resnet20");
  Profile profile;
  profile.model = "resnet20";
  for (size_t u = 0; u < model.units.size(); ++u) {
    UnitProfile row;
    row.index = static_cast<int>(u);
    row.name = model.units[u].name;
    row.weight_layers = model.units[u].weight_layers;
    row.forward_ms = 0.25;
    row.backward_ms = 0.75;
    profile.units.push_back(row);
  }
  const auto cost = unit_costs(model, Balance::kTime, &profile);
  const auto ppv = balance(model, cost, 2);
  EXPECT_EQ(ppv, std::vector<int>({10}));
  EXPECT_TRUE(models::skip_live_after(model.units, static_cast<size_t>(model.unit_ending_at_layer(10))));
  EXPECT_DOUBLE_EQ(max_partition_cost(model, cost, ppv), 10.0);
  for (const int between_blocks : {9, 11}) EXPECT_DOUBLE_EQ(max_partition_cost(model, cost, {between_blocks}), 11.0);
}

TEST(Balance, TooManyPartitionsIsAUsageError) {
  const auto model = model_named("lenet5");
  try {
    balance(model, std::vector<double>(5, 1.0), 7);
    FAIL() << "expected UsageError";
  } catch (const UsageError& e) {
    EXPECT_STREQ(e.what(), "model lenet5 allows at most 5 partitions (4 register positions), asked for 7");
  }
  EXPECT_THROW(balance(model, std::vector<double>(4, 1.0), 2), UsageError);  // wrong cost count
  EXPECT_THROW(balance(model, std::vector<double>(5, 1.0), 0), UsageError);
  EXPECT_EQ(balance(model, std::vector<double>(5, 1.0), 5), std::vector<int>({1, 2, 3, 4}));
}

TEST(Balance, CostsByParamsAndFlops) {
  auto model = model_named("lenet5");
  const auto params = unit_costs(model, Balance::kParams);
  ASSERT_EQ(params.size(), 5u);
  EXPECT_EQ(params[0], 6 * 25 + 6);      // conv 6@5x5, 1 input channel
  EXPECT_EQ(params[2], 400 * 120 + 120);  // fc 120
  // Parameters per unit: 156, 2416, 48120, 10164, 850. K = 2: a cut after layer 2 leaves
  // 59134 in partition 2, after layer 3 the larger side is 50692 (partition 1): cut after 3.
  EXPECT_EQ(balance(model, params, 2), std::vector<int>({3}));
  const auto flops = unit_costs(model, Balance::kFlops);
  EXPECT_GT(flops[0], 0);
  EXPECT_THROW(unit_costs(model, Balance::kTime), UsageError);  // needs a profile
  EXPECT_THROW(balance_from_name("speed"), UsageError);
}

}  // namespace
}  // namespace stalepipe::partition
