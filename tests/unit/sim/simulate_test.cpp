// The simulator against hand-computed timelines.
#include <gtest/gtest.h>

#include "stalepipe/common/error.h"
#include "stalepipe/partition/plan.h"
#include "stalepipe/partition/profile.h"
#include "stalepipe/schedule/schedule.h"
#include "stalepipe/sim/simulate.h"

namespace stalepipe::sim {
namespace {

using schedule::ScheduleKind;

PartitionCosts costs(std::vector<double> f, std::vector<double> b) {
  PartitionCosts c;
  c.forward_seconds = std::move(f);
  c.backward_seconds = std::move(b);
  return c;
}

TEST(Simulate, StaleTwoPartitionsEqualCosts) {
  // F = B = 1 per partition, stale K = 2 (design.md's table): worker 2 runs F(t) in
  // [2t+1, 2t+2] and B(t) in [2t+2, 2t+3]; worker 1 runs F0, F1 in [0,1], [1,2], then
  // B(t) in [2t+3, 2t+4] and F(t+2) in [2t+4, 2t+5]. So mini-batch t completes at 2t+4: one
  // every 2 time units = 1/(F+B) of one partition, and both workers are busy all the time.
  // 40 steps: the last op, B39 on worker 1, ends at 82; each worker is busy 80 of those.
  SimulateOptions options;
  options.batch_size = 10;
  const auto p = simulate(schedule::make_schedule(ScheduleKind::kStale, 2, 0, 40),
                          costs({1, 1}, {1, 1}), options);
  EXPECT_DOUBLE_EQ(p.steady_step_seconds, 2.0);
  EXPECT_DOUBLE_EQ(p.steady_images_per_second, 5.0);
  EXPECT_DOUBLE_EQ(p.makespan_seconds, 82.0);
  EXPECT_DOUBLE_EQ(p.images_per_second, 400.0 / 82.0);
  for (const auto& w : p.workers) {
    EXPECT_DOUBLE_EQ(w.busy_seconds, 80.0);
    EXPECT_NEAR(w.bubble_fraction, 2.0 / 82.0, 1e-12);  // computed as 1 - 80/82
    EXPECT_DOUBLE_EQ(w.steady_bubble_fraction, 0.0);
  }
  // Spot checks of the timeline.
  for (const auto& e : p.events) {
    if (e.worker == 1 && e.op.kind == schedule::OpKind::kForward) {
      EXPECT_DOUBLE_EQ(e.start_seconds, 2.0 * e.op.step + 1);
    }
    if (e.worker == 0 && e.op.kind == schedule::OpKind::kBackward) {
      EXPECT_DOUBLE_EQ(e.end_seconds, 2.0 * e.op.step + 4);
    }
  }
  EXPECT_EQ(p.events.size(), 2u * 3u * 40u);
}

TEST(Simulate, SequentialIsTheSumOfAllPasses) {
  // Sequential: F1 F2 B2 B1 one after the other, so one mini-batch per sum of all F + B.
  // F = B = 1, K = 2: 4 units per step, 160 in all, each worker idle half the time.
  const auto p = simulate(schedule::make_schedule(ScheduleKind::kSequential, 2, 0, 40),
                          costs({1, 1}, {1, 1}));
  EXPECT_DOUBLE_EQ(p.steady_step_seconds, 4.0);
  EXPECT_DOUBLE_EQ(p.makespan_seconds, 160.0);
  for (const auto& w : p.workers) {
    EXPECT_DOUBLE_EQ(w.bubble_fraction, 0.5);
    EXPECT_DOUBLE_EQ(w.steady_bubble_fraction, 0.5);
  }
  // Unequal costs, K = 3: 1+2+3 + 4+5+6 = 21 per step.
  const auto q = simulate(schedule::make_schedule(ScheduleKind::kSequential, 3, 0, 30),
                          costs({1, 2, 3}, {4, 5, 6}));
  EXPECT_DOUBLE_EQ(q.steady_step_seconds, 21.0);
  EXPECT_DOUBLE_EQ(q.makespan_seconds, 30 * 21.0);
  // With a transfer time of 0.5 per message, K = 2: 1 + .5 + 1 + 1 + .5 + 1 = 5 per step.
  SimulateOptions options;
  options.link = fixed_link(0.5);
  const auto r = simulate(schedule::make_schedule(ScheduleKind::kSequential, 2, 0, 20),
                          costs({1, 1}, {1, 1}), options);
  EXPECT_DOUBLE_EQ(r.steady_step_seconds, 5.0);
}

TEST(Simulate, StaleRunsAtThePaceOfTheSlowestPartition) {
  // Worker 2 needs 2 + 4 = 6 per mini-batch, worker 1 only 1 + 2 = 3: in steady state one
  // mini-batch completes every 6, worker 2 never idles and worker 1 idles half the time.
  const auto p = simulate(schedule::make_schedule(ScheduleKind::kStale, 2, 0, 40),
                          costs({1, 2}, {2, 4}));
  EXPECT_DOUBLE_EQ(p.steady_step_seconds, 6.0);
  EXPECT_DOUBLE_EQ(p.workers[1].steady_bubble_fraction, 0.0);
  EXPECT_DOUBLE_EQ(p.workers[0].steady_bubble_fraction, 0.5);
  // K = 4, equal costs 1 + 1: one mini-batch every 2 again.
  const auto q = simulate(schedule::make_schedule(ScheduleKind::kStale, 4, 0, 60),
                          costs({1, 1, 1, 1}, {1, 1, 1, 1}));
  EXPECT_DOUBLE_EQ(q.steady_step_seconds, 2.0);
}

TEST(Simulate, MemoryIsInFlightActivationsPlusWeightsAndOptimizerState) {
  // Stale K = 2: worker 1 holds 2 mini-batches, worker 2 one. Momentum SGD keeps a gradient
  // and a momentum buffer: 2 more copies of the weights.
  auto c = costs({1, 1}, {1, 1});
  c.activation_bytes = {100, 10};
  c.parameter_bytes = {1000, 2000};
  const auto p = simulate(schedule::make_schedule(ScheduleKind::kStale, 2, 0, 12), c);
  EXPECT_EQ(p.workers[0].max_in_flight, 2);
  EXPECT_EQ(p.workers[0].memory_bytes(), 2 * 100 + 1000 + 2000);
  EXPECT_EQ(p.workers[1].memory_bytes(), 10 + 2000 + 4000);
}

TEST(Simulate, ReplicasWaitForTheirGradientSumBeforeEachUpdate) {
  // One partition, F = 1, B = 2, two replicas, 3 MB of parameters over a link of 1 MB/s with
  // no latency: the sum streams from the backward's start (3 s for all of it, one transfer as
  // R - 1 = 1) and its last bucket (1 MB, 1 s) starts when the backward ends. Step t: F in
  // [4t, 4t+1], B in [4t+1, 4t+3], the sum ends at max(4t+1+3, 4t+3+1) = 4t+4, the update
  // (0 s) then: one mini-batch of 2 x 5 images every 4 s.
  SimulateOptions options;
  options.batch_size = 10;
  options.replicas = 2;
  options.replica_link.bandwidth_bytes_per_second = 1 << 20;
  PartitionCosts c = costs({1}, {2});
  c.parameter_bytes = {3 << 20};
  const auto p = simulate(schedule::make_schedule(ScheduleKind::kSequential, 1, 0, 10), c, options);
  EXPECT_DOUBLE_EQ(p.makespan_seconds, 40.0);
  EXPECT_DOUBLE_EQ(p.images_per_second, 100.0 / 40.0);
  int sums = 0;
  for (const auto& e : p.events) {
    if (!e.sum) continue;
    EXPECT_DOUBLE_EQ(e.start_seconds, 4.0 * static_cast<double>(e.op.step) + 3) << "the exposed part: after B";
    EXPECT_DOUBLE_EQ(e.end_seconds, 4.0 * static_cast<double>(e.op.step) + 4);
    ++sums;
  }
  EXPECT_EQ(sums, 10);
  // Four replicas move three copies; an ideal link costs nothing and draws no sum.
  options.replicas = 4;
  EXPECT_DOUBLE_EQ(simulate(schedule::make_schedule(ScheduleKind::kSequential, 1, 0, 10), c, options).makespan_seconds,
                   10 * (1 + 9.0));
  options.replica_link = LinkModel();
  const auto ideal = simulate(schedule::make_schedule(ScheduleKind::kSequential, 1, 0, 10), c, options);
  EXPECT_DOUBLE_EQ(ideal.makespan_seconds, 30.0);
  for (const auto& e : ideal.events) EXPECT_FALSE(e.sum);
  options.replicas = 0;
  EXPECT_THROW(simulate(schedule::make_schedule(ScheduleKind::kSequential, 1, 0, 10), c, options), UsageError);
}

TEST(Simulate, RejectsMismatchedCosts) {
  EXPECT_THROW(simulate(schedule::make_schedule(ScheduleKind::kStale, 3, 0, 10), costs({1, 1}, {1, 1})),
               UsageError);
  EXPECT_THROW(simulate(schedule::make_schedule(ScheduleKind::kStale, 2, 0, 10), costs({1, -1}, {1, 1})),
               UsageError);
}

TEST(PartitionCosts, RecomputedUnitsRunTheirForwardAgainAndKeepOneMiniBatch) {
  // Three units (forward 1, 2, 4 ms; backward twice that; kept 100, 200, 400 bytes; outputs
  // 10, 20, 40), partitions {1, 2} and {3}; recomputation through unit 2.
  partition::Profile profile;
  profile.input_bytes = 5;
  for (int u = 0; u < 3; ++u) {
    partition::UnitProfile unit;
    unit.index = u;
    unit.forward_ms = 1 << u;
    unit.backward_ms = 2 << u;
    unit.kept_bytes = 100 << u;
    unit.output_bytes = 10 << u;
    profile.units.push_back(unit);
  }
  partition::Plan plan;
  plan.unit_ranges = {{0, 2}, {2, 3}};
  const auto plain = partition_costs(profile, plan);
  EXPECT_DOUBLE_EQ(plain.backward_seconds[0], 6e-3);
  EXPECT_EQ(plain.recomputed_bytes, (std::vector<int64_t>{0, 0}));
  plan.recompute_units = 2;
  const auto recomputed = partition_costs(profile, plan);
  EXPECT_DOUBLE_EQ(recomputed.forward_seconds[0], 3e-3);
  EXPECT_DOUBLE_EQ(recomputed.backward_seconds[0], 9e-3);  // + the two forwards again
  EXPECT_DOUBLE_EQ(recomputed.backward_seconds[1], 8e-3);
  EXPECT_EQ(recomputed.activation_bytes[0], 5 + 100 + 200);
  EXPECT_EQ(recomputed.recomputed_bytes, (std::vector<int64_t>{100 + 200 - 20, 0}));
  plan.recompute_units = 1;
  EXPECT_EQ(partition_costs(profile, plan).recomputed_bytes, (std::vector<int64_t>{100 - 10, 0}));
}

// A skip tensor is held by its consumer with the register's activation, and travels over the
// link into its consumer: four units, partitions {1}, {2}, {3, 4}; unit 1 stashes "a" (64
// bytes) for partition 3 and unit 2 stashes "b" (32 bytes) for partition 3 as well.
TEST(PartitionCosts, SkipTensorsAreHeldByTheirConsumerAndCrossTheLinkIntoIt) {
  partition::Profile profile;
  profile.input_bytes = 5;
  for (int u = 0; u < 4; ++u) {
    partition::UnitProfile unit;
    unit.index = u;
    unit.kept_bytes = 100;
    unit.output_bytes = 10;
    profile.units.push_back(unit);
  }
  profile.units[0].stash_bytes["a"] = 64;
  profile.units[1].stash_bytes["b"] = 32;
  partition::Plan plan;
  plan.unit_ranges = {{0, 1}, {1, 2}, {2, 4}};
  plan.skips = {{"a", 0, 2}, {"b", 1, 2}};
  const auto costs = partition_costs(profile, plan);
  EXPECT_EQ(costs.activation_bytes, (std::vector<int64_t>{5 + 100, 10 + 100, 10 + 64 + 32 + 200}));
  EXPECT_EQ(costs.output_bytes, (std::vector<int64_t>{10, 10 + 64 + 32, 10}));
}

}  // namespace
}  // namespace stalepipe::sim
