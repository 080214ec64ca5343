// Time to accuracy: evaluations every RunOptions::eval_every steps, their lines in
// metrics.jsonl, summary.json's time_to_target, and how they survive a resume.
#include <filesystem>
#include <fstream>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "stalepipe/common/error.h"
#include "stalepipe/common/machine.h"
#include "stalepipe/train/time_to_target.h"
#include "stalepipe/train/trainer.h"
#include "support/error_of.h"
#include "support/pipeline_runs.h"
#include "support/temp_dir.h"
#include "support/train_runs.h"

namespace stalepipe::train {
namespace {

// 2 epochs of 7 steps (the last partial), 2 partitions, an evaluation every 3 steps.
Options small(const std::string& dir, const nlohmann::json& changes = nlohmann::json::object()) {
  nlohmann::json j = {{"eval_every", 3}, {"targets", {1, 100}}, {"out", dir}};
  j.update(changes);
  return test::small_run("2", j);
}

TrainHooks quiet() { return test::quiet_hooks(); }

using test::metrics_lines;

std::vector<int64_t> steps_of(const std::vector<EvalPoint>& points) {
  std::vector<int64_t> steps;
  for (const auto& p : points) steps.push_back(p.step);
  return steps;
}

TEST(TimeToAccuracy, EvaluatesEveryNStepsAndAtEpochEndsWithTheTrainingTime) {
  test::TempDir dir;
  const TrainResult r = train(small(dir.path()), quiet());
  EXPECT_EQ(steps_of(r.evaluations), (std::vector<int64_t>{3, 6, 7, 9, 12, 14}));
  double previous = 0;
  for (const auto& p : r.evaluations) {
    EXPECT_GE(p.wall_seconds, previous);
    previous = p.wall_seconds;
    ASSERT_TRUE(p.result.accuracy.has_value());
  }
  EXPECT_DOUBLE_EQ(r.evaluations[2].epoch, 1.0);
  EXPECT_DOUBLE_EQ(r.evaluations[3].epoch, 9.0 / 7.0);
  EXPECT_EQ(*r.evaluations.back().result.accuracy, *r.test_accuracy);  // the last is the run's end

  std::vector<int64_t> eval_lines;  // within epochs; the epoch lines hold the others
  for (const auto& j : metrics_lines(dir.path())) {
    if (j.at("type") == "eval") eval_lines.push_back(j.at("step"));
  }
  EXPECT_EQ(eval_lines, (std::vector<int64_t>{3, 6, 9, 12}));
  EXPECT_TRUE(r.evaluations[2].epoch_end && r.evaluations[5].epoch_end && !r.evaluations[3].epoch_end);
  const auto summary = nlohmann::json::parse(std::ifstream(dir.path() + "/summary.json"));
  EXPECT_EQ(summary.at("evaluations"), 6);
  EXPECT_EQ(summary.at("eval_every"), 3);
  const auto& times = summary.at("time_to_target");
  ASSERT_EQ(times.size(), 2u);
  EXPECT_EQ(times[1], nlohmann::json({{"target", 100.0}, {"reached", false}}));
  // 1%: the first evaluation at or above it.
  const auto first = std::find_if(r.evaluations.begin(), r.evaluations.end(),
                                  [](const EvalPoint& p) { return *p.result.accuracy >= 0.01; });
  ASSERT_NE(first, r.evaluations.end());
  EXPECT_EQ(times[0].at("reached"), true);
  EXPECT_EQ(times[0].at("step"), first->step);
  EXPECT_DOUBLE_EQ(times[0].at("wall_seconds").get<double>(), first->wall_seconds);
}

TEST(TimeToAccuracy, NonPipelinedEvaluationsDoNotChangeTheTrainedWeights) {
  test::TempDir with, without;
  const auto a = train(small(with.path(), {{"pipeline", "none"}}), quiet());
  const auto b = train(small(without.path(), {{"pipeline", "none"}, {"eval_every", 0}}), quiet());
  EXPECT_TRUE(test::all_equal(a.parameters, b.parameters));
  EXPECT_EQ(steps_of(b.evaluations), (std::vector<int64_t>{7, 14}));  // epoch ends only
}

TEST(TimeToAccuracy, AResumedRunHasTheSameEvaluationsAndItsTimeAddsUpAcrossSittings) {
  test::TempDir whole, dir;
  const auto reference = train(small(whole.path()), quiet());
  const auto first = train(small(dir.path(), {{"stop_at_step", 6}}), quiet());
  ASSERT_TRUE(first.interrupted);
  // A line written after the checkpoint, as by a run killed before its next checkpoint.
  std::ofstream(dir.path() + "/metrics.jsonl", std::ios::app)
      << R"({"type":"eval","step":9,"epoch":1.2857,"wall_seconds":99,"test_loss":1,"test_accuracy":0.5})" << "\n";
  const auto resumed = resume(dir.path(), quiet());
  EXPECT_TRUE(test::all_equal(resumed.parameters, reference.parameters));
  EXPECT_EQ(metrics_lines(dir.path()), metrics_lines(whole.path()));
  EXPECT_EQ(steps_of(resumed.evaluations), steps_of(reference.evaluations));
  for (size_t i = 2; i < resumed.evaluations.size(); ++i) {  // after step 6: this sitting's time on top
    EXPECT_GT(resumed.evaluations[i].wall_seconds, first.wall_seconds) << "evaluation at step " << resumed.evaluations[i].step;
  }
  EXPECT_GT(resumed.wall_seconds, first.wall_seconds);
  const auto summary = nlohmann::json::parse(std::ifstream(dir.path() + "/summary.json"));
  EXPECT_EQ(summary.at("evaluations"), 6);
}

std::vector<std::string> summary_machines(const std::string& dir) {
  return nlohmann::json::parse(std::ifstream(dir + "/summary.json")).at("machines").get<std::vector<std::string>>();
}

// Times compare only within one machine, so the summary names the machine of every sitting.
TEST(TimeToAccuracy, TheSummaryNamesTheMachinesOfTheRunsSittings) {
  test::TempDir whole, dir, old;
  const auto r = train(small(whole.path()), quiet());
  EXPECT_EQ(r.machines, std::vector<std::string>{machine_description()});
  EXPECT_EQ(summary_machines(whole.path()), r.machines);

  // A run stopped here, moved to another machine and back: each machine once, in order.
  ASSERT_TRUE(train(small(dir.path(), {{"stop_at_step", 6}}), quiet()).interrupted);
  std::ofstream(dir.path() + "/sittings.jsonl", std::ios::app) << R"({"step":6,"machine":"elsewhere"})" << "\n";
  resume(dir.path(), quiet());
  EXPECT_EQ(summary_machines(dir.path()), (std::vector<std::string>{machine_description(), "elsewhere"}));

  // A checkpoint from before sittings.jsonl: where its first sittings ran is not known.
  ASSERT_TRUE(train(small(old.path(), {{"stop_at_step", 6}}), quiet()).interrupted);
  std::filesystem::remove(old.path() + "/sittings.jsonl");
  resume(old.path(), quiet());
  EXPECT_EQ(summary_machines(old.path()), (std::vector<std::string>{"unknown", machine_description()}));
}

TEST(TimeToAccuracy, ACorruptSittingsFileIsAnErrorNamingItsLine) {
  test::TempDir dir;
  ASSERT_TRUE(train(small(dir.path(), {{"stop_at_step", 3}}), quiet()).interrupted);
  std::ofstream(dir.path() + "/sittings.jsonl", std::ios::app) << "{\"step\":3}\n";
  const std::string message = test::error_of<RuntimeError>([&] { resume(dir.path(), quiet()); });
  EXPECT_NE(message.find("sittings.jsonl: line 2 is not a sitting"), std::string::npos) << message;
}

TEST(TimeToAccuracy, TargetsAreTheFirstEvaluationAtOrAboveThem) {
  auto point = [](int64_t step, double seconds, std::optional<double> accuracy) {
    EvalPoint p;
    p.step = step;
    p.wall_seconds = seconds;
    p.result.accuracy = accuracy;
    return p;
  };
  const std::vector<EvalPoint> points = {point(10, 1.5, 0.80), point(20, 3, 0.92), point(30, 4.5, 0.90)};
  const auto times = time_to_targets(points, {90, 80, 95});
  ASSERT_EQ(times.size(), 3u);
  EXPECT_EQ(times[0].reached->step, 20);  // not the later 90.0 after a dip
  EXPECT_EQ(times[1].reached->step, 10);
  EXPECT_FALSE(times[2].reached.has_value());
  // A regression run has no accuracy: no target is reached.
  EXPECT_FALSE(time_to_targets({point(10, 1, std::nullopt)}, {1})[0].reached.has_value());
}

TEST(TimeToAccuracy, BadValuesNameTheField) {
  EXPECT_THROW(check_options(small("", {{"eval_every", -1}})), UsageError);
  try {
    check_options(small("", {{"targets", {90, 150}}}));
    FAIL() << "a target of 150% was accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("RunOptions::targets"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace stalepipe::train
