// describe_units / format_layer_table: shapes, parameter sums, hand-counted FLOPs, mode restore.
#include <gtest/gtest.h>

#include "stalepipe/common/error.h"
#include "stalepipe/models/layer_table.h"
#include "stalepipe/models/zoo.h"

namespace stalepipe::models {
namespace {

using Shape = std::vector<int64_t>;

TEST(LayerTableTest, LeNet5RowsHaveHandCountedShapesParametersAndFlops) {
  Model model = make_model("lenet5", InputShape{});
  const std::vector<UnitInfo> rows = describe_units(model);
  ASSERT_EQ(rows.size(), 5u);
  EXPECT_EQ(rows[0].output_shape, (Shape{6, 14, 14}));
  EXPECT_EQ(rows[1].output_shape, (Shape{16, 5, 5}));
  EXPECT_EQ(rows[2].output_shape, (Shape{120}));
  EXPECT_EQ(rows[3].output_shape, (Shape{84}));
  EXPECT_EQ(rows[4].output_shape, (Shape{10}));
  EXPECT_EQ(rows[2].name, "fc1");
  EXPECT_EQ(rows[2].weight_layers, (std::vector<int>{3}));
  // 2 FLOPs per multiply-add: conv1 2*6*25*28*28 = 235,200; conv2 2*16*6*25*10*10 = 480,000;
  // fc1 2*400*120 = 96,000; fc2 2*120*84 = 20,160; fc3 2*84*10 = 1,680. Total 833,040.
  const double expected[] = {0.2352, 0.48, 0.096, 0.02016, 0.00168};
  double total_mflops = 0.0;
  int64_t total_parameters = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    EXPECT_NEAR(rows[i].forward_mflops, expected[i], 1e-12) << rows[i].name;
    total_mflops += rows[i].forward_mflops;
    total_parameters += rows[i].parameters;
  }
  EXPECT_NEAR(total_mflops, 0.83304, 1e-12);
  EXPECT_EQ(total_parameters, model.num_parameters());
  EXPECT_EQ(rows[0].parameters, 156);
}

TEST(LayerTableTest, ResNet20FlopsMatchHandCount) {
  Model model = make_model("resnet20", InputShape{3, 32, 32, 10});
  const std::vector<UnitInfo> rows = describe_units(model);
  ASSERT_EQ(rows.size(), 20u);  // stem, 9 blocks of two units, fc
  EXPECT_EQ(rows[6].output_shape, (Shape{16, 32, 32}));  // block1_3b
  EXPECT_EQ(rows[7].output_shape, (Shape{32, 16, 16}));  // block2_1a
  EXPECT_EQ(rows[18].output_shape, (Shape{64, 8, 8}));   // block3_3b
  // stem 2*16*27*1024 = 884,736; every 3x3 conv after it costs 4,718,592 except the two
  // stride-2 ones (2,359,296 each): 16 * 4,718,592 + 2 * 2,359,296; fc 2*64*10 = 1,280.
  // Total 81,102,080 FLOPs (40.6M multiply-adds; He et al. quote ~41M for ResNet-20).
  double total = 0.0;
  for (const UnitInfo& row : rows) {
    total += row.forward_mflops;
  }
  EXPECT_NEAR(rows[0].forward_mflops, 0.884736, 1e-9);
  EXPECT_NEAR(rows[7].forward_mflops, 2359296.0 * 1e-6, 1e-9);  // block2_1's stride-2 conv
  EXPECT_NEAR(rows[8].forward_mflops, 4718592.0 * 1e-6, 1e-9);
  EXPECT_NEAR(total, 81.10208, 1e-8);
}

TEST(LayerTableTest, EveryZooModelDescribesConsistently) {
  for (const std::string name : {"alexnet", "vgg16", "resnet8", "resnet18"}) {
    SCOPED_TRACE(name);
    Model model = make_model(name, InputShape{3, 32, 32, 10});
    const std::vector<UnitInfo> rows = describe_units(model);
    ASSERT_EQ(rows.size(), model.units.size());
    int64_t parameters = 0;
    for (const UnitInfo& row : rows) {
      EXPECT_GT(row.forward_mflops, 0.0) << row.name;
      parameters += row.parameters;
    }
    EXPECT_EQ(parameters, model.num_parameters());
    EXPECT_EQ(rows.back().output_shape, (Shape{10}));
  }
}

TEST(LayerTableTest, DescribeRestoresModesAndLeavesRunningStatsAlone) {
  Model model = make_model("resnet8", InputShape{3, 32, 32, 10});
  model.as_sequential()->train();
  model.units[1].module.ptr()->eval();
  const torch::Tensor running_mean =
      model.as_sequential()->named_buffers()["conv1.bn.running_mean"].clone();
  describe_units(model);
  EXPECT_TRUE(model.units[0].module.ptr()->is_training());
  EXPECT_FALSE(model.units[1].module.ptr()->is_training());
  EXPECT_TRUE(model.units[2].module.ptr()->is_training());
  EXPECT_TRUE(torch::equal(
      model.as_sequential()->named_buffers()["conv1.bn.running_mean"], running_mean));
}

TEST(LayerTableTest, SequentialUnitsAreWalkedChildByChild) {
  Model model;
  model.name = "custom";
  model.input = InputShape{1, 8, 8, 4};
  Unit unit;
  unit.name = "conv";
  unit.module = torch::nn::AnyModule(torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 2, 3)));
  unit.weight_layers = {1};
  model.units.push_back(unit);
  unit.name = "head";
  unit.module = torch::nn::AnyModule(torch::nn::Flatten());
  unit.weight_layers = {};
  model.units.push_back(unit);
  const std::vector<UnitInfo> rows = describe_units(model);
  EXPECT_NEAR(rows[0].forward_mflops, 2e-6 * 2 * 9 * 36, 1e-15);
  EXPECT_EQ(rows[1].output_shape, (Shape{72}));
  EXPECT_EQ(rows[1].forward_mflops, 0.0);
}

TEST(LayerTableTest, FormattedTableShowsRegisterPositionsAndTotals) {
  Model model = make_model("resnet20", InputShape{3, 32, 32, 10});
  const std::string table = format_layer_table(model, describe_units(model));
  EXPECT_NE(table.find("model resnet20: input 3x32x32, 10 classes, 20 weight layers\n"),
            std::string::npos);
  EXPECT_NE(table.find("register after"), std::string::npos);
  EXPECT_NE(table.find("269,722"), std::string::npos);
  EXPECT_NE(table.find("81.102"), std::string::npos);
  // Rows of block1_3: layer 6, which stashes the block's input, and layer 7, which pops it;
  // a register may follow either.
  const size_t row = table.find("block1_3a");
  ASSERT_NE(row, std::string::npos);
  const std::string line = table.substr(row, table.find('\n', row) - row);
  EXPECT_NE(line.find("  6  "), std::string::npos) << line;
  EXPECT_EQ(line.substr(line.size() - 16), "stashes block1_3") << line;
  const size_t tail = table.find("block1_3b");
  const std::string tail_line = table.substr(tail, table.find('\n', tail) - tail);
  EXPECT_NE(tail_line.find("  7  "), std::string::npos) << tail_line;
  EXPECT_EQ(tail_line.substr(tail_line.size() - 13), "pops block1_3") << tail_line;
  EXPECT_NE(table.find("skip tensors"), std::string::npos);
  EXPECT_EQ(std::count(table.begin(), table.end(), '\n'), 1 + 1 + 20 + 1);
}

TEST(LayerTableTest, LeNet5TableIsAlignedAsDocumented) {
  Model model = make_model("lenet5", InputShape{});
  EXPECT_EQ(format_layer_table(model, describe_units(model)),
            "model lenet5: input 1x32x32, 10 classes, 5 weight layers\n"
            " unit  name   layers  output   params  MFLOPs  register after\n"
            "    0  conv1  1       6x14x14     156   0.235  1\n"
            "    1  conv2  2       16x5x5    2,416   0.480  2\n"
            "    2  fc1    3       120      48,120   0.096  3\n"
            "    3  fc2    4       84       10,164   0.020  4\n"
            "    4  fc3    5       10          850   0.002\n"
            "total         1-5              61,706   0.833\n");
}

}  // namespace
}  // namespace stalepipe::models
