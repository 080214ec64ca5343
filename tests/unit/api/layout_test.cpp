// PipelineOptions::layout: kAuto takes the zoo's measured choice, the trainer decides by the
// network it is given, a run directory records the layout that ran, and the files written
// before the field existed keep their layout and their hash (so their runs still resume).
#include <gtest/gtest.h>

#include <fstream>

#include "stalepipe/api/options_json.h"
#include "stalepipe/api/pipeline_trainer.h"
#include "stalepipe/models/zoo.h"
#include "stalepipe/train/trainer.h"
#include "support/temp_dir.h"
#include "support/train_runs.h"

namespace stalepipe {
namespace {

// Strictly channels-last: in that layout and not also plain contiguous.
bool strictly_channels_last(const torch::Tensor& t) {
  return t.dim() == 4 && t.is_contiguous(torch::MemoryFormat::ChannelsLast) && !t.is_contiguous();
}

models::Model resnet8() {
  torch::manual_seed(1);
  return models::make_model("resnet8", models::InputShape());
}

Options constant_lr() {
  Options o;
  o.optimizer().lr_schedule(LrScheduleKind::kConstant);
  return o;
}

TEST(Layout, ConfigFilesWithoutALayoutReadAsTheyRanAndKeepTheirHash) {
  // The settings of two runs written before the layout field (keys at their default left
  // out) and the hash their checkpoints hold: a LeNet-5 run from before channels-last
  // existed, and a ResNet-20 run with the earlier "channels_last": true.
  const auto lenet = options_from_json(
      {{"model", "lenet5"}, {"epochs", 10}, {"drop_last", true}, {"eval_every", 156}, {"lr", 0.01},
       {"pipeline", "1,2,3,4"}},
      "lenet5 config");
  EXPECT_EQ(lenet.pipeline().layout(), Layout::kNchw);
  EXPECT_EQ(config_hash(lenet), "686270df3adad766");
  const auto resnet = options_from_json(
      {{"model", "resnet20"}, {"epochs", 8}, {"drop_last", true}, {"eval_every", 156}, {"lr", 0.1},
       {"channels_last", true}},
      "resnet20 config");
  EXPECT_EQ(resnet.pipeline().layout(), Layout::kChannelsLast);
  EXPECT_EQ(config_hash(resnet), "e78e18624dfef150");
  // Written again, they carry the layout by name and read back the same.
  const auto again = options_from_json(to_json(resnet), "again");
  EXPECT_EQ(to_json(resnet)["layout"], "channels-last");
  EXPECT_EQ(config_hash(again), config_hash(resnet));
}

TEST(Layout, AutoHashesAsTheLayoutItStandsFor) {
  for (const char* model : {"lenet5", "alexnet", "vgg16", "resnet20", "resnet56"}) {
    Options o;
    o.run().model(model);
    const Layout chosen = resolved_layout(o);
    ASSERT_NE(chosen, Layout::kAuto) << model;
    EXPECT_EQ(chosen == Layout::kChannelsLast, models::prefers_channels_last(model)) << model;
    Options pinned = o;
    pinned.pipeline().layout(chosen);
    EXPECT_EQ(config_hash(o), config_hash(pinned)) << model;
    pinned.pipeline().layout(chosen == Layout::kNchw ? Layout::kChannelsLast : Layout::kNchw);
    EXPECT_NE(config_hash(o), config_hash(pinned)) << model;
  }
  // A model file is not a zoo network, whatever its name.
  Options file;
  file.run().model_file("resnet56.pt");
  EXPECT_EQ(resolved_layout(file), Layout::kNchw);
  EXPECT_THROW(layout_from_name("nhwc"), UsageError);
}

TEST(Layout, TheTrainerDecidesByTheNetworkItIsGiven) {
  ASSERT_TRUE(models::prefers_channels_last("resnet8"));  // measured for the ResNets
  PipelineTrainer zoo(resnet8(), constant_lr());
  EXPECT_EQ(zoo.options().pipeline().layout(), Layout::kChannelsLast);
  EXPECT_TRUE(strictly_channels_last(zoo.model().units[1].module.ptr()->parameters()[0]));

  models::Model mine = resnet8();
  mine.name = "mine";  // the same layers under a name the zoo does not know
  PipelineTrainer own(std::move(mine), constant_lr());
  EXPECT_EQ(own.options().pipeline().layout(), Layout::kNchw);
  EXPECT_TRUE(own.model().units[1].module.ptr()->parameters()[0].is_contiguous());

  Options asked = constant_lr();
  asked.pipeline().layout(Layout::kNchw);
  PipelineTrainer pinned(resnet8(), asked);
  EXPECT_EQ(pinned.options().pipeline().layout(), Layout::kNchw);
}

TEST(Layout, ARunDirectoryRecordsTheLayoutThatRan) {
  test::TempDir dir;
  const std::string out = dir.file("run");
  auto options = test::small_run("none", {{"model", "resnet8"}, {"layout", "auto"}, {"max_steps", 2},
                                          {"out", out}});
  train::train(options, test::quiet_hooks());
  std::ifstream file(out + "/config.json");
  EXPECT_EQ(nlohmann::json::parse(file).at("layout"), "channels-last");
  EXPECT_EQ(train::read_run_config(out).pipeline().layout(), Layout::kChannelsLast);
}

}  // namespace
}  // namespace stalepipe
