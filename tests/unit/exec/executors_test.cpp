// Every executor runs the same schedule to the same bits; a one-partition pipeline is plain SGD.
#include <gtest/gtest.h>

#include "support/pipeline_runs.h"

namespace stalepipe::test {
namespace {

struct Case {
  std::string model;
  std::vector<int> ppv;
};

// So that test listings show "lenet5 --pipeline 1,3", not the bytes of the struct.
void PrintTo(const Case& c, std::ostream* os) {
  *os << c.model << " --pipeline";
  for (size_t i = 0; i < c.ppv.size(); ++i) *os << (i ? "," : " ") << c.ppv[i];
}

std::string name_of(const Case& c) {
  std::string n = c.model + "_K" + std::to_string(c.ppv.size() + 1);
  return n;
}

class ThreadsEqualsEmulated : public ::testing::TestWithParam<Case> {};

TEST_P(ThreadsEqualsEmulated, BitForBitAfterTwentySteps) {
  RunSpec spec;
  spec.model = GetParam().model;
  spec.ppv = GetParam().ppv;
  spec.steps = 20;
  spec.batch_size = GetParam().model == "lenet5" ? 16 : 4;
  spec.train_size = 40;  // several epochs, and a partial last batch (40 = 2*16 + 8)
  spec.executor = "emulated";
  const auto reference = run_pipeline(spec);
  spec.executor = "threads";
  EXPECT_TRUE(all_equal(run_pipeline(spec), reference));
}

INSTANTIATE_TEST_SUITE_P(Zoo, ThreadsEqualsEmulated,
                         ::testing::Values(Case{"lenet5", {2}}, Case{"lenet5", {1, 3}},
                                           Case{"lenet5", {1, 2, 4}}, Case{"resnet20", {7}},
                                           Case{"resnet20", {7, 13}}, Case{"resnet20", {3, 7, 13}}),
                         [](const auto& info) { return name_of(info.param); });

TEST(Executors, OnePartitionEqualsNonPipelinedTraining) {
  for (const std::string model : {"lenet5", "resnet20"}) {
    RunSpec spec;
    spec.model = model;
    spec.steps = 12;
    spec.batch_size = model == "lenet5" ? 16 : 4;
    const auto reference = run_reference(spec);
    for (const std::string executor : {"emulated", "threads"}) {
      spec.executor = executor;
      EXPECT_TRUE(all_equal(run_pipeline(spec), reference)) << model << " " << executor;
    }
  }
}

TEST(Executors, SequentialScheduleOverPartitionsEqualsNonPipelinedTraining) {
  RunSpec spec;
  spec.ppv = {1, 3};
  spec.kind = schedule::ScheduleKind::kSequential;
  spec.steps = 12;
  const auto reference = run_reference(spec);
  for (const std::string executor : {"emulated", "threads"}) {
    spec.executor = executor;
    EXPECT_TRUE(all_equal(run_pipeline(spec), reference)) << executor;
  }
}

TEST(Executors, HybridContinuesExactlyAsSequentialTrainingFromTheSameState) {
  RunSpec spec;
  spec.ppv = {1, 3};
  spec.momentum = 0;
  spec.steps = 16;
  spec.switch_step = 7;
  const auto reference = run_reference(spec);  // stale prefix, then the plain loop
  for (const std::string executor : {"emulated", "threads"}) {
    spec.executor = executor;
    EXPECT_TRUE(all_equal(run_pipeline(spec), reference)) << executor;
  }
  spec.switch_step = -1;  // all stale: must differ, or the comparison above proves nothing
  EXPECT_FALSE(all_equal(run_pipeline(spec), reference));
}

TEST(Executors, StaleDiffersFromNonPipelined) {
  // The comparisons above would be blind if staleness changed nothing.
  RunSpec spec;
  spec.ppv = {2};
  spec.steps = 12;
  EXPECT_FALSE(all_equal(run_pipeline(spec), run_reference(spec)));
}

}  // namespace
}  // namespace stalepipe::test
