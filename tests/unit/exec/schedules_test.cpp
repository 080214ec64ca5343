// GPipe, 1F1B with weight stashing and the staleness mitigations on real networks: every
// executor agrees with the emulated one, and GPipe is non-pipelined training in slices.
#include <gtest/gtest.h>

#include "support/pipeline_runs.h"

namespace stalepipe::test {
namespace {

RunSpec lenet5_three_partitions() {
  RunSpec spec;
  spec.ppv = {1, 3};
  spec.steps = 14;
  spec.batch_size = 16;
  spec.train_size = 40;  // a partial last batch of 8 samples
  return spec;
}

void expect_threads_equal_emulated(RunSpec spec, const char* what) {
  spec.executor = "emulated";
  const auto reference = run_pipeline(spec);
  spec.executor = "threads";
  EXPECT_TRUE(all_equal(run_pipeline(spec), reference)) << what;
}

TEST(GPipe, EqualsNonPipelinedTrainingOnTheSameMiniBatches) {
  RunSpec spec = lenet5_three_partitions();  // no batch norm: slices see the same statistics
  spec.kind = schedule::ScheduleKind::kGPipe;
  const auto reference = run_reference(spec);
  spec.micro_batches = 1;  // one slice is the sequential schedule, to the bit
  EXPECT_TRUE(all_equal(run_pipeline(spec), reference));
  for (int M : {2, 3, 4}) {
    spec.micro_batches = M;
    const auto gpipe = run_pipeline(spec);
    EXPECT_TRUE(all_close(gpipe, reference, 1e-4, 1e-6)) << M << " micro-batches";
  }
  // Not blind: the stale schedule on the same partitions ends elsewhere.
  spec.kind = schedule::ScheduleKind::kStale;
  spec.micro_batches = 1;
  EXPECT_FALSE(all_close(run_pipeline(spec), reference, 1e-4, 1e-6));
}

TEST(GPipe, ThreadsEqualsEmulated) {
  RunSpec spec = lenet5_three_partitions();
  spec.kind = schedule::ScheduleKind::kGPipe;
  spec.micro_batches = 3;
  expect_threads_equal_emulated(spec, "lenet5 gpipe M=3");
  spec.model = "resnet20";
  spec.ppv = {7};
  spec.batch_size = 6;
  spec.steps = 6;
  spec.micro_batches = 2;
  expect_threads_equal_emulated(spec, "resnet20 gpipe M=2");
}

TEST(OneFOneB, ThreadsEqualsEmulatedAndDiffersFromStale) {
  RunSpec spec = lenet5_three_partitions();
  spec.kind = schedule::ScheduleKind::kOneFOneB;
  expect_threads_equal_emulated(spec, "lenet5 1f1b-stash");
  const auto stashed = run_pipeline(spec);
  spec.kind = schedule::ScheduleKind::kStale;
  EXPECT_FALSE(all_equal(run_pipeline(spec), stashed));
  spec.model = "resnet20";
  spec.ppv = {7, 13};
  spec.kind = schedule::ScheduleKind::kOneFOneB;
  spec.batch_size = 4;
  spec.steps = 8;
  expect_threads_equal_emulated(spec, "resnet20 1f1b-stash");
}

TEST(Mitigations, ThreadsEqualsEmulated) {
  RunSpec spec = lenet5_three_partitions();
  const auto plain = run_pipeline(spec);
  spec.weight_prediction = true;
  expect_threads_equal_emulated(spec, "weight prediction");
  spec.weight_prediction = false;
  spec.spike_compensation = true;
  expect_threads_equal_emulated(spec, "spike compensation");
  spec.spike_compensation = false;
  spec.delay_aware_lr = true;
  expect_threads_equal_emulated(spec, "delay-aware lr");
  spec.weight_prediction = spec.spike_compensation = true;
  expect_threads_equal_emulated(spec, "all three");
  spec.executor = "emulated";
  EXPECT_FALSE(all_equal(run_pipeline(spec), plain));
}

// LeNet-5 has no batch norm: the fixed weight norm needs a ResNet.
TEST(Mitigations, FixedWeightNormThreadsEqualsEmulatedAndKeepsConvNorms) {
  RunSpec spec = lenet5_three_partitions();
  spec.model = "resnet20";
  spec.ppv = {7, 13};
  spec.batch_size = 4;
  spec.steps = 8;
  spec.fixed_weight_norm = true;
  expect_threads_equal_emulated(spec, "fixed weight norm");
  spec.executor = "emulated";
  const auto fixed = run_pipeline(spec);
  spec.fixed_weight_norm = false;
  const auto free = run_pipeline(spec);
  const auto initial = initial_parameters(spec);
  // The stem conv is the first parameter; it feeds a batch norm.
  EXPECT_NEAR(fixed[0].norm().item<double>(), initial[0].norm().item<double>(), 1e-4);
  EXPECT_GT(std::abs(free[0].norm().item<double>() - initial[0].norm().item<double>()), 1e-3);
}

}  // namespace
}  // namespace stalepipe::test
