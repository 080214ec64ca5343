// The one assembly path: the profile behind a time-balanced cut times whole training steps
// (backward included) and leaves the model as it found it.
#include <gtest/gtest.h>

#include "stalepipe/api/assemble.h"
#include "stalepipe/api/pipeline_trainer.h"
#include "stalepipe/models/zoo.h"
#include "support/error_of.h"

namespace stalepipe {
namespace {

TEST(Assemble, TheBalancingProfileTimesBackwardsAndRestoresTheModel) {
  torch::manual_seed(3);
  auto model = models::make_model("lenet5", models::InputShape{});
  std::vector<torch::Tensor> before;
  for (const auto& unit : model.units) {
    for (const auto& t : unit.module.ptr()->parameters()) before.push_back(t.detach().clone());
    for (const auto& t : unit.module.ptr()->buffers()) before.push_back(t.detach().clone());
  }
  Options options;
  options.data().batch_size(16);
  options.pipeline().threads_per_worker(1);
  const auto profile = profile_preserving_state(model, options, 2);
  ASSERT_EQ(profile.units.size(), model.units.size());
  EXPECT_EQ(profile.batch_size, 16);  // profile_batch 0: the training batch size
  for (const auto& u : profile.units) {
    // A gradient-free forward (the bug this guards against) leaves every backward at 0.
    if (!u.weight_layers.empty()) EXPECT_GT(u.backward_ms, 0) << u.name;
  }
  size_t i = 0;
  for (const auto& unit : model.units) {
    for (const auto& t : unit.module.ptr()->parameters()) {
      EXPECT_TRUE(torch::equal(t, before[i++])) << unit.name;
      EXPECT_FALSE(t.grad().defined()) << unit.name;
    }
    for (const auto& t : unit.module.ptr()->buffers()) EXPECT_TRUE(torch::equal(t, before[i++])) << unit.name;
  }
}

TEST(Assemble, Tf32IsRefusedOnACpuPartitionNamingIt) {
  Options options;
  options.pipeline().ppv({2}).precision(exec::Precision::kTf32);
  const std::string error = test::error_of<UsageError>(
      [&] { PipelineTrainer(models::make_model("lenet5", models::InputShape{}), options, 10); });
  EXPECT_EQ(error, "PipelineOptions::precision tf32: partition 1 runs on cpu, which has no TF32 (fp32 and bf16 run there)");
  options.pipeline().precision(exec::Precision::kFp32).cudnn_benchmark(true);
  EXPECT_EQ(test::error_of<UsageError>(
                [&] { PipelineTrainer(models::make_model("lenet5", models::InputShape{}), options, 10); }),
            "PipelineOptions::cudnn_benchmark: partition 1 runs on cpu, which has no cuDNN");
}

TEST(Assemble, Bf16ReachesEveryReplicasStages) {
  Options options;
  options.pipeline().ppv({2}).replicas(2).precision(exec::Precision::kBf16);
  PipelineTrainer trainer(models::make_model("lenet5", models::InputShape{}), options, 10);
  ASSERT_EQ(trainer.pipelines().size(), 2u);
  for (exec::Pipeline* pipeline : trainer.pipelines()) {
    for (exec::Stage* stage : pipeline->stages()) EXPECT_EQ(stage->precision(), exec::Precision::kBf16);
  }
}

}  // namespace
}  // namespace stalepipe
