// The sweep runner on tiny synthetic experiments: trains what is missing, resumes what was
// interrupted, skips what is finished, and tabulates the summaries.
#include <atomic>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "stalepipe/common/error.h"
#include "stalepipe/study/sweep.h"
#include "stalepipe/train/trainer.h"
#include "support/image_tree.h"
#include "support/temp_dir.h"

namespace stalepipe::study {
namespace {
namespace fs = std::filesystem;

std::string write_experiment(const test::TempDir& dir, const nlohmann::json& runs) {
  nlohmann::json file = {
      {"out", "results"},
      {"seeds", {1, 2}},
      {"defaults", {{"model", "lenet5"}, {"data", "synthetic:96"}, {"epochs", 2}, {"batch_size", 32},
                    {"threads", 1}, {"progress", "none"}}},
      {"runs", runs}};
  const std::string path = dir.path() + "/tiny.json";
  std::ofstream(path) << file.dump(2);
  return path;
}

const nlohmann::json kRuns = nlohmann::json::array(
    {{{"name", "baseline"}, {"baseline", true}}, {{"name", "ppv2"}, {"pipeline", "2"}}});

TEST(Sweep, TrainsMissingSkipsFinishedAndTabulates) {
  test::TempDir dir;
  const auto ex = load_experiment(write_experiment(dir, kRuns));
  ASSERT_EQ(ex.runs.size(), 4u);  // 2 runs x 2 seeds
  EXPECT_EQ(ex.runs[3].options.run().out(), dir.path() + "/results/ppv2-s2");
  EXPECT_EQ(ex.runs[3].options.run().seed(), 2u);
  EXPECT_EQ(ex.runs[3].options.pipeline().ppv(), std::vector<int>{2});
  EXPECT_EQ(run_sweep(ex, {}), 4);
  for (const auto& run : ex.runs) EXPECT_EQ(run_state(run), RunState::kFinished);
  const auto summary_time = fs::last_write_time(ex.runs[0].options.run().out() + "/summary.json");
  EXPECT_EQ(run_sweep(ex, {}), 0);  // everything finished: nothing retrained
  EXPECT_EQ(fs::last_write_time(ex.runs[0].options.run().out() + "/summary.json"), summary_time);

  std::ifstream csv(ex.out + "/results.csv");
  std::string header, line;
  std::getline(csv, header);
  EXPECT_EQ(header.rfind("run,seed,model,ppv,partitions", 0), 0u) << header;
  int rows = 0;
  while (std::getline(csv, line)) ++rows;
  EXPECT_EQ(rows, 4);
  std::stringstream md;
  md << std::ifstream(ex.out + "/results.md").rdbuf();
  EXPECT_NE(md.str().find("| ppv2 | lenet5 | 2 | 2 | stale |"), std::string::npos) << md.str();
  EXPECT_NE(md.str().find(" ± "), std::string::npos) << md.str();  // two seeds: a spread
  for (const char* plot : {"accuracy.svg", "drop_vs_stale.svg"}) {
    std::stringstream svg;
    svg << std::ifstream(ex.out + "/" + plot).rdbuf();
    EXPECT_EQ(svg.str().rfind("<svg", 0), 0u) << plot;
    EXPECT_NE(svg.str().find("ppv2"), std::string::npos) << plot;
  }
}

TEST(Sweep, TabulatesTheTimeToEachTargetAndPlotsAccuracyAgainstTime) {
  test::TempDir dir;
  nlohmann::json runs = kRuns;
  for (auto& run : runs) {
    run["eval_every"] = 2;
    run["targets"] = {1, 100};
  }
  const auto ex = load_experiment(write_experiment(dir, runs));
  run_sweep(ex, {});
  std::stringstream md, svg;
  md << std::ifstream(ex.out + "/results.md").rdbuf();
  EXPECT_NE(md.str().find("| run | seeds | to 1% | to 100% |"), std::string::npos) << md.str();
  EXPECT_NE(md.str().find("| not reached |\n"), std::string::npos) << md.str();  // 100%
  EXPECT_NE(md.str().find("x) | not reached |"), std::string::npos) << md.str();  // ppv2's speed-up at 1%
  svg << std::ifstream(ex.out + "/accuracy_vs_time.svg").rdbuf();
  EXPECT_NE(svg.str().find("<polygon"), std::string::npos);  // the seeds' band
  EXPECT_NE(svg.str().find("ppv2"), std::string::npos);
}

TEST(Sweep, TimesToAccuracyAreComparedWithTheBaselineAndEachTimeReference) {
  test::TempDir dir;
  nlohmann::json runs = kRuns;
  runs.push_back({{"name", "reference"}, {"batch_size", 16}, {"time_reference", true}});
  for (auto& run : runs) {
    run["eval_every"] = 2;
    run["targets"] = {1};
  }
  auto ex = load_experiment(write_experiment(dir, runs));
  ASSERT_EQ(ex.runs.size(), 6u);
  EXPECT_TRUE(ex.runs[4].time_reference);
  EXPECT_FALSE(ex.runs[4].baseline);
  run_sweep(ex, {});
  std::stringstream md;
  md << std::ifstream(ex.out + "/results.md").rdbuf();
  const std::string table = md.str().substr(md.str().find("### Time to accuracy"));
  // Two speed-ups in every reached cell, the references' own rows included (1.00x).
  for (const char* row : {"| baseline | 2 | ", "| ppv2 | 2 | ", "| reference | 2 | "}) {
    const size_t at = table.find(row);
    ASSERT_NE(at, std::string::npos) << row << "\n" << table;
    const std::string line = table.substr(at, table.find('\n', at) - at);
    EXPECT_NE(line.find("x / "), std::string::npos) << line;
  }
  EXPECT_NE(table.find("(1.00x / "), std::string::npos) << table;
  EXPECT_NE(table.find(" / 1.00x)"), std::string::npos) << table;
  EXPECT_NE(table.find("the time of baseline / reference"), std::string::npos) << table;
}

// Sets a finished run's machine and the time it reached target 1%.
void set_machine_and_time(const PlannedRun& run, const std::string& machine, double seconds) {
  const std::string path = run.options.run().out() + "/summary.json";
  auto summary = nlohmann::json::parse(std::ifstream(path));
  summary["machines"] = {machine};
  summary["time_to_target"] = {{{"target", 1.0}, {"reached", true}, {"step", 2}, {"wall_seconds", seconds}}};
  std::ofstream(path) << summary.dump(2);
}

std::string row_of(const std::string& md, const std::string& start) {
  const std::string table = md.substr(md.find("### Time to accuracy"));
  const size_t at = table.find(start);
  return at == std::string::npos ? "(no row " + start + ")" : table.substr(at, table.find('\n', at) - at);
}

// An experiment's runs may train on machines of different speeds: a time is compared only with the reference's
// time of the same seed on the same machine, and the ratios' geometric mean is the speed-up.
TEST(Sweep, TimesCompareSeedBySeedAndOnlyWithinOneMachine) {
  test::TempDir dir;
  nlohmann::json runs = kRuns;
  for (auto& run : runs) {
    run["eval_every"] = 2;
    run["targets"] = {1};
  }
  const auto ex = load_experiment(write_experiment(dir, runs));
  run_sweep(ex, {});
  // ex.runs: baseline s1, s2, ppv2 s1, s2. Seed 1 on a machine 2x as slow as seed 2's.
  set_machine_and_time(ex.runs[0], "slow", 20);
  set_machine_and_time(ex.runs[2], "slow", 10);  // 2x sooner
  set_machine_and_time(ex.runs[1], "fast", 12);
  set_machine_and_time(ex.runs[3], "fast", 3);  // 4x sooner
  write_results(ex);
  std::stringstream md;
  md << std::ifstream(ex.out + "/results.md").rdbuf();
  EXPECT_EQ(row_of(md.str(), "| ppv2 |"), "| ppv2 | 2 | 6.50 s (2.83x) |");  // sqrt(2 * 4), not 16 / 6.5
  EXPECT_NE(md.str().find("Trained on: slow (2 runs); fast (2 runs)."), std::string::npos) << md.str();

  set_machine_and_time(ex.runs[3], "slow", 3);  // seed 2's pair now spans two machines
  write_results(ex);
  md.str("");
  md << std::ifstream(ex.out + "/results.md").rdbuf();
  EXPECT_EQ(row_of(md.str(), "| ppv2 |"), "| ppv2 | 2 | 6.50 s |");
  EXPECT_EQ(row_of(md.str(), "| baseline |"), "| baseline | 2 | 16 s (1.00x) |");
}

TEST(Sweep, OneSweepPerSeedTrainsOnlyThatSeed) {
  test::TempDir dir;
  const auto ex = load_experiment(write_experiment(dir, kRuns));
  SweepOptions seed2;
  seed2.seeds = {2};
  EXPECT_EQ(run_sweep(ex, seed2), 2);  // baseline and ppv2, seed 2 only
  for (const auto& run : ex.runs) {
    EXPECT_EQ(run_state(run), run.seed == 2 ? RunState::kFinished : RunState::kMissing) << run.name;
  }
  EXPECT_EQ(run_sweep(ex, {}), 2);  // the rest: seed 1
  std::stringstream md;
  md << std::ifstream(ex.out + "/results.md").rdbuf();
  EXPECT_NE(md.str().find("| ppv2 | lenet5 | 2 | 2 | stale | "), std::string::npos) << md.str();
}

// A run on an image folder keeps the normalisation it measured in config.json; the finished
// run still counts as the experiment's.
TEST(Sweep, FinishedRunsOnAnImageFolderAreNotTrainedAgain) {
  test::TempDir dir;
  test::write_tree(dir.path() + "/images", "train", {20, 20});
  test::write_tree(dir.path() + "/images", "val", {4, 4});
  const nlohmann::json runs = nlohmann::json::array(
      {{{"name", "baseline"}, {"baseline", true}, {"data", "folder:" + dir.path() + "/images"}}});
  const auto ex = load_experiment(write_experiment(dir, runs));
  EXPECT_EQ(run_sweep(ex, {}), 2);
  for (const auto& run : ex.runs) EXPECT_EQ(run_state(run), RunState::kFinished);
  EXPECT_EQ(run_sweep(ex, {}), 0);
}

// A run named after a PPV with commas trains into a folder without them; a folder of the
// same run written with the commas (as earlier versions named it) is still read and resumed.
TEST(Sweep, RunFoldersHaveNoCommasAndOldFoldersWithCommasStillCollect) {
  test::TempDir dir;
  const nlohmann::json runs = nlohmann::json::array(
      {{{"name", "baseline"}, {"baseline", true}}, {{"name", "6stage-ppv1,2"}, {"pipeline", "1,2"}}});
  const std::string path = write_experiment(dir, runs);
  const auto ex = load_experiment(path);
  ASSERT_EQ(ex.runs.size(), 4u);
  EXPECT_EQ(ex.runs[2].options.run().out(), dir.path() + "/results/6stage-ppv1_2-s1");
  EXPECT_EQ(run_sweep(ex, {}), 4);
  const std::string old_name = dir.path() + "/results/6stage-ppv1,2-s2";
  fs::rename(ex.runs[3].options.run().out(), old_name);

  const auto again = load_experiment(path);
  EXPECT_EQ(again.runs[2].options.run().out(), dir.path() + "/results/6stage-ppv1_2-s1");
  EXPECT_EQ(again.runs[3].options.run().out(), old_name);
  EXPECT_EQ(run_state(again.runs[3]), RunState::kFinished);
  EXPECT_EQ(run_sweep(again, {}), 0);  // both seeds found: nothing retrained
  std::stringstream md;
  md << std::ifstream(again.out + "/results.md").rdbuf();
  EXPECT_NE(md.str().find("| 6stage-ppv1,2 | lenet5 | 1,2 | 3 | stale | "), std::string::npos) << md.str();
  std::ifstream csv(again.out + "/results.csv");
  std::string line;
  int rows = 0;
  while (std::getline(csv, line)) {
    if (line.rfind("\"6stage-ppv1,2\",", 0) != 0) continue;
    ++rows;  // both seeds, the name and the PPV quoted since they hold commas
    EXPECT_NE(line.find(",lenet5,\"1,2\",3,"), std::string::npos) << line;
  }
  EXPECT_EQ(rows, 2);
}

TEST(Sweep, RunFilterTrainsOnlyTheNamedRunsAndRejectsUnknownNamesAndSeeds) {
  test::TempDir dir;
  const auto ex = load_experiment(write_experiment(dir, kRuns));
  SweepOptions only;
  only.names = {"ppv2"};
  only.seeds = {1};
  EXPECT_EQ(run_sweep(ex, only), 1);
  for (const auto& run : ex.runs) {
    EXPECT_EQ(run_state(run), run.name == "ppv2" && run.seed == 1 ? RunState::kFinished
                                                                   : RunState::kMissing)
        << run.name;
  }
  only.names = {"ppv9"};
  EXPECT_THROW(run_sweep(ex, only), UsageError);
  only.names = {};
  only.seeds = {7};  // a seed the file does not list: an error, not a sweep of nothing
  EXPECT_THROW(run_sweep(ex, only), UsageError);
}

TEST(Sweep, AStopCheckpointsTheRunInProgressAndStartsNoOther) {
  test::TempDir dir;
  const auto ex = load_experiment(write_experiment(dir, kRuns));
  std::atomic<bool> stop{true};  // as if Ctrl-C came during the first run
  SweepOptions stopping;
  stopping.stop = &stop;
  EXPECT_EQ(run_sweep(ex, stopping), 1);
  EXPECT_EQ(run_state(ex.runs[0]), RunState::kInterrupted);  // drained and checkpointed
  for (size_t i = 1; i < ex.runs.size(); ++i) EXPECT_EQ(run_state(ex.runs[i]), RunState::kMissing);
  EXPECT_EQ(run_sweep(ex, {}), 4);  // resumes the first, trains the others
  for (const auto& run : ex.runs) EXPECT_EQ(run_state(run), RunState::kFinished);
}

// The file gives K; the run's config.json records the cut chosen. Neither an interrupted nor
// a finished balanced run is taken for one of other settings.
TEST(Sweep, ABalancedRunResumesAndCountsAsFinished) {
  test::TempDir dir;
  const auto ex = load_experiment(
      write_experiment(dir, nlohmann::json::array({{{"name", "k2"}, {"partitions", 2}, {"balance", "params"}}})));
  std::atomic<bool> stop{true};
  SweepOptions stopping;
  stopping.stop = &stop;
  EXPECT_EQ(run_sweep(ex, stopping), 1);
  EXPECT_EQ(run_state(ex.runs[0]), RunState::kInterrupted);
  EXPECT_EQ(run_sweep(ex, {}), 2);
  for (const auto& run : ex.runs) EXPECT_EQ(run_state(run), RunState::kFinished);
}

TEST(Sweep, ResumesAnInterruptedRunToTheSameResult) {
  test::TempDir dir;
  const auto ex = load_experiment(write_experiment(dir, nlohmann::json::array({{{"name", "ppv2"}, {"pipeline", "2"}}})));
  ASSERT_EQ(run_sweep(ex, {}), 2);
  const auto reference = nlohmann::json::parse(std::ifstream(ex.runs[0].options.run().out() + "/summary.json"));
  // Interrupt the first run after its first epoch: keep the checkpoint, lose the summary.
  fs::remove_all(ex.runs[0].options.run().out());
  auto hooks = train::TrainHooks();
  hooks.log = [](const std::string&) {};
  hooks.on_checkpoint = [](int64_t step) {
    if (step == 3) throw std::runtime_error("killed");  // 96 / 32 = 3 steps per epoch
  };
  EXPECT_THROW(train::train(ex.runs[0].options, hooks), std::runtime_error);
  EXPECT_EQ(run_state(ex.runs[0]), RunState::kInterrupted);
  EXPECT_EQ(run_sweep(ex, {}), 1);
  const auto resumed = nlohmann::json::parse(std::ifstream(ex.runs[0].options.run().out() + "/summary.json"));
  EXPECT_EQ(resumed["test_loss"], reference["test_loss"]);
  EXPECT_EQ(resumed["test_accuracy"], reference["test_accuracy"]);
}

TEST(Sweep, ADivergingRunIsRecordedAndTheSweepGoesOn) {
  test::TempDir dir;
  const auto ex = load_experiment(write_experiment(
      dir, nlohmann::json::array({{{"name", "baseline"}, {"baseline", true}},
                                  {{"name", "explodes"}, {"pipeline", "2"}, {"lr", 1e6}}})));
  EXPECT_EQ(run_sweep(ex, {}), 4);
  EXPECT_EQ(run_state(ex.runs[2]), RunState::kDiverged);
  EXPECT_EQ(run_state(ex.runs[3]), RunState::kDiverged);
  EXPECT_EQ(run_sweep(ex, {}), 0);  // diverged runs are not retried
  std::stringstream md;
  md << std::ifstream(ex.out + "/results.md").rdbuf();
  EXPECT_NE(md.str().find("| explodes | lenet5 | 2 |"), std::string::npos) << md.str();
  EXPECT_NE(md.str().find("diverged (2 of 2 seeds diverged)"), std::string::npos) << md.str();
}

// The same file on other data: every run takes the data set, the results go elsewhere.
TEST(Sweep, DataAndOutOverridesApplyToEveryRun) {
  test::TempDir dir;
  const std::string path = write_experiment(dir, kRuns);
  const auto ex = load_experiment(path, ExperimentOverrides{"synthetic:64", dir.path() + "/other"});
  EXPECT_EQ(ex.out, dir.path() + "/other");
  for (const auto& run : ex.runs) {
    EXPECT_EQ(run.options.data().dataset(), "synthetic:64");
    EXPECT_EQ(fs::path(run.options.run().out()).parent_path().string(), dir.path() + "/other");
  }
  try {
    load_experiment(path, ExperimentOverrides{"synthetic:64", ""});
    ADD_FAILURE();
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("ExperimentOverrides::data synthetic:64 needs ExperimentOverrides::out"), std::string::npos) << e.what();
  }
}

// A finished run of other settings is not silently taken for the edited file's.
TEST(Sweep, AFolderOfOtherSettingsIsAnErrorNotASkip) {
  test::TempDir dir;
  const std::string path = write_experiment(dir, kRuns);
  SweepOptions baseline_seed1;
  baseline_seed1.names = {"baseline"};
  baseline_seed1.seeds = {1};
  EXPECT_EQ(run_sweep(load_experiment(path), baseline_seed1), 1);
  auto edited = kRuns;
  edited[0]["lr"] = 0.5;
  const auto ex = load_experiment(write_experiment(dir, edited));
  try {
    run_state(ex.runs[0]);
    ADD_FAILURE();
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("holds a run with other settings"), std::string::npos) << e.what();
  }
  EXPECT_EQ(run_state(ex.runs[1]), RunState::kMissing);  // seed 2 never ran
}

TEST(Sweep, BadExperimentFilesAreUsageErrors) {
  test::TempDir dir;
  EXPECT_THROW(load_experiment(dir.path() + "/none.json"), UsageError);
  EXPECT_THROW(load_experiment(write_experiment(dir, nlohmann::json::array())), UsageError);
  try {
    load_experiment(write_experiment(dir, nlohmann::json::array({{{"name", "x"}, {"batchsize", 4}}})));
    ADD_FAILURE();
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("unknown option 'batchsize'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(load_experiment(write_experiment(dir, nlohmann::json::array({{{"name", "a"}}, {{"name", "a"}}}))),
               UsageError);
  std::ofstream(dir.path() + "/broken.json") << "{ not json";
  EXPECT_THROW(load_experiment(dir.path() + "/broken.json"), UsageError);
}

}  // namespace
}  // namespace stalepipe::study
