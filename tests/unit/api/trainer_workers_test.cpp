// PipelineTrainer's workers on their own: what the cut and the schedule imply, the replicas,
// a segment run and tallied, and the partitions whose weights are not numbers.
#include <gtest/gtest.h>

#include "api/trainer_workers_impl.h"
#include "stalepipe/models/zoo.h"

namespace stalepipe::detail {
namespace {

Options stale_lenet(std::vector<int> ppv, int replicas = 1) {
  Options o;
  o.optimizer().lr_schedule(LrScheduleKind::kConstant).lr(0.01);
  o.pipeline().ppv(std::move(ppv)).replicas(replicas).threads(2);
  return o;
}

TEST(TrainerWorkers, DescribeTheCutAsTheStaleScheduleImpliesIt) {
  Options o = stale_lenet({1, 2});
  TrainerWorkers w(models::make_model("lenet5", models::InputShape{}), o, 0, -1);
  const PipelineInfo& info = w.info();
  EXPECT_EQ(w.plan().num_partitions(), 3);
  EXPECT_EQ(info.staleness, (std::vector<int>{3, 1, 0})) << "d_k = 2 (K - k) - 1 updates, 0 for the last";
  EXPECT_EQ(info.units.size(), 3u);
  EXPECT_EQ(info.lag, 3) << "the first partition runs three mini-batches ahead of the last";
  EXPECT_EQ(o.pipeline().ppv(), (std::vector<int>{1, 2})) << "the cut chosen goes back into the options";
  EXPECT_EQ(w.stages().size(), 3u);
  EXPECT_EQ(w.pipelines().size(), 1u);
}

TEST(TrainerWorkers, ReplicasAreCopiesThatStartEqual) {
  Options o = stale_lenet({2}, 2);
  TrainerWorkers w(models::make_model("lenet5", models::InputShape{}), o, 0, -1);
  ASSERT_EQ(w.pipelines().size(), 2u);
  EXPECT_EQ(w.stages().size(), 4u) << "replica after replica";
  const auto a = w.pipelines()[0]->parameters(), b = w.pipelines()[1]->parameters();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(torch::equal(a[i], b[i]));
    EXPECT_FALSE(a[i].is_same(b[i])) << "own tensors";
  }
}

TEST(TrainerWorkers, ASegmentRunsItsStepsAndIsTallied) {
  Options o = stale_lenet({2});
  TrainerWorkers w(models::make_model("lenet5", models::InputShape{}), o, 0, -1);
  torch::manual_seed(3);
  exec::SegmentContext context;
  context.input = [](int64_t) { return exec::Input{torch::randn({8, 1, 32, 32}), torch::randint(10, {8})}; };
  int64_t losses = 0;
  context.on_step = [&](int64_t, const StepLoss&) { ++losses; };
  const SegmentRun run = w.execute(0, 6, context, o, [](int64_t) { return 0.01; });
  EXPECT_EQ(run.result.end_step, 6);
  EXPECT_EQ(losses, 6);
  EXPECT_EQ(w.tally(run), (std::vector<int>{1, 0})) << "partition 1 reached its delay";
  EXPECT_TRUE(w.partitions_with_bad_weights().empty());
  torch::NoGradGuard no_grad;
  w.pipeline().stage(1).module()->parameters().front().fill_(NAN);
  EXPECT_EQ(w.partitions_with_bad_weights(), (std::vector<int>{2}));
}

}  // namespace
}  // namespace stalepipe::detail
