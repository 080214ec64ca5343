// The zoo: parameter counts against hand counts and the published figures, output shapes,
// weight-layer numbering and cut layers, error messages, reproducibility, serialisation.
#include <gtest/gtest.h>

#include <numeric>
#include <sstream>

#include "stalepipe/common/error.h"
#include "stalepipe/models/dropout.h"
#include "stalepipe/models/zoo.h"

namespace stalepipe::models {
namespace {

InputShape input_with_channels(int64_t channels) {
  InputShape input;
  input.channels = channels;
  return input;
}

Model seeded_model(const std::string& name, int64_t channels, uint64_t seed = 1) {
  torch::manual_seed(seed);
  return make_model(name, input_with_channels(channels));
}

std::string usage_error_message(const std::string& name, const InputShape& input = {}) {
  try {
    make_model(name, input);
  } catch (const UsageError& error) {
    return error.what();
  }
  return "(no UsageError)";
}

TEST(ZooTest, ParameterCountsMatchHandCountsAndPublishedFigures) {
  // lenet5, 1 channel: conv1 6*25+6 = 156, conv2 16*6*25+16 = 2,416, fc1 400*120+120 = 48,120,
  // fc2 120*84+84 = 10,164, fc3 84*10+10 = 850.
  EXPECT_EQ(seeded_model("lenet5", 1).num_parameters(), 61706);
  // alexnet, 3 channels: conv1 3*64*25+64 = 4,864, conv2 64*192*9+192 = 110,784,
  // conv3 192*384*9+384 = 663,936, conv4 384*256*9+256 = 884,992, conv5 256*256*9+256 =
  // 590,080, fc1 1024*4096+4096 = 4,198,400, fc2 4096*4096+4096 = 16,781,312,
  // fc3 4096*10+10 = 40,970. Sum 23,275,338 (88.8 MiB; the paper's table 9: 88.87 MB).
  EXPECT_EQ(seeded_model("alexnet", 3).num_parameters(), 23275338);
  // vgg16, 3 channels: conv weights (no bias) 3*64*9 + 64*64*9 + 64*128*9 + 128*128*9 +
  // 128*256*9 + 2*256*256*9 + 256*512*9 + 5*512*512*9 = 14,710,464; BN 2*4,224 = 8,448;
  // fc 2*(512*512+512) + 512*10+10 = 530,442. Sum 15,249,354 (58.17 MiB; table 9: 58.16 MB).
  EXPECT_EQ(seeded_model("vgg16", 3).num_parameters(), 15249354);
  // He et al. 2016, table 6: ResNet-20 0.27M, ResNet-56 0.85M, ResNet-110 1.7M.
  // resnet20: stem 432+32, stage 1 3*2*(2,304+32), stage 2 (4,608+64) + (9,216+64) +
  // 4*(9,216+64), stage 3 (18,432+128) + (36,864+128) + 4*(36,864+128), fc 650.
  EXPECT_EQ(seeded_model("resnet20", 3).num_parameters(), 269722);
  EXPECT_EQ(seeded_model("resnet56", 3).num_parameters(), 853018);
  EXPECT_EQ(seeded_model("resnet110", 3).num_parameters(), 1727962);
}

TEST(ZooTest, EveryModelMapsBatchToClassScoresForOneAndThreeChannels) {
  for (int64_t channels : {1, 3}) {
    for (const std::string name : {"lenet5", "alexnet", "vgg16", "resnet20", "resnet18"}) {
      SCOPED_TRACE(name + " with " + std::to_string(channels) + " channels");
      Model model = seeded_model(name, channels);
      torch::NoGradGuard no_grad;
      const torch::Tensor out = model.forward(
          torch::randn({2, channels, 32, 32}));
      EXPECT_EQ(out.sizes(), (std::vector<int64_t>{2, 10}));
      EXPECT_TRUE(torch::isfinite(out).all().item<bool>());
    }
  }
}

TEST(ZooTest, ClassCountAndUnpaddedMnistSizeAreHonoured) {
  InputShape input;
  input.height = input.width = 28;
  input.num_classes = 7;
  Model model = make_model("lenet5", input);
  torch::NoGradGuard no_grad;
  EXPECT_EQ(model.forward(torch::zeros({3, 1, 28, 28})).sizes(),
            (std::vector<int64_t>{3, 7}));
}

TEST(ZooTest, WeightLayerNumberingAndCutLayers) {
  const Model lenet = seeded_model("lenet5", 1);
  EXPECT_EQ(lenet.num_weight_layers(), 5);
  EXPECT_EQ(lenet.units.size(), 5u);
  EXPECT_EQ(lenet.cut_layers(), (std::vector<int>{1, 2, 3, 4}));

  const Model alexnet = seeded_model("alexnet", 3);
  EXPECT_EQ(alexnet.num_weight_layers(), 8);
  EXPECT_EQ(alexnet.cut_layers(), (std::vector<int>{1, 2, 3, 4, 5, 6, 7}));

  const Model vgg = seeded_model("vgg16", 3);
  EXPECT_EQ(vgg.num_weight_layers(), 16);
  EXPECT_EQ(vgg.cut_layers().size(), 15u);

  const Model resnet20 = seeded_model("resnet20", 3);
  EXPECT_EQ(resnet20.num_weight_layers(), 20);
  EXPECT_EQ(resnet20.units.size(), 1u + 18u + 1u);  // a block is two units
  std::vector<int> every_layer(19);
  std::iota(every_layer.begin(), every_layer.end(), 1);
  EXPECT_EQ(resnet20.cut_layers(), every_layer);
  EXPECT_EQ(resnet20.unit_ending_at_layer(7), 6);  // stem + stage 1: the paper's PPV 7
  EXPECT_EQ(resnet20.units[6].name, "block1_3b");
  EXPECT_EQ(resnet20.units[6].weight_layers, (std::vector<int>{7}));
  EXPECT_EQ(resnet20.unit_ending_at_layer(8), 7);  // inside block2_1, after its first conv
  EXPECT_EQ(resnet20.units[7].skips.stashes, (std::vector<std::string>{"block2_1"}));
  EXPECT_EQ(resnet20.units[8].skips.pops, (std::vector<std::string>{"block2_1"}));
  EXPECT_EQ(resnet20.units.back().name, "fc");
  EXPECT_EQ(resnet20.units.back().weight_layers, (std::vector<int>{20}));

  const Model resnet56 = seeded_model("resnet56", 3);
  const std::vector<int> cuts = resnet56.cut_layers();
  EXPECT_NE(std::find(cuts.begin(), cuts.end(), 19), cuts.end());  // table 5's PPV
}

TEST(ZooTest, AnyResNetDepthSixNPlusTwoBuildsWithTheRightNumbering) {
  for (int n = 1; n <= 60; ++n) {
    const int depth = 6 * n + 2;
    const Model model = make_model("resnet" + std::to_string(depth), input_with_channels(3));
    ASSERT_EQ(model.name, "resnet" + std::to_string(depth));
    ASSERT_EQ(model.num_weight_layers(), depth);
    ASSERT_EQ(model.units.size(), static_cast<size_t>(6 * n + 2));
    const std::vector<int> cuts = model.cut_layers();
    ASSERT_EQ(cuts.size(), static_cast<size_t>(depth - 1));
    ASSERT_EQ(cuts.back(), depth - 1);
    ASSERT_NE(std::find(cuts.begin(), cuts.end(), 2 * n + 1), cuts.end()) << depth;
  }
}

// The U-Net's skips jump over units: enc1 from the first unit to the fifth.
TEST(ZooTest, UNetGivesPerPixelLogitsAndItsSkipsJumpOverUnits) {
  torch::manual_seed(3);
  const Model unet = make_model("unet", InputShape{1, 32, 32, 4});
  EXPECT_EQ(unet.num_weight_layers(), 8);
  EXPECT_EQ(unet.cut_layers(), (std::vector<int>{1, 2, 3, 5, 7}));
  EXPECT_EQ(unet.units[0].skips.stashes, (std::vector<std::string>{"enc1"}));
  EXPECT_EQ(unet.units[4].skips.pops, (std::vector<std::string>{"enc1"}));
  EXPECT_EQ(unet.forward(torch::randn({2, 1, 32, 32})).sizes(), (std::vector<int64_t>{2, 4, 32, 32}));
  EXPECT_EQ(usage_error_message("unet", InputShape{1, 30, 32, 4}),
            "model unet: input 30x32 does not halve twice; height and width must be multiples of 4");
}

TEST(ZooTest, BadNamesAndDepthsAreUsageErrorsThatSayWhatIsValid) {
  const std::string depths =
      ": ResNet depth must be 6n+2 (8, 14, 20, 26, 32, ...) or 18 (the ImageNet ResNet-18), got ";
  EXPECT_EQ(usage_error_message("resnet21"), "model resnet21" + depths + "21");
  EXPECT_EQ(usage_error_message("resnet19"), "model resnet19" + depths + "19");
  EXPECT_EQ(usage_error_message("resnet0"), "model resnet0" + depths + "0");
  EXPECT_EQ(usage_error_message("resnet2"), "model resnet2" + depths + "2");
  EXPECT_EQ(usage_error_message("resnetx"), "model resnetx" + depths + "'x'");
  EXPECT_EQ(usage_error_message("resnet"), "model resnet" + depths + "''");
  EXPECT_EQ(usage_error_message("resnet99999999999"),
            "model resnet99999999999" + depths + "'99999999999'");
  EXPECT_EQ(usage_error_message("lenet"),
            "unknown model 'lenet'; expected one of: lenet5, alexnet, vgg16, resnet18, "
            "resnet<6n+2>, unet (e.g. resnet20, resnet56, resnet110)");
  EXPECT_EQ(model_names(), (std::vector<std::string>{"lenet5", "alexnet", "vgg16", "resnet18",
                                                     "resnet<6n+2>", "unet"}));
}

TEST(ZooTest, InputShapesTheNetworkCannotTakeAreUsageErrors) {
  InputShape tiny;
  tiny.height = tiny.width = 16;  // VGG's five pools would shrink it to nothing
  EXPECT_THROW(make_model("vgg16", tiny), UsageError);
  try {
    make_model("lenet5", InputShape{1, 8, 8, 10});
    FAIL() << "expected UsageError";
  } catch (const UsageError& error) {
    EXPECT_NE(std::string(error.what()).find("model lenet5: input 8x8 is too small"),
              std::string::npos)
        << error.what();
  }
  EXPECT_THROW(make_model("resnet20", InputShape{0, 32, 32, 10}), UsageError);
  EXPECT_THROW(make_model("lenet5", InputShape{1, 32, 32, 0}), UsageError);
}

TEST(ZooTest, SameSeedGivesIdenticalParametersAndBuffers) {
  for (const std::string name : {"lenet5", "alexnet", "vgg16", "resnet20", "resnet18"}) {
    SCOPED_TRACE(name);
    const auto first = seeded_model(name, 3, 1).as_sequential();
    const auto second = seeded_model(name, 3, 1).as_sequential();
    const auto other = seeded_model(name, 3, 2).as_sequential();
    const auto a = first->named_parameters();
    const auto b = second->named_parameters();
    ASSERT_EQ(a.keys(), b.keys());
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_TRUE(torch::equal(a[i].value(), b[i].value())) << a[i].key();
    }
    EXPECT_FALSE(torch::equal(a[0].value(), other->parameters()[0]));
    const auto buffers_a = first->named_buffers();
    const auto buffers_b = second->named_buffers();
    ASSERT_EQ(buffers_a.keys(), buffers_b.keys());
    for (size_t i = 0; i < buffers_a.size(); ++i) {
      EXPECT_TRUE(torch::equal(buffers_a[i].value(), buffers_b[i].value()));
    }
  }
}

TEST(ZooTest, ResNetInitialisationIsKaimingFanOutWithUnitBatchNorm) {
  const Model model = seeded_model("resnet56", 3);
  const auto parameters = model.as_sequential()->named_parameters();
  // block3_2.conv2: 64 out channels, 3x3: fan_out = 576, std = sqrt(2 / 576) = 0.0589.
  const torch::Tensor weight = parameters["block3_2b.conv2.weight"];
  EXPECT_NEAR(weight.std().item<double>(), std::sqrt(2.0 / 576.0), 0.003);
  EXPECT_TRUE(torch::equal(parameters["block3_2b.bn2.weight"], torch::ones({64})));
  EXPECT_TRUE(torch::equal(parameters["block3_2b.bn2.bias"], torch::zeros({64})));
}

TEST(ZooTest, PartitionSaveAndLoadRoundTripsParametersAndBuffers) {
  for (const std::string name : {"lenet5", "resnet20"}) {
    SCOPED_TRACE(name);
    Model source = seeded_model(name, 3, 1);
    Model target = seeded_model(name, 3, 2);
    // The engine saves a partition: a Sequential over a range of units.
    torch::nn::Sequential saved;
    torch::nn::Sequential loaded;
    for (size_t i = 1; i < 3; ++i) {
      saved->push_back(source.units[i].name, source.units[i].module);
      loaded->push_back(target.units[i].name, target.units[i].module);
    }
    {  // make the BN running stats non-trivial
      torch::NoGradGuard no_grad;
      source.forward(torch::randn({2, 3, 32, 32}));
    }
    std::stringstream stream;
    torch::save(saved, stream);
    torch::load(loaded, stream);
    const auto expected = saved->named_parameters();
    const auto actual = loaded->named_parameters();
    for (size_t i = 0; i < expected.size(); ++i) {
      EXPECT_TRUE(torch::equal(expected[i].value(), actual[i].value())) << expected[i].key();
    }
    const auto expected_buffers = saved->named_buffers();
    const auto actual_buffers = loaded->named_buffers();
    ASSERT_EQ(expected_buffers.size(), actual_buffers.size());
    for (size_t i = 0; i < expected_buffers.size(); ++i) {
      EXPECT_TRUE(torch::equal(expected_buffers[i].value(), actual_buffers[i].value()));
    }
  }
}

TEST(ZooTest, UnitsCloneDeeply) {
  const Model model = seeded_model("resnet20", 3);
  const auto copy = model.as_sequential()->clone();
  EXPECT_EQ(copy->parameters().size(), model.as_sequential()->parameters().size());
  EXPECT_FALSE(copy->parameters()[0].is_same(model.as_sequential()->parameters()[0]));
  EXPECT_TRUE(torch::equal(copy->parameters()[0], model.as_sequential()->parameters()[0]));
}

TEST(Zoo, DropoutGoesBeforeEachHiddenFullyConnectedLayerOfAlexNetAndVgg16) {
  for (const std::string name : {"alexnet", "vgg16"}) {
    torch::manual_seed(1);
    const Model plain = make_model(name, InputShape{});
    torch::manual_seed(1);
    const Model dropped = make_model(name, InputShape{}, ZooOptions().dropout(0.5));
    EXPECT_EQ(dropped.num_parameters(), plain.num_parameters()) << name;
    std::vector<std::string> with_dropout;
    for (const auto& unit : dropped.units) {
      for (const auto& m : unit.module.ptr()->modules()) {
        if (auto* d = m->as<Dropout>()) {
          EXPECT_EQ(d->options.p(), 0.5);
          with_dropout.push_back(unit.name);
        }
      }
    }
    EXPECT_EQ(with_dropout, (std::vector<std::string>{"fc1", "fc2"})) << name;
    // In eval mode dropout is the identity: the same weights give the same outputs.
    const auto x = torch::randn({2, 1, 32, 32});
    auto a = plain.as_sequential(), b = dropped.as_sequential();
    a->eval();
    b->eval();
    EXPECT_TRUE(torch::equal(a->forward(x), b->forward(x))) << name;
  }
  EXPECT_THROW(make_model("lenet5", InputShape{}, ZooOptions().dropout(0.5)), UsageError);
  EXPECT_THROW(make_model("alexnet", InputShape{}, ZooOptions().dropout(1.0)), UsageError);
}

}  // namespace
}  // namespace stalepipe::models
