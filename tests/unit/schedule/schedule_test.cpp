#include <gtest/gtest.h>

#include "stalepipe/common/error.h"
#include "stalepipe/schedule/schedule.h"

namespace stalepipe::schedule {
namespace {

TEST(Schedule, StaleStalenessAndInFlightFollowThePaper) {
  for (int K = 1; K <= 8; ++K) {
    const auto stats = analyze(make_stale(K, 0, 6 * K));
    ASSERT_EQ(static_cast<int>(stats.workers.size()), K);
    for (int k = 1; k <= K; ++k) {  // paper numbering
      const auto& w = stats.workers[k - 1];
      EXPECT_EQ(w.staleness, k == K ? 0 : 2 * (K - k) - 1) << "K=" << K << " k=" << k;
      EXPECT_EQ(w.max_in_flight, k == K ? 1 : 2 * (K - k)) << "K=" << K << " k=" << k;
    }
  }
}

TEST(Schedule, SequentialHasNoStaleness) {
  const auto stats = analyze(make_sequential(4, 0, 10));
  for (const auto& w : stats.workers) {
    EXPECT_EQ(w.staleness, 0);
    EXPECT_EQ(w.max_in_flight, 1);
  }
}

TEST(Schedule, StaleTwoWorkersExactOrder) {
  const auto s = make_stale(2, 0, 4);
  const std::vector<Op> first = {{OpKind::kForward, 0}, {OpKind::kForward, 1},
                                 {OpKind::kBackward, 0}, {OpKind::kUpdate, 0},
                                 {OpKind::kForward, 2},  {OpKind::kBackward, 1},
                                 {OpKind::kUpdate, 1},   {OpKind::kForward, 3},
                                 {OpKind::kBackward, 2}, {OpKind::kUpdate, 2},
                                 {OpKind::kBackward, 3}, {OpKind::kUpdate, 3}};
  EXPECT_EQ(s.worker_ops[0], first);
  const std::vector<Op> last = {{OpKind::kForward, 0}, {OpKind::kBackward, 0}, {OpKind::kUpdate, 0},
                                {OpKind::kForward, 1}, {OpKind::kBackward, 1}, {OpKind::kUpdate, 1},
                                {OpKind::kForward, 2}, {OpKind::kBackward, 2}, {OpKind::kUpdate, 2},
                                {OpKind::kForward, 3}, {OpKind::kBackward, 3}, {OpKind::kUpdate, 3}};
  EXPECT_EQ(s.worker_ops[1], last);
}

TEST(Schedule, OneWorkerStaleIsSequential) {
  EXPECT_EQ(make_stale(1, 3, 9).worker_ops, make_sequential(1, 3, 9).worker_ops);
}

TEST(Schedule, EveryOpRunsOnceAndOrderIsValidForShortSegments) {
  // Fewer mini-batches than the pipeline depth must still drain.
  for (int K = 1; K <= 8; ++K) {
    for (int64_t n = 0; n <= 2 * K + 1; ++n) {
      for (auto kind : {ScheduleKind::kStale, ScheduleKind::kSequential}) {
        const auto s = make_schedule(kind, K, 5, 5 + n);
        size_t total = 0;
        for (const auto& ops : s.worker_ops) {
          EXPECT_EQ(ops.size(), static_cast<size_t>(3 * n));
          total += ops.size();
        }
        EXPECT_EQ(global_order(s).size(), total);
      }
    }
  }
}

TEST(Schedule, GlobalOrderRespectsMessages) {
  const auto s = make_stale(3, 0, 7);
  const auto order = global_order(s);
  auto position = [&](int worker, OpKind kind, int64_t step) {
    for (size_t i = 0; i < order.size(); ++i) {
      if (order[i].worker == worker && order[i].op.kind == kind && order[i].op.step == step) return i;
    }
    return order.size();
  };
  for (int64_t t = 0; t < 7; ++t) {
    EXPECT_LT(position(0, OpKind::kForward, t), position(1, OpKind::kForward, t));
    EXPECT_LT(position(1, OpKind::kForward, t), position(2, OpKind::kForward, t));
    EXPECT_LT(position(2, OpKind::kBackward, t), position(1, OpKind::kBackward, t));
    EXPECT_LT(position(1, OpKind::kBackward, t), position(0, OpKind::kBackward, t));
  }
}

TEST(Schedule, DeadlockIsReported) {
  Schedule s = make_sequential(2, 0, 1);
  std::swap(s.worker_ops[1][0], s.worker_ops[1][1]);  // backward before its forward
  EXPECT_THROW(global_order(s), RuntimeError);
}

TEST(Schedule, TableShowsPipelining) {
  const std::string table = format_schedule_table(make_stale(2, 0, 3));
  // Slot 1: worker 1 runs F1 while worker 2 runs F0 (no flush between mini-batches).
  EXPECT_NE(table.find("1\tF1\tF0"), std::string::npos) << table;
}

TEST(Schedule, ParseKind) {
  EXPECT_EQ(schedule_from_name("stale"), ScheduleKind::kStale);
  EXPECT_EQ(schedule_from_name("sequential"), ScheduleKind::kSequential);
  EXPECT_THROW(schedule_from_name("gpipe2"), UsageError);
  EXPECT_THROW(make_stale(0, 0, 1), UsageError);
}

TEST(Schedule, GPipeRunsEveryMicroBatchThenFlushes) {
  const auto s = make_gpipe(2, 4, 6, 3);
  const std::vector<Op> expected = {
      {OpKind::kForward, 4, 0},  {OpKind::kForward, 4, 1},  {OpKind::kForward, 4, 2},
      {OpKind::kBackward, 4, 2}, {OpKind::kBackward, 4, 1}, {OpKind::kBackward, 4, 0},
      {OpKind::kUpdate, 4},      {OpKind::kForward, 5, 0},  {OpKind::kForward, 5, 1},
      {OpKind::kForward, 5, 2},  {OpKind::kBackward, 5, 2}, {OpKind::kBackward, 5, 1},
      {OpKind::kBackward, 5, 0}, {OpKind::kUpdate, 5}};
  EXPECT_EQ(s.worker_ops[0], expected);
  EXPECT_EQ(s.worker_ops[1], expected);
  EXPECT_EQ(s.micro_batches, 3);
  EXPECT_FALSE(s.stash_weights);
  for (const auto& w : analyze(s).workers) {
    EXPECT_EQ(w.staleness, 0);
    EXPECT_EQ(w.max_in_flight, 1);  // 3 micro-batches = one mini-batch of activations
    EXPECT_EQ(w.max_weight_versions, 1);
  }
  EXPECT_EQ(to_string(Op{OpKind::kForward, 5, 2}), "F5.2");
}

TEST(Schedule, OneFOneBStashesOneWeightVersionPerMiniBatchInFlight) {
  for (int K = 1; K <= 8; ++K) {
    const auto s = make_one_f_one_b(K, 0, 6 * K);
    EXPECT_TRUE(s.stash_weights);
    const auto stats = analyze(s);
    for (int k = 0; k < K; ++k) {  // 0-based
      const auto& w = stats.workers[k];
      EXPECT_EQ(w.staleness, K - k - 1) << "K=" << K << " worker " << k;
      EXPECT_EQ(w.max_in_flight, K - k) << "K=" << K << " worker " << k;
      EXPECT_EQ(w.max_weight_versions, K - k) << "K=" << K << " worker " << k;
    }
  }
  // Two workers: the same order as PPL-SGD's (2(K-1-k) = K-k), but stashing.
  EXPECT_EQ(make_one_f_one_b(2, 0, 7).worker_ops, make_stale(2, 0, 7).worker_ops);
}

TEST(Schedule, NewSchedulesDrainAndNeverDeadlock) {
  for (int K = 1; K <= 6; ++K) {
    for (int64_t n = 0; n <= 2 * K + 1; ++n) {
      for (int M = 1; M <= 4; ++M) {
        const auto s = make_gpipe(K, 3, 3 + n, M);
        size_t total = 0;
        for (const auto& ops : s.worker_ops) total += ops.size();
        EXPECT_EQ(total, static_cast<size_t>(K * n * (2 * M + 1)));
        EXPECT_EQ(global_order(s).size(), total) << "K=" << K << " n=" << n << " M=" << M;
      }
      const auto s = make_one_f_one_b(K, 3, 3 + n);
      EXPECT_EQ(global_order(s).size(), static_cast<size_t>(3 * K * n));
    }
  }
}

TEST(Schedule, NamesRoundTripAndMicroBatchesNeedGPipe) {
  for (auto kind : {ScheduleKind::kSequential, ScheduleKind::kStale, ScheduleKind::kGPipe,
                    ScheduleKind::kOneFOneB, ScheduleKind::kHybrid}) {
    EXPECT_EQ(schedule_from_name(to_string(kind)), kind);
  }
  EXPECT_THROW(schedule_from_name("pipedream"), UsageError);
  EXPECT_THROW(make_schedule(ScheduleKind::kStale, 2, 0, 4, 2), UsageError);
  EXPECT_THROW(make_gpipe(2, 0, 4, 0), UsageError);
  EXPECT_THROW(make_schedule(ScheduleKind::kHybrid, 2, 0, 4), UsageError);  // one side at a time
}

}  // namespace
}  // namespace stalepipe::schedule
