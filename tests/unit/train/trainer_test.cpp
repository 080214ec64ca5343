// End-to-end training runs on synthetic data: determinism, exact resume, hybrid, bad options.
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "stalepipe/api/options_json.h"
#include "stalepipe/common/error.h"
#include "stalepipe/train/trainer.h"
#include "support/pipeline_runs.h"
#include "support/temp_dir.h"
#include "support/train_runs.h"

namespace stalepipe::train {
namespace {

Options small(const std::string& pipeline = "2", const nlohmann::json& changes = nlohmann::json::object()) {
  return test::small_run(pipeline, changes);
}

TrainHooks quiet() { return test::quiet_hooks(); }

using test::metrics_lines;

TEST(Trainer, TwoRunsWithTheSameFlagsAreIdentical) {
  test::TempDir a, b;
  const auto first = train(small("2", {{"out", a.path()}}), quiet());
  const auto second = train(small("2", {{"out", b.path()}}), quiet());
  EXPECT_TRUE(test::all_equal(first.parameters, second.parameters));
  EXPECT_EQ(metrics_lines(a.path()), metrics_lines(b.path()));
  EXPECT_EQ(first.steps, 14);
  auto summary = nlohmann::json::parse(std::ifstream(a.path() + "/summary.json"));
  EXPECT_EQ(summary["staleness"], nlohmann::json({1, 0}));
  EXPECT_EQ(summary["activations_in_flight"], nlohmann::json({2, 1}));
  EXPECT_EQ(summary["partitions"], 2);
  for (const char* key : {"model", "dataset", "epochs", "steps", "seed", "test_accuracy", "test_loss",
                          "train_loss", "images_per_second", "wall_seconds", "peak_rss_mb", "ppv",
                          "executor", "stale_weight_percent"}) {
    EXPECT_TRUE(summary.contains(key)) << key;
  }
}

TEST(Trainer, ThreadsAndEmulatedTrainTheSameWeights) {
  const auto threads = train(small("1,3", {{"executor", "threads"}}), quiet());
  const auto emulated = train(small("1,3", {{"executor", "emulated"}}), quiet());
  EXPECT_TRUE(test::all_equal(threads.parameters, emulated.parameters));
}

// A crash right after checkpoint `crash_at` (mid-epoch or at an epoch end), then --resume,
// ends with exactly the weights and metrics of an uninterrupted run.
TEST(Trainer, ResumeAfterCrashEqualsUninterruptedRun) {
  test::TempDir whole;
  const auto reference = train(small("2", {{"checkpoint_every", 3}, {"out", whole.path()}}), quiet());
  for (int64_t crash_at : {3, 7, 9}) {
    test::TempDir dir;
    auto hooks = quiet();
    hooks.on_checkpoint = [crash_at](int64_t step) {
      if (step == crash_at) throw std::runtime_error("simulated crash");
    };
    EXPECT_THROW(train(small("2", {{"checkpoint_every", 3}, {"out", dir.path()}}), hooks), std::runtime_error);
    const auto resumed = resume(dir.path(), quiet());
    EXPECT_TRUE(test::all_equal(resumed.parameters, reference.parameters)) << "crash at " << crash_at;
    EXPECT_EQ(metrics_lines(dir.path()), metrics_lines(whole.path())) << "crash at " << crash_at;
  }
}

// While a run writes its directory, a second train() or resume() into it is refused at once,
// before it loads anything; once the run ends the directory is free again.
TEST(Trainer, TheRunDirectoryIsLockedWhileARunWritesIt) {
  test::TempDir dir;
  std::vector<std::string> refusals;
  auto hooks = quiet();
  hooks.on_checkpoint = [&](int64_t step) {
    if (step != 3) return;
    for (const auto& attempt : std::vector<std::function<void()>>{
             [&] { train(small("2", {{"out", dir.path()}}), quiet()); },
             [&] { resume(dir.path(), quiet()); }}) {
      try {
        attempt();
        refusals.push_back("(not refused)");
      } catch (const UsageError& e) {
        refusals.push_back(e.what());
      }
    }
  };
  train(small("2", {{"checkpoint_every", 3}, {"out", dir.path()}}), hooks);
  ASSERT_EQ(refusals.size(), 2u);
  for (const auto& r : refusals) {
    EXPECT_NE(r.find("run directory " + dir.path() + ": another run is writing there (pid " +
                     std::to_string(::getpid()) + " holds " + dir.path() + "/lock); wait for it"),
              std::string::npos) << r;
  }
  EXPECT_NO_THROW(resume(dir.path(), quiet()));  // the lock went with the run
}

TEST(Trainer, StopDrainsCheckpointsAndResumes) {
  // Non-pipelined, a stop is an ordinary drain point, so the resumed run is exact.
  test::TempDir whole, dir;
  const auto reference = train(small("none", {{"checkpoint_every", 3}, {"out", whole.path()}}), quiet());
  std::atomic<bool> stop{false};
  auto hooks = quiet();
  hooks.stop = &stop;
  hooks.on_checkpoint = [&](int64_t step) {
    if (step == 3) stop = true;  // mid-epoch 1
  };
  const auto stopped = train(small("none", {{"checkpoint_every", 3}, {"out", dir.path()}}), hooks);
  ASSERT_TRUE(stopped.interrupted);
  EXPECT_EQ(stopped.steps, 3);
  const auto resumed = resume(dir.path(), quiet());
  EXPECT_TRUE(test::all_equal(resumed.parameters, reference.parameters));
}

TEST(Trainer, StopAtStepIsADrainPointAndTheResumedRunGoesOn) {
  // Pipelined: the stop falls on a checkpoint_every boundary, so both runs drain at step 6.
  test::TempDir whole, dir;
  const auto reference = train(small("2", {{"checkpoint_every", 3}, {"out", whole.path()}}), quiet());
  const auto stopped = train(small("2", {{"checkpoint_every", 3}, {"stop_at_step", 6}, {"out", dir.path()}}), quiet());
  ASSERT_TRUE(stopped.interrupted);
  EXPECT_EQ(stopped.steps, 6);
  const auto resumed = resume(dir.path(), quiet());  // config.json still says stop at 6
  EXPECT_FALSE(resumed.interrupted);
  EXPECT_EQ(resumed.steps, 14);
  EXPECT_TRUE(test::all_equal(resumed.parameters, reference.parameters));
  EXPECT_EQ(metrics_lines(dir.path()), metrics_lines(whole.path()));

  // At an epoch end the epoch is finished (evaluated, logged, saved) before the stop.
  test::TempDir at_end;
  const auto epoch_one = train(small("2", {{"stop_at_step", 7}, {"out", at_end.path()}}), quiet());
  ASSERT_TRUE(epoch_one.interrupted);
  EXPECT_EQ(epoch_one.steps, 7);
  EXPECT_EQ(metrics_lines(at_end.path()).size(), 1u);
  const auto rest = resume(at_end.path(), quiet());
  EXPECT_EQ(rest.steps, 14);
  test::TempDir plain;
  const auto uninterrupted = train(small("2", {{"out", plain.path()}}), quiet());
  EXPECT_TRUE(test::all_equal(rest.parameters, uninterrupted.parameters));
  EXPECT_EQ(metrics_lines(at_end.path()), metrics_lines(plain.path()));
}

TEST(Trainer, ShortSegmentsReportTheStalenessAsItRanAndWarnOnce) {
  // Draining after every mini-batch leaves no mini-batch in flight: the schedule's d_k never
  // happens, and the run is plain sequential SGD.
  test::TempDir dir;
  std::vector<std::string> lines;
  auto hooks = quiet();
  hooks.log = [&lines](const std::string& line) { lines.push_back(line); };
  // One thread per partition in both (a sequential schedule would otherwise give each all).
  const auto short_segments =
      train(small("1,3", {{"checkpoint_every", 1}, {"threads_per_worker", 1}, {"out", dir.path()}}), hooks);
  const auto sequential = train(small("1,3", {{"schedule", "sequential"}, {"threads_per_worker", 1}}), quiet());
  EXPECT_TRUE(test::all_equal(short_segments.parameters, sequential.parameters));
  auto summary = nlohmann::json::parse(std::ifstream(dir.path() + "/summary.json"));
  EXPECT_EQ(summary["staleness"], nlohmann::json({3, 1, 0}));
  EXPECT_EQ(summary["staleness_max_ran"], nlohmann::json({0, 0, 0}));
  EXPECT_EQ(summary["forwards"], nlohmann::json({14, 14, 14}));
  EXPECT_EQ(summary["forwards_at_full_staleness"], nlohmann::json({0, 0, 14}));
  const auto warnings = std::count_if(lines.begin(), lines.end(), [](const std::string& l) {
    return l.find("staleness reduced") != std::string::npos;
  });
  EXPECT_EQ(warnings, 1);
  for (const auto& l : lines) {
    if (l.find("staleness reduced") == std::string::npos) continue;
    EXPECT_NE(l.find("drains every 1 mini-batches"), std::string::npos) << l;
    EXPECT_NE(l.find("partition 1 at most d=0 of d_1=3, partition 2 at most d=0 of d_2=1"), std::string::npos) << l;
  }

  // Whole epochs of 7 mini-batches reach d_k: no warning, every forward past the fill at d_k.
  std::vector<std::string> quiet_lines;
  hooks.log = [&quiet_lines](const std::string& line) { quiet_lines.push_back(line); };
  test::TempDir whole;
  train(small("1,3", {{"out", whole.path()}}), hooks);
  for (const auto& l : quiet_lines) EXPECT_EQ(l.find("staleness reduced"), std::string::npos) << l;
  auto full = nlohmann::json::parse(std::ifstream(whole.path() + "/summary.json"));
  EXPECT_EQ(full["staleness_max_ran"], nlohmann::json({3, 1, 0}));
}

TEST(Trainer, HybridSwitchAtTheEndsEqualsThePureSchedules) {
  const auto stale = train(small("2", {{"schedule", "stale"}}), quiet());
  const auto sequential = train(small("2", {{"schedule", "sequential"}}), quiet());
  const auto hybrid_late = train(small("2", {{"schedule", "hybrid"}, {"hybrid_switch", "2"}}), quiet());
  const auto hybrid_early = train(small("2", {{"schedule", "hybrid"}, {"hybrid_switch", "0s"}}), quiet());
  EXPECT_TRUE(test::all_equal(hybrid_late.parameters, stale.parameters));
  EXPECT_TRUE(test::all_equal(hybrid_early.parameters, sequential.parameters));
  const auto hybrid_mid = train(small("2", {{"schedule", "hybrid"}, {"hybrid_switch", "4s"}}), quiet());
  EXPECT_FALSE(test::all_equal(hybrid_mid.parameters, stale.parameters));
  EXPECT_FALSE(test::all_equal(hybrid_mid.parameters, sequential.parameters));
}

TEST(Trainer, BadOptionsAreUsageErrors) {
  auto expect_usage = [](const std::function<Options()>& options, const std::string& fragment) {
    try {
      train(options(), quiet());
      ADD_FAILURE() << "no error for " << fragment;
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  };
  expect_usage([] { return small("2", {{"batch_size", 0}}); }, "DataOptions::batch_size must be >= 1, got 0");
  expect_usage([] { return small("2", {{"stop_at_step", -1}}); }, "RunOptions::stop_at_step must be >= 0, got -1");
  expect_usage([] { return small("2", {{"lr", -1}}); }, "OptimizerOptions::lr must be a positive number");
  expect_usage([] { return small("2", {{"lr", 0}}); }, "OptimizerOptions::lr must be a positive number");
  expect_usage([] { return small("2", {{"model", "resnet21"}}); }, "6n+2");
  expect_usage([] { return small("2", {{"model", "gpt"}}); }, "gpt");
  expect_usage([] { return small("9"); }, "PipelineOptions::ppv 9: model lenet5 has 5 weight layers; a register may follow layer 1, 2, 3, 4");
  expect_usage([] { return small("3,2"); }, "must increase");
  expect_usage([] { return small("x"); }, "is not a layer number");
  expect_usage([] { return small("4", {{"model", "unet"}}); }, "no register may follow layer 4 (inside unit 4 (dec2)");
  expect_usage([] { return small("2", {{"devices", "cpu"}}); }, "names 1 device(s) but the pipeline has 2 partitions");
  expect_usage([] { return small("2", {{"devices", "cpu,cuda:99"}}); }, "cuda:99 is not present");
  expect_usage([] { return small("2", {{"schedule", "hybrid"}, {"hybrid_switch", "3"}}); }, "the switch must come no later");
  expect_usage([] { return small("2", {{"schedule", "hybrid"}}); }, "schedule hybrid needs hybrid_switch");
  expect_usage([] { return small("2", {{"executor", "mpi"}}); }, "executor 'mpi': expected");
  expect_usage([] { return small("2", {{"data", "imagenet"}}); }, "imagenet");
  expect_usage([] { return small("2", {{"schedule", "pipedream"}}); }, "schedule 'pipedream': expected");
  expect_usage([] { return small("2", {{"micro_batches", 2}}); }, "applies to schedule gpipe only");
  expect_usage([] { return small("2", {{"schedule", "gpipe"}, {"micro_batches", 33}}); }, "more micro-batches than the batch size of 32");
  // 200 samples in batches of 32 leave a last batch of 8.
  expect_usage([] { return small("2", {{"schedule", "gpipe"}, {"micro_batches", 9}}); }, "the last mini-batch of each epoch has only 8 samples");
  expect_usage([] { return small("2", {{"weight_prediction", true}, {"momentum", 0}}); }, "OptimizerOptions::weight_prediction extrapolates along the momentum");
  expect_usage([] { return small("2", {{"delay_lr_anneal_epochs", 1}}); }, "OptimizerOptions::delay_lr_anneal_epochs needs delay_aware_lr");
  expect_usage([] { return small("2", {{"spike_compensation", true}, {"nesterov", true}}); }, "OptimizerOptions::spike_compensation needs plain momentum");
  expect_usage([] { return small("2", {{"fixed_weight_norm", true}}); }, "OptimizerOptions::fixed_weight_norm: model lenet5 has no bias-free conv");
}

TEST(Trainer, NewSchedulesReportWhatTheyHold) {
  test::TempDir dir;
  const auto stash = train(small("1,3", {{"schedule", "1f1b-stash"}, {"out", dir.path()}}), quiet());
  EXPECT_EQ(stash.info.staleness, (std::vector<int>{2, 1, 0}));
  EXPECT_EQ(stash.info.weight_versions, (std::vector<int>{3, 2, 1}));
  auto summary = nlohmann::json::parse(std::ifstream(dir.path() + "/summary.json"));
  EXPECT_EQ(summary["schedule"], "1f1b-stash");
  EXPECT_EQ(summary["weight_versions"], nlohmann::json({3, 2, 1}));
  const auto gpipe = train(small("1,3", {{"schedule", "gpipe"}, {"micro_batches", 4}}), quiet());
  EXPECT_EQ(gpipe.info.staleness, (std::vector<int>{0, 0, 0}));
  const auto sequential = train(small("1,3", {{"schedule", "sequential"}}), quiet());
  EXPECT_TRUE(test::all_close(gpipe.parameters, sequential.parameters, 1e-4, 1e-6));
}

TEST(Trainer, DivergenceStopsAtOnceNamesTheCauseAndKeepsTheLastCheckpoint) {
  // A sane first epoch, then a learning rate that must blow up.
  auto options = small("2", {{"lr", 0.01}, {"lr_schedule", "step"}, {"lr_milestones", {1}}, {"lr_gamma", 1e9}});
  test::TempDir dir;
  try {
    Options o = options;
    o.run().out(dir.path());
    train(o, quiet());
    FAIL() << "the run did not diverge";
  } catch (const DivergedError& e) {
    const std::string message = e.what();
    for (const char* fragment : {"(epoch 2): the run diverged", "Partition 1 computes with weights d_1 = 1 update(s) stale at lr 1e+07",
                                 "OptimizerOptions::weight_prediction", "The checkpoint of step 7 is intact"}) {
      EXPECT_NE(message.find(fragment), std::string::npos) << fragment << " not in: " << message;
    }
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
  // The checkpoint holds exactly the weights of a healthy one-epoch run.
  options.run().epochs(1).out("");
  const auto one_epoch = train(options, quiet());
  const EvalResult evaluated = evaluate_run(dir.path(), 2);
  EXPECT_EQ(evaluated.loss, one_epoch.test_loss);
  ASSERT_TRUE(evaluated.accuracy.has_value());
  EXPECT_EQ(evaluated.accuracy, one_epoch.test_accuracy);
}

TEST(Trainer, EightPartitionsAndTinyDataDoNotDeadlock) {
  // More partitions than the data has mini-batches per epoch (2), and a partial last batch.
  const auto result = train(small("1,2,3,4,5,6,7", {{"model", "vgg16"}, {"data", "synthetic:40"}, {"batch_size", 24}, {"epochs", 1}}), quiet());
  EXPECT_EQ(result.steps, 2);
  EXPECT_EQ(result.info.staleness, (std::vector<int>{13, 11, 9, 7, 5, 3, 1, 0}));
}

}  // namespace
}  // namespace stalepipe::train
