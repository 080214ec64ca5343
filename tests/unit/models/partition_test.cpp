// Units must compose into partitions without changing any result: the engine runs each
// partition as a Sequential over a range of units and joins them with detached activations.
#include <gtest/gtest.h>

#include "stalepipe/models/skips.h"
#include "stalepipe/models/zoo.h"

namespace stalepipe::models {
namespace {

Model seeded_model(const std::string& name, int64_t channels) {
  torch::manual_seed(1);
  InputShape input;
  input.channels = channels;
  return make_model(name, input);
}

torch::nn::Sequential units_between(const Model& model, size_t begin, size_t end) {
  torch::nn::Sequential sequential;
  for (size_t i = begin; i < end; ++i) {
    sequential->push_back(model.units[i].name, model.units[i].module);
  }
  return sequential;
}

void expect_same_gradients(const torch::nn::Sequential& expected, const Model& actual) {
  const auto expected_parameters = expected->named_parameters();
  const auto actual_parameters = actual.as_sequential()->named_parameters();
  ASSERT_EQ(expected_parameters.keys(), actual_parameters.keys());
  for (size_t i = 0; i < expected_parameters.size(); ++i) {
    const torch::Tensor& want = expected_parameters[i].value().grad();
    const torch::Tensor& got = actual_parameters[i].value().grad();
    ASSERT_TRUE(want.defined() && got.defined()) << expected_parameters[i].key();
    EXPECT_TRUE(torch::equal(want, got)) << expected_parameters[i].key();
  }
}

// Chains only: a network with skip tensors splits through exec::Stage (tests/unit/exec/skips_test.cpp).
TEST(PartitionTest, SequentialEqualsRunningUnitsByHand) {
  for (const std::string name : {"lenet5", "alexnet"}) {
    SCOPED_TRACE(name);
    Model model = seeded_model(name, 3);
    torch::manual_seed(7);
    const torch::Tensor input = torch::randn({2, 3, 32, 32});
    torch::NoGradGuard no_grad;
    model.as_sequential()->eval();
    torch::Tensor x = input;
    for (Unit& unit : model.units) {
      x = unit.module.forward(x);
    }
    EXPECT_TRUE(torch::equal(model.forward(input), x));
  }
}

// For every cut layer: split forward + the manual backward chain (part 2, then part 1 with the
// register's input gradient) is bit-identical to the unsplit model, in train mode.
TEST(PartitionTest, SplittingAtAnyCutLayerChangesNoOutputAndNoGradient) {
  for (const std::string name : {"lenet5", "alexnet"}) {
    torch::manual_seed(7);
    const torch::Tensor input = torch::randn({2, 3, 32, 32});
    Model whole = seeded_model(name, 3);
    torch::nn::Sequential reference = whole.as_sequential();
    reference->train();
    const torch::Tensor expected = reference->forward(input);
    expected.sum().backward();

    for (int layer : whole.cut_layers()) {
      SCOPED_TRACE(name + " cut after layer " + std::to_string(layer));
      Model split = seeded_model(name, 3);
      const int last_unit = split.unit_ending_at_layer(layer);
      ASSERT_GE(last_unit, 0);
      auto part1 = units_between(split, 0, static_cast<size_t>(last_unit) + 1);
      auto part2 = units_between(split, static_cast<size_t>(last_unit) + 1, split.units.size());
      part1->train();
      part2->train();
      const torch::Tensor activation = part1->forward(input);
      const torch::Tensor received = activation.detach().requires_grad_(true);
      const torch::Tensor output = part2->forward(received);
      EXPECT_TRUE(torch::equal(output, expected));
      output.sum().backward();
      ASSERT_TRUE(received.grad().defined());
      activation.backward(received.grad());
      expect_same_gradients(reference, split);
    }
  }
}

// A unit's input and the skip tensors it pops may be leaves that require grad (what a register
// hands over): no unit may write to them.
TEST(PartitionTest, NoUnitModifiesItsInputOrWhatItPops) {
  for (const std::string name : {"lenet5", "alexnet", "vgg16", "resnet8", "resnet18"}) {
    SCOPED_TRACE(name);
    Model model = seeded_model(name, 1);
    torch::Tensor x = torch::randn({2, 1, 32, 32});
    SkipTable skips;  // leaves, as a partition that receives them holds them
    for (Unit& unit : model.units) {
      std::vector<torch::Tensor> leaves = {x.detach().requires_grad_(true)};
      for (const std::string& pop : unit.skips.pops) leaves.push_back(skips.at(pop));
      std::vector<torch::Tensor> copies;
      std::vector<int64_t> versions;
      for (const auto& leaf : leaves) {
        copies.push_back(leaf.detach().clone());
        versions.push_back(leaf._version());
      }
      const torch::Tensor out = forward_unit(unit.module, unit.name, unit.skips, leaves[0], skips);
      out.sum().backward();
      for (size_t i = 0; i < leaves.size(); ++i) {
        EXPECT_EQ(leaves[i]._version(), versions[i]) << unit.name << " input " << i;
        EXPECT_TRUE(torch::equal(leaves[i].detach(), copies[i])) << unit.name << " input " << i;
        EXPECT_TRUE(leaves[i].grad().defined()) << unit.name << " input " << i;
      }
      for (const std::string& stash : unit.skips.stashes) skips[stash] = skips[stash].detach().requires_grad_(true);
      x = out.detach();
    }
  }
}

}  // namespace
}  // namespace stalepipe::models
