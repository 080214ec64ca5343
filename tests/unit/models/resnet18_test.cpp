// The zoo's resnet18 against torchvision's resnet18: parameters, FLOPs, structure, numbering,
// input sizes, initialisation.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "stalepipe/common/error.h"
#include "stalepipe/models/blocks.h"
#include "stalepipe/models/layer_table.h"
#include "stalepipe/models/zoo.h"

namespace stalepipe::models {
namespace {

Model resnet18(int64_t channels, int64_t size, int64_t classes) {
  torch::manual_seed(1);
  return make_model("resnet18", InputShape{channels, size, size, classes});
}

// Counted by torchvision 0.14 (/usr/bin/python3):
//   m = torchvision.models.resnet18(); sum(p.numel() for p in m.parameters())   # 11689512
// and, with forward hooks summing each Conv2d's and Linear's multiply-adds on a 1x3x224x224
// input, 1,814,073,344 multiply-adds: 3,628,146,688 FLOPs (the zoo counts 2 per multiply-add).
TEST(ResNet18Test, ParametersAndFlopsAreTorchvisions) {
  Model model = resnet18(3, 224, 1000);
  EXPECT_EQ(model.num_parameters(), 11689512);
  double mflops = 0;
  for (const UnitInfo& unit : describe_units(model)) {
    mflops += unit.forward_mflops;
  }
  EXPECT_NEAR(mflops, 3628.146688, 1e-6);
}

TEST(ResNet18Test, StructureUnitsAndNumbering) {
  const Model model = resnet18(3, 32, 10);
  EXPECT_EQ(model.name, "resnet18");
  ASSERT_EQ(model.units.size(), 18u);
  const char* const kBlocks[] = {"block1_1", "block1_2", "block2_1", "block2_2",
                                 "block3_1", "block3_2", "block4_1", "block4_2"};
  EXPECT_EQ(model.units.front().name, "conv1");
  EXPECT_EQ(model.units.back().name, "fc");
  EXPECT_EQ(model.num_weight_layers(), 18);
  std::vector<int> every_layer(17);
  std::iota(every_layer.begin(), every_layer.end(), 1);
  EXPECT_EQ(model.cut_layers(), every_layer);
  // Projection shortcuts exactly where the shape changes: the first block of stages 2-4.
  for (size_t b = 0; b < 8; ++b) {
    const Unit& head = model.units[1 + 2 * b];
    const Unit& tail = model.units[2 + 2 * b];
    EXPECT_EQ(head.name, std::string(kBlocks[b]) + "a");
    EXPECT_EQ(tail.name, std::string(kBlocks[b]) + "b");
    EXPECT_EQ(head.weight_layers, (std::vector<int>{2 + 2 * static_cast<int>(b)}));
    EXPECT_EQ(head.skips.stashes, (std::vector<std::string>{kBlocks[b]}));
    EXPECT_EQ(tail.skips.pops, (std::vector<std::string>{kBlocks[b]}));
    const auto* block = tail.module.ptr()->as<BasicBlockTailImpl>();
    ASSERT_NE(block, nullptr) << kBlocks[b];
    const bool first_of_later_stage = b == 2 || b == 4 || b == 6;
    EXPECT_EQ(static_cast<bool>(block->shortcut_conv), first_of_later_stage) << kBlocks[b];
    EXPECT_EQ(block->options.stride(), first_of_later_stage ? 2 : 1) << kBlocks[b];
  }
  EXPECT_TRUE(prefers_channels_last("resnet18"));
}

// Stem /4, stages /8: 32x32 reaches 1x1 at stage 4, and 64x64 2x2; both pool to 512 features.
TEST(ResNet18Test, TakesAnyInputFrom32x32) {
  for (const int64_t size : {32, 64}) {
    Model model = resnet18(1, size, 10);
    const auto rows = describe_units(model);
    EXPECT_EQ(rows[0].output_shape, (std::vector<int64_t>{64, size / 4, size / 4}));
    EXPECT_EQ(rows[16].output_shape, (std::vector<int64_t>{512, size / 32, size / 32}));
    model.as_sequential()->train();
    const torch::Tensor out = model.forward(torch::randn({2, 1, size, size}));
    EXPECT_EQ(out.sizes(), (std::vector<int64_t>{2, 10}));
    EXPECT_TRUE(torch::isfinite(out).all().item<bool>());
  }
  Model odd = make_model("resnet18", InputShape{3, 45, 37, 5});
  torch::NoGradGuard no_grad;
  EXPECT_EQ(odd.forward(torch::randn({1, 3, 45, 37})).sizes(),
            (std::vector<int64_t>{1, 5}));
}

TEST(ResNet18Test, InputUnder32x32IsAUsageError) {
  for (const auto& shape : {InputShape{3, 31, 32, 10}, InputShape{3, 32, 16, 10}}) {
    try {
      make_model("resnet18", shape);
      FAIL() << "expected UsageError for " << shape.height << "x" << shape.width;
    } catch (const UsageError& error) {
      EXPECT_NE(std::string(error.what()).find("model resnet18: input " +
                                               std::to_string(shape.height) + "x" +
                                               std::to_string(shape.width) + " is too small"),
                std::string::npos)
          << error.what();
    }
  }
}

TEST(ResNet18Test, InitialisationIsKaimingFanOutWithUnitBatchNorm) {
  const Model model = resnet18(3, 32, 10);
  const auto parameters = model.as_sequential()->named_parameters();
  // The stem: 64 out channels, 7x7: fan_out = 3,136; the projection of block4_1: 512, 1x1.
  EXPECT_NEAR(parameters["conv1.conv.weight"].std().item<double>(), std::sqrt(2.0 / 3136), 0.002);
  EXPECT_NEAR(parameters["block4_1b.shortcut_conv.weight"].std().item<double>(),
              std::sqrt(2.0 / 512), 0.002);
  EXPECT_TRUE(torch::equal(parameters["block4_1b.shortcut_bn.weight"], torch::ones({512})));
  EXPECT_TRUE(torch::equal(parameters["block4_1b.shortcut_bn.bias"], torch::zeros({512})));
}

}  // namespace
}  // namespace stalepipe::models
