#include <cmath>

#include <gtest/gtest.h>

#include "stalepipe/common/error.h"
#include "stalepipe/optim/lr_schedule.h"

namespace stalepipe::optim {
namespace {

LrScheduleOptions base(const std::string& kind) {
  LrScheduleOptions o;
  o.kind = lr_schedule_from_name(kind);
  o.base_lr = 0.1;
  o.steps_per_epoch = 10;
  o.total_steps = 100;
  return o;
}

TEST(LrSchedule, Constant) {
  LrSchedule s(base("constant"));
  EXPECT_DOUBLE_EQ(s.at(0), 0.1);
  EXPECT_DOUBLE_EQ(s.at(99), 0.1);
}

TEST(LrSchedule, StepDecaysAtMilestoneEpochs) {
  auto o = base("step");
  o.milestones = {3, 6};
  o.gamma = 0.5;
  LrSchedule s(o);
  EXPECT_DOUBLE_EQ(s.at(29), 0.1);
  EXPECT_DOUBLE_EQ(s.at(30), 0.05);
  EXPECT_DOUBLE_EQ(s.at(60), 0.025);
}

TEST(LrSchedule, CosineFromBaseToZero) {
  LrSchedule s(base("cosine"));
  EXPECT_DOUBLE_EQ(s.at(0), 0.1);
  EXPECT_NEAR(s.at(50), 0.05, 1e-12);
  EXPECT_NEAR(s.at(100), 0.0, 1e-12);
}

TEST(LrSchedule, WarmupRampsLinearlyThenFollowsTheSchedule) {
  auto o = base("cosine");
  o.warmup_epochs = 2;  // 20 steps
  LrSchedule s(o);
  EXPECT_DOUBLE_EQ(s.at(0), 0.1 / 20);
  EXPECT_DOUBLE_EQ(s.at(9), 0.1 * 10 / 20);
  EXPECT_DOUBLE_EQ(s.at(20), 0.1);  // cosine starts after the warm-up
  EXPECT_NEAR(s.at(60), 0.05, 1e-12);
}

TEST(LrSchedule, BadOptions) {
  EXPECT_THROW(lr_schedule_from_name("linear"), UsageError);
  auto o = base("step");
  o.milestones = {5, 3};
  EXPECT_THROW(LrSchedule{o}, UsageError);
  o = base("constant");
  o.base_lr = 0;
  EXPECT_THROW(LrSchedule{o}, UsageError);
}

}  // namespace
}  // namespace stalepipe::optim
