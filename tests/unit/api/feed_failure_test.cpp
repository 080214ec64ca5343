// The step interface's segment thread: a step that fails while it runs reaches the caller
// through feed() or finish(), once, with the step that failed; the trainer then refuses every
// use but load(), and a load() starts clean; the segment's tally reaches the caller when the
// segment is joined. scripts/sanitize.sh thread runs these under ThreadSanitizer.
#include <cmath>
#include <limits>
#include <memory>

#include <gtest/gtest.h>

#include "stalepipe/stalepipe.h"
#include "support/error_of.h"
#include "support/temp_dir.h"

namespace stalepipe {
namespace {

using test::error_of;

std::vector<exec::Input> batches_of(uint64_t seed, int n) {
  torch::manual_seed(seed);
  std::vector<exec::Input> batches;
  for (int i = 0; i < n; ++i) batches.push_back({torch::randn({8, 1, 32, 32}), torch::randint(10, {8})});
  return batches;
}

// Cross-entropy that fails on mini-batch `bad` (the last partition computes the loss once per
// mini-batch, in step order): it throws, or returns NaN with `nan`.
exec::LossFn failing_at(int64_t bad, bool nan = false) {
  auto calls = std::make_shared<int64_t>(0);
  return [calls, bad, nan](const torch::Tensor& out, const torch::Tensor& y) {
    const torch::Tensor loss = exec::cross_entropy_loss(out, y);
    if ((*calls)++ != bad) return loss;
    if (nan) return loss * std::numeric_limits<float>::quiet_NaN();
    throw std::runtime_error("loss exploded");
  };
}

Options three_partitions(const std::string& executor, exec::LossFn loss) {
  Options o;
  o.optimizer().lr_schedule(LrScheduleKind::kConstant);
  o.optimizer().loss(std::move(loss));
  o.pipeline().ppv({1, 3});
  o.pipeline().executor(exec::executor_from_name(executor));
  o.pipeline().threads_per_worker(1);
  return o;
}

models::Model lenet5(uint64_t seed) {
  torch::manual_seed(seed);
  return models::make_model("lenet5", models::InputShape{});
}

const char* const kExecutors[] = {"emulated", "threads"};

TEST(FeedFailure, ALossThatThrowsWhileFeedingSurfacesInFeedThenEveryCallNamesIt) {
  const auto batches = batches_of(1, 12);
  for (const std::string executor : kExecutors) {
    PipelineTrainer trainer(lenet5(2), three_partitions(executor, failing_at(4)));
    const std::string error = error_of<RuntimeError>([&] {
      for (const auto& b : batches) trainer.feed(b.x, b.target);
    });
    EXPECT_NE(error.find("partition 3, mini-batch 4: loss exploded"), std::string::npos) << executor << ": " << error;
    // The fed mini-batches after the failure never come out: finish() says why.
    EXPECT_NE(error_of<RuntimeError>([&] { trainer.finish(); })
                  .find("flush: the pipeline failed earlier (partition 3, mini-batch 4: loss exploded)"),
              std::string::npos) << executor;
    EXPECT_NE(error_of<UsageError>([&] { trainer.feed(batches[0].x, batches[0].target); }).find("finish() was called"),
              std::string::npos);
    EXPECT_TRUE(trainer.info().ran.forwards.empty()) << "a failed segment counts no staleness";
  }
}

TEST(FeedFailure, AFailureAfterTheLastFeedSurfacesInFinish) {
  const auto batches = batches_of(1, 12);
  for (const std::string executor : kExecutors) {
    PipelineTrainer trainer(lenet5(2), three_partitions(executor, failing_at(10)));
    for (const auto& b : batches) trainer.feed(b.x, b.target);  // returns the losses of 0..8
    EXPECT_NE(error_of<RuntimeError>([&] { trainer.finish(); }).find("partition 3, mini-batch 10: loss exploded"),
              std::string::npos) << executor;
    EXPECT_NE(error_of<RuntimeError>([&] { trainer.save(test::TempDir().path()); })
                  .find("save: the pipeline failed earlier (partition 3, mini-batch 10: loss exploded)"),
              std::string::npos) << executor;
  }
}

TEST(FeedFailure, ANanLossWhileFeedingIsADivergenceNamingItsStep) {
  const auto batches = batches_of(1, 12);
  for (const std::string executor : kExecutors) {
    PipelineTrainer trainer(lenet5(2), three_partitions(executor, failing_at(5, /*nan=*/true)));
    const std::string error = error_of<DivergedError>([&] {
      for (const auto& b : batches) trainer.feed(b.x, b.target);
    });
    EXPECT_NE(error.find("partition 3, mini-batch 5: training loss is nan"), std::string::npos) << executor << ": " << error;
    EXPECT_NE(error_of<RuntimeError>([&] { trainer.flush(); }).find("failed earlier (partition 3, mini-batch 5"),
              std::string::npos) << executor;
  }
}

// The failed run leaves nothing behind: after load() the step interface returns the new run's
// losses only (not those of the failed run that had come out but were not returned), and no
// gradient of a backward whose update never ran reaches the next update (the threads
// executor: partitions 1 and 2 may be past a backward when partition 3 fails).
TEST(FeedFailure, LoadAfterAFailureReturnsOnlyTheNewRunsLosses) {
  const auto first = batches_of(1, 6);
  const auto second = batches_of(3, 12);
  for (const std::string executor : kExecutors) {
    const test::TempDir dir;
    PipelineTrainer trainer(lenet5(2), three_partitions(executor, failing_at(4)));
    trainer.save(dir.path());  // step 0
    for (const auto& b : first) trainer.feed(b.x, b.target);  // returns the losses of 0..2; 3 comes out
    EXPECT_NE(error_of<RuntimeError>([&] { trainer.flush(); }).find("mini-batch 4: loss exploded"),
              std::string::npos) << executor;
    trainer.load(dir.path());
    PipelineTrainer reference(lenet5(2), three_partitions(executor, failing_at(-1)));
    std::vector<double> got, expected;
    for (const auto& b : second) {
      if (const auto loss = trainer.feed(b.x, b.target)) got.push_back(loss->loss);
      if (const auto loss = reference.feed(b.x, b.target)) expected.push_back(loss->loss);
    }
    for (const auto& loss : trainer.finish()) got.push_back(loss.loss);
    for (const auto& loss : reference.finish()) expected.push_back(loss.loss);
    EXPECT_EQ(got, expected) << executor;
  }
}

// info() while segments end by themselves under feed(): the staleness tally is the caller's
// (recorded when feed() joins a finished segment), so reading it between feeds races with
// nothing and it counts every forward once.
TEST(FeedFailure, InfoBetweenFeedsCountsEachSegmentOnceItIsJoined) {
  const auto batches = batches_of(1, 12);
  for (const std::string executor : kExecutors) {
    Options o = three_partitions(executor, failing_at(-1));
    o.pipeline().segment_steps(4);
    PipelineTrainer trainer(lenet5(2), o);
    int64_t seen = 0;
    for (const auto& b : batches) {
      trainer.feed(b.x, b.target);
      const auto& ran = trainer.info().ran;
      seen = ran.forwards.empty() ? 0 : ran.forwards[0];
      EXPECT_EQ(seen % 4, 0) << executor << ": whole segments only";
    }
    EXPECT_EQ(seen, 8) << executor << ": the third segment is joined by finish()";
    trainer.finish();
    EXPECT_EQ(trainer.info().ran.forwards, (std::vector<int64_t>{12, 12, 12})) << executor;
  }
}

}  // namespace
}  // namespace stalepipe
