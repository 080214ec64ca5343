// Model's bookkeeping (layer numbering, cut layers, unit lookup) on hand-built unit lists,
// including the cases the zoo never produces (weight-less units, cut_after = false).
#include <gtest/gtest.h>

#include "stalepipe/models/model.h"

namespace stalepipe::models {
namespace {

Unit make_unit(const std::string& name, std::vector<int> layers, bool cut_after = true) {
  Unit unit;
  unit.name = name;
  unit.module = torch::nn::AnyModule(torch::nn::Linear(2, 2));
  if (layers.empty()) {
    unit.module = torch::nn::AnyModule(torch::nn::ReLU());
  }
  unit.weight_layers = std::move(layers);
  unit.cut_after = cut_after;
  return unit;
}

TEST(ModelTest, EmptyModelHasNoLayersAndNoCuts) {
  Model model;
  EXPECT_EQ(model.num_weight_layers(), 0);
  EXPECT_TRUE(model.cut_layers().empty());
  EXPECT_EQ(model.unit_ending_at_layer(1), -1);
  EXPECT_EQ(model.num_parameters(), 0);
}

TEST(ModelTest, CutLayersSkipLastLayerWeightlessUnitsAndUncuttableUnits) {
  Model model;
  model.units = {make_unit("a", {1}), make_unit("pool", {}), make_unit("b", {2, 3}),
                 make_unit("c", {4}, /*cut_after=*/false), make_unit("d", {5}),
                 make_unit("e", {6})};
  EXPECT_EQ(model.num_weight_layers(), 6);
  EXPECT_EQ(model.cut_layers(), (std::vector<int>{1, 3, 5}));
  EXPECT_EQ(model.unit_ending_at_layer(1), 0);
  EXPECT_EQ(model.unit_ending_at_layer(2), -1);  // inside unit b
  EXPECT_EQ(model.unit_ending_at_layer(3), 2);
  EXPECT_EQ(model.unit_ending_at_layer(4), -1);  // unit c forbids a register after it
  EXPECT_EQ(model.unit_ending_at_layer(5), 4);
  EXPECT_EQ(model.unit_ending_at_layer(6), 5);   // exists, though 6 is no cut layer
  EXPECT_EQ(model.unit_ending_at_layer(0), -1);
  EXPECT_EQ(model.unit_ending_at_layer(7), -1);
  EXPECT_EQ(model.num_parameters(), 5 * 6);
}

TEST(ModelTest, AsSequentialSharesModulesInOrder) {
  Model model;
  model.units = {make_unit("first", {1}), make_unit("act", {}), make_unit("second", {2})};
  torch::nn::Sequential sequential = model.as_sequential();
  ASSERT_EQ(sequential->size(), 3u);
  EXPECT_EQ(sequential->named_children().keys(),
            (std::vector<std::string>{"first", "act", "second"}));
  EXPECT_EQ(sequential[0].get(), model.units[0].module.ptr().get());
  // Training through the Sequential updates the model: same tensors.
  EXPECT_TRUE(sequential->parameters()[0].is_same(model.units[0].module.ptr()->parameters()[0]));
}

TEST(ModelTest, AsSequentialRejectsDottedNames) {
  Model model;
  model.units = {make_unit("bad.name", {1})};
  EXPECT_THROW(model.as_sequential(), c10::Error);
}

}  // namespace
}  // namespace stalepipe::models
