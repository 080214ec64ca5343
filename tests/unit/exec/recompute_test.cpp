// Recomputation (PipelineOptions::recompute) changes what a stage keeps, never what it computes:
// the weights and buffers after training equal those without it, bit for bit, whatever the
// schedule, mitigation or executor.
#include <gtest/gtest.h>

#include "stalepipe/common/error.h"
#include "stalepipe/models/zoo.h"
#include "stalepipe/partition/plan.h"
#include "support/pipeline_runs.h"

namespace stalepipe::test {
namespace {

// Batch-norm running statistics are compared too: a recomputation must not count as a forward.
RunSpec resnet20(std::vector<int> ppv) { return small_resnet20(std::move(ppv)); }

// The state after `spec` with recomputation through `layer`, against the same run without.
::testing::AssertionResult same_as_without(RunSpec spec, int layer) {
  spec.recompute = 0;
  const auto reference = run_pipeline(spec);
  spec.recompute = layer;
  return all_equal(run_pipeline(spec), reference);
}

TEST(Recompute, StalePipelineEndsWithTheSameWeightsAndBuffers) {
  // Part of partition 1, all of it (an update comes between each forward and its backward),
  // and through partition 2 as well.
  for (const int layer : {3, 7, 13}) {
    EXPECT_TRUE(same_as_without(resnet20({7}), layer)) << "recompute " << layer;
  }
}

TEST(Recompute, ChannelsLastEndsWithTheSameWeightsAndBuffers) {
  auto spec = resnet20({7});
  spec.channels_last = true;  // the ResNets' default layout
  for (const int layer : {5, 7}) EXPECT_TRUE(same_as_without(spec, layer)) << "recompute " << layer;
}

TEST(Recompute, ThreadsExecutorMatchesTheEmulatedOneWithout) {
  auto spec = resnet20({7, 13});
  const auto reference = run_pipeline(spec);
  spec.executor = "threads";
  spec.recompute = 9;
  EXPECT_TRUE(all_equal(run_pipeline(spec), reference));
}

TEST(Recompute, SequentialTrainingEndsWithTheSameWeights) {
  EXPECT_TRUE(same_as_without(resnet20({}), 7));
}

TEST(Recompute, WeightPredictionRecomputesWithThePredictedWeights) {
  auto spec = resnet20({7});
  spec.weight_prediction = true;
  EXPECT_TRUE(same_as_without(spec, 5));
}

TEST(Recompute, WeightStashingRecomputesWithTheStashedWeights) {
  auto spec = resnet20({7});
  spec.kind = schedule::ScheduleKind::kOneFOneB;
  EXPECT_TRUE(same_as_without(spec, 5));
}

TEST(Recompute, MicroBatchesEachRecomputeTheirOwn) {
  auto spec = resnet20({7});
  spec.kind = schedule::ScheduleKind::kGPipe;
  spec.micro_batches = 2;
  EXPECT_TRUE(same_as_without(spec, 7));
}

TEST(Recompute, DropoutDrawsTheSameMasksAgain) {
  RunSpec spec;
  spec.model = "alexnet";
  spec.dropout = 0.5;
  spec.ppv = {7};
  spec.steps = 5;
  spec.batch_size = 4;
  spec.train_size = 16;
  RunSpec without_dropout = spec;
  without_dropout.dropout = 0;
  ASSERT_FALSE(all_equal(run_pipeline(spec), run_pipeline(without_dropout))) << "dropout had no effect";
  // Layer 6 (fc1) has dropout on its input: the recomputation must draw the same mask.
  EXPECT_TRUE(same_as_without(spec, 6));
}

TEST(Recompute, TheRangeEndsWhereARegisterCouldGo) {
  models::InputShape input;
  input.channels = 1;
  const auto model = models::make_model("resnet20", input);
  EXPECT_EQ(partition::units_through_layer(model, 0), 0u);
  EXPECT_EQ(partition::units_through_layer(model, 3), static_cast<size_t>(model.unit_ending_at_layer(3)) + 1);
  const auto plan = partition::make_plan(model, {7}, 13);
  EXPECT_EQ(plan.recomputed_units(0), plan.unit_ranges[0].second - plan.unit_ranges[0].first);
  EXPECT_EQ(plan.recomputed_units(1), plan.recompute_units - plan.unit_ranges[1].first);
  EXPECT_EQ(partition::make_plan(model, {13}, 7).recomputed_units(1), 0u);
  for (const int bad : {-1, 21}) {
    try {
      partition::units_through_layer(model, bad);
      ADD_FAILURE() << "recompute " << bad << " was accepted";
    } catch (const UsageError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("recompute " + std::to_string(bad) + ": model resnet20"),
                std::string::npos) << what;
      EXPECT_NE(what.find("may end after layer 1, 2, 3, 4"), std::string::npos) << what;
    }
  }
}

}  // namespace
}  // namespace stalepipe::test
