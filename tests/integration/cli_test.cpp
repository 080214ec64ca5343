// The stalepipe program as a user meets it: exit statuses, one-line errors, kill and resume.
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/version.h>

#include "stalepipe/api/option_fields.h"
#include "stalepipe/api/pipeline_trainer.h"
#include "stalepipe/models/zoo.h"
#include "stalepipe/stalepipe.h"
#include "support/cli.h"
#include "support/data_files.h"
#include "support/temp_dir.h"

namespace stalepipe::test {
namespace {

namespace fs = std::filesystem;

const std::vector<std::string> kSmallRun = {"train", "--data", "synthetic:256", "--batch-size", "16",
                                            "--epochs", "2", "--pipeline", "2", "--threads", "2",
                                            "--checkpoint-every", "4", "--progress", "none"};

TEST(Cli, VersionNamesTheReleaseAndTheLibTorch) {
  const CliResult r = run_cli({"--version"});
  EXPECT_EQ(r.status, 0) << r.err;
  const std::string release = c10::str("stalepipe ", STALEPIPE_VERSION_MAJOR, ".", STALEPIPE_VERSION_MINOR, ".",
                                       STALEPIPE_VERSION_PATCH, " (LibTorch ", TORCH_VERSION, ")");
  EXPECT_EQ(r.out.substr(0, r.out.find('\n')), release);
}

TEST(Cli, UsageErrorsExitTwo) {
  expect_one_line_error(run_cli(with(kSmallRun, {"--batch-size", "0"})), 2, "--batch-size must be >= 1, got 0");
  expect_one_line_error(run_cli(with(kSmallRun, {"--lr", "-0.1"})), 2, "--lr must be a positive number");
  expect_one_line_error(run_cli(with(kSmallRun, {"--model", "resnet21"})), 2, "6n+2");
  expect_one_line_error(run_cli(with(kSmallRun, {"--model", "inception"})), 2, "inception");
  expect_one_line_error(run_cli(with(kSmallRun, {"--data", "imagenet"})), 2, "imagenet");
  expect_one_line_error(run_cli(with(kSmallRun, {"--pipeline", "5"})), 2, "a register may follow layer 1, 2, 3, 4");
  expect_one_line_error(run_cli(with(kSmallRun, {"--recompute", "9"})), 2,
                        "--recompute 9: model lenet5 has 5 weight layers; recomputation may end after layer 1, 2, 3, 4");
  expect_one_line_error(run_cli(with(kSmallRun, {"--recompute", "-1"})), 2, "--recompute must be a weight layer");
  expect_one_line_error(run_cli(with(kSmallRun, {"--frobnicate"})), 2, "frobnicate");
  expect_one_line_error(run_cli({"train", "--epochs", "many"}), 2, "many");
  expect_one_line_error(run_cli({"layers", "--model", "resnet7"}), 2, "6n+2");
  expect_one_line_error(run_cli({"schedule", "--partitions", "0"}), 2, "--partitions must be 1..64");
  expect_one_line_error(run_cli({"schedule", "--micro-batches", "0"}), 2, "--micro-batches must be >= 1, got 0");
  expect_one_line_error(run_cli({"simulate", "--micro-batches", "2"}), 2,
                        "--micro-batches 2 applies to --schedule gpipe only, not stale");
  expect_one_line_error(run_cli(with(kSmallRun, {"--micro-batches", "4"})), 2, "--micro-batches 4 applies to schedule gpipe only");
  expect_one_line_error(run_cli(with(kSmallRun, {"--stop-at-step", "-1"})), 2, "--stop-at-step must be >= 0, got -1");
  expect_one_line_error(run_cli(with(kSmallRun, {"--schedule", "hybrid", "--hybrid-switch", "x"})), 2, "--hybrid-switch x: expected a number of epochs");
  expect_one_line_error(run_cli(with(kSmallRun, {"--devices", "tpu"})), 2, "--devices tpu");
  expect_one_line_error(run_cli(with(kSmallRun, {"--schedule", "pipedream"})), 2, "expected stale, sequential, hybrid, gpipe or 1f1b-stash");
  expect_one_line_error(run_cli(with(kSmallRun, {"--precision", "fp16"})), 2, "--precision 'fp16': expected fp32, tf32 or bf16");
  expect_one_line_error(run_cli(with(kSmallRun, {"--precision", "tf32"})), 2,
                        "--precision tf32: partition 1 runs on cpu, which has no TF32 (fp32 and bf16 run there)");
  expect_one_line_error(run_cli(with(kSmallRun, {"--cudnn-benchmark"})), 2,
                        "--cudnn-benchmark: partition 1 runs on cpu, which has no cuDNN");
}

TEST(Cli, DropoutAndLossErrorsNameTheFlag) {
  expect_one_line_error(run_cli(with(kSmallRun, {"--dropout", "0.5"})), 2,
                        "model lenet5 has no dropout placement (dropout 0.5); alexnet and vgg16 have one");
  expect_one_line_error(run_cli(with(kSmallRun, {"--model", "alexnet", "--dropout", "1"})), 2,
                        "--dropout must be in [0, 1), got 1");
  expect_one_line_error(run_cli(with(kSmallRun, {"--loss", "hinge"})), 2,
                        "--loss 'hinge' is not a loss stalepipe knows by name; expected cross-entropy, nll, mse");
  expect_one_line_error(run_cli(with(kSmallRun, {"--loss", "mse"})), 2,
                        "--loss mse needs float targets but data set synthetic/train has class indices");
  expect_one_line_error(run_cli(with(kSmallRun, {"--data", "synthetic-regression:64"})), 2,
                        "--loss cross-entropy needs class indices but data set synthetic-regression/train has float "
                        "regression targets; use mse");
}

// Checked before any training; "--cuda-graphs: partition N ..." on this CPU build as on a GPU
// machine (a CPU partition can never be captured).
TEST(Cli, CudaGraphsAreRefusedWhereAPartitionCannotBeCaptured) {
  const auto graphs = with(kSmallRun, {"--cuda-graphs"});
  expect_one_line_error(run_cli(graphs), 2, "--cuda-graphs: partition 1 runs on cpu (--devices is not set)");
  expect_one_line_error(run_cli(with(graphs, {"--devices", "cpu,cpu"})), 2,
                        "--cuda-graphs: partition 1 runs on cpu; CUDA graphs need CUDA devices");
  expect_one_line_error(run_cli(with(graphs, {"--recompute", "1", "--devices", "cpu,cpu"})), 2,
                        "--cuda-graphs and --recompute do not combine");
  expect_one_line_error(run_cli(with(graphs, {"--model", "alexnet", "--dropout", "0.5"})), 2,
                        "--cuda-graphs and --dropout 0.5 do not combine");
  expect_one_line_error(run_cli(with(graphs, {"--replicas", "2"})), 2, "--cuda-graphs and --replicas 2 do not combine");
}

TEST(Cli, LayersStatesTheDropoutDefault) {
  const auto r = run_cli({"layers", "--model", "alexnet"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("dropout: p = 0 before fc1 and fc2 (--dropout; default 0: none)"), std::string::npos) << r.out;
  const auto with_dropout = run_cli({"layers", "--model", "vgg16", "--dropout", "0.5"});
  EXPECT_NE(with_dropout.out.find("dropout: p = 0.5 before fc1 and fc2"), std::string::npos) << with_dropout.out;
}

// A regression run: MSE on float targets; its metrics and summary carry losses, no accuracy.
TEST(Cli, RegressionMetricsHaveNoAccuracy) {
  TempDir dir;
  const auto r = run_cli({"train", "--data", "synthetic-regression:128", "--loss", "mse", "--batch-size", "16",
                          "--epochs", "2", "--pipeline", "2", "--threads", "2", "--lr", "0.01",
                          "--progress", "none", "--out", dir.path()});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("test_loss "), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("accuracy"), std::string::npos) << r.out;
  std::ifstream metrics(dir.path() + "/metrics.jsonl");
  int lines = 0;
  for (std::string line; std::getline(metrics, line); ++lines) {
    const auto j = nlohmann::json::parse(line);
    EXPECT_TRUE(j.contains("train_loss") && j.contains("test_loss")) << line;
    EXPECT_FALSE(j.contains("train_accuracy") || j.contains("test_accuracy")) << line;
  }
  EXPECT_EQ(lines, 2);
  std::ifstream in(dir.path() + "/summary.json");
  const auto summary = nlohmann::json::parse(in);
  EXPECT_FALSE(summary.contains("test_accuracy"));
  EXPECT_TRUE(summary.contains("test_loss"));
  const auto eval = run_cli({"eval", "--run", dir.path()});
  EXPECT_EQ(eval.status, 0) << eval.err;
  EXPECT_NE(eval.out.find("test_loss "), std::string::npos);
  EXPECT_EQ(eval.out.find("test_accuracy"), std::string::npos);
}

TEST(Cli, EvalEveryAndTargetsReportTheTimeToAccuracy) {
  TempDir dir;
  const auto r = run_cli({"train", "--data", "synthetic:96", "--batch-size", "32", "--epochs", "2", "--pipeline", "2",
                          "--threads", "2", "--eval-every", "2", "--targets", "1,100", "--progress", "none",
                          "--out", dir.path()});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("eval at step 2 (epoch 0.666667)  test loss "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("target 1%: reached at step 2 "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("target 100%: not reached"), std::string::npos) << r.err;
  std::ifstream in(dir.path() + "/summary.json");
  const auto summary = nlohmann::json::parse(in);
  EXPECT_EQ(summary.at("evaluations"), 4);  // steps 2, 3 (epoch 1), 4 and 6 (epoch 2)
  expect_one_line_error(run_cli(with(kSmallRun, {"--targets", "90,150"})), 2,
                        "--targets must be accuracies in (0, 100] %, got 150");
  expect_one_line_error(run_cli(with(kSmallRun, {"--eval-every", "-3"})), 2, "--eval-every must be >= 0, got -3");
}

TEST(Cli, NormMitigationsNeedABatchNormModelAndTheHybridSchedule) {
  expect_one_line_error(run_cli(with(kSmallRun, {"--fixed-weight-norm"})), 2,
                        "--fixed-weight-norm: model lenet5 has no bias-free conv or linear layer followed by a batch norm");
  expect_one_line_error(run_cli(with(kSmallRun, {"--hybrid-norm-reset"})), 2,
                        "--hybrid-norm-reset needs schedule hybrid");
}

// The optimizer's options: each refusal is one line naming the flag and the reason, exit 2.
TEST(Cli, OptimizerOptionsThatDoNotApplyAreOneLineErrors) {
  expect_one_line_error(run_cli(with(kSmallRun, {"--optimizer", "adam"})), 2,
                        "--optimizer 'adam': not an optimizer; choose sgd or adamw");
  const auto adamw = [](std::vector<std::string> more) {
    more.insert(more.begin(), {"--optimizer", "adamw"});
    return with(kSmallRun, more);
  };
  expect_one_line_error(run_cli(adamw({"--betas", "0.9,1"})), 2, "--betas must each lie in [0, 1), got 1");
  expect_one_line_error(run_cli(adamw({"--betas", "0.9"})), 2, "--betas takes two rates, beta1,beta2; got 1");
  expect_one_line_error(run_cli(adamw({"--eps", "0"})), 2, "--eps must be > 0, got 0");
  expect_one_line_error(run_cli(adamw({"--momentum", "0.5"})), 2,
                        "--momentum 0.5 is SGD's; under --optimizer adamw the first moment decays at beta1 (--betas)");
  expect_one_line_error(run_cli(adamw({"--delay-nesterov"})), 2,
                        "--delay-nesterov acts on SGD's momentum; --optimizer adamw has none");
  expect_one_line_error(run_cli(with(kSmallRun, {"--betas", "0.9,0.99"})), 2,
                        "--betas applies to adamw, not --optimizer sgd");
  expect_one_line_error(run_cli(with(kSmallRun, {"--delay-nesterov", "--weight-prediction"})), 2,
                        "--delay-nesterov moves the look-ahead itself; it does not combine with --weight-prediction");
  expect_one_line_error(run_cli(with(kSmallRun, {"--delay-nesterov", "--momentum", "0"})), 2,
                        "--delay-nesterov looks ahead along the momentum; it needs momentum between 0 and 1, got 0");
  expect_one_line_error(run_cli(with(kSmallRun, {"--delay-nesterov", "--schedule", "1f1b-stash"})), 2,
                        "--delay-nesterov and --schedule 1f1b-stash do not combine");
}

TEST(Cli, SweepBadSelectionsAndChangedFilesExitTwo) {
  TempDir dir;
  const std::string file = dir.path() + "/tiny.json";
  auto write = [&](double lr) {
    std::ofstream(file) << nlohmann::json{
        {"out", "results"},
        {"seeds", {1}},
        {"defaults", {{"model", "lenet5"}, {"data", "synthetic:64"}, {"epochs", 1}, {"batch_size", 32},
                      {"lr", lr}, {"threads", 1}, {"progress", "none"}}},
        {"runs", {{{"name", "baseline"}, {"baseline", true}}}}}.dump();
  };
  write(0.05);
  expect_one_line_error(run_cli({"sweep", file, "--run", "ppv9"}), 2,
                        "--run ppv9: the experiment has no run of that name");
  expect_one_line_error(run_cli({"sweep", file, "--seed", "4"}), 2, "--seed 4: not among the seeds of " + file);
  expect_one_line_error(run_cli({"sweep", file, "--data", "mnist:/somewhere"}), 2,
                        "--data mnist:/somewhere needs --out");
  ASSERT_EQ(run_cli({"sweep", file}).status, 0);
  write(0.5);  // the finished run no longer matches the file
  expect_one_line_error(run_cli({"sweep", file, "--dry-run"}), 2, "holds a run with other settings");
}

TEST(Cli, ADivergingRunExitsOneWithTheCauseAndAnIntactCheckpoint) {
  TempDir dir;
  const auto r = run_cli(with(kSmallRun, {"--lr", "0.01", "--lr-schedule", "step", "--lr-milestones", "1",
                                          "--lr-gamma", "1e9", "--out", dir.path() + "/run"}));
  expect_one_line_error(r, 1, "the run diverged");
  EXPECT_NE(r.err.find("d_1 = 1 update(s) stale"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("The checkpoint of step 16 is intact"), std::string::npos) << r.err;
  const auto eval = run_cli({"eval", "--run", dir.path() + "/run"});
  EXPECT_EQ(eval.status, 0) << eval.err;
}

TEST(Cli, AnOutDirectoryThatCannotBeCreatedExitsOne) {
  expect_one_line_error(run_cli(with(kSmallRun, {"--out", "/dev/null/run"})), 1,
                        "run directory /dev/null/run: cannot create the directory");
}

TEST(Cli, MissingAndCorruptDataExitOne) {
  expect_one_line_error(run_cli(with(kSmallRun, {"--data", "mnist:/nonexistent/dir"})), 1, "/nonexistent/dir");
  TempDir dir;
  // A valid-looking Fashion-MNIST folder whose training images are a corrupt gzip stream.
  for (const char* name : {"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
                           "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"}) {
    std::ofstream(dir.path() + "/" + name, std::ios::binary) << "\x1f\x8b\x08\x00garbage-bytes";
  }
  const auto r = run_cli(with(kSmallRun, {"--data", "fashion-mnist:" + dir.path()}));
  expect_one_line_error(r, 1, "train-images-idx3-ubyte.gz");
}

TEST(Cli, HelpLayersAndSchedule) {
  EXPECT_EQ(run_cli({"train", "--help"}).status, 0);
  const auto layers = run_cli({"layers", "--model", "resnet20"});
  ASSERT_EQ(layers.status, 0) << layers.err;
  EXPECT_NE(layers.out.find("block1_3"), std::string::npos) << layers.out;
  const auto schedule = run_cli({"schedule", "--partitions", "3", "--steps", "8"});
  ASSERT_EQ(schedule.status, 0) << schedule.err;
  EXPECT_NE(schedule.out.find("1\t3\t4"), std::string::npos) << schedule.out;  // worker 1: d=3, 4 in flight
  EXPECT_NE(schedule.out.find("3\t0\t1"), std::string::npos) << schedule.out;
}

// The flag of a field of the option tree: its name with dashes, but for the three exceptions.
std::string flag_of(const OptionField& f) {
  if (f.field == Field::ppv) return "--pipeline";
  if (f.field == Field::dataset) return "--data";
  if (f.field == Field::algorithm) return "--optimizer";
  std::string flag = "--" + f.name;
  std::replace(flag.begin(), flag.end(), '_', '-');
  return flag;
}

TEST(Cli, EveryFlagOfTrainHelpIsAFieldOfTheRegistryOrTheProgramsOwn) {
  const auto help = run_cli({"train", "--help"});
  ASSERT_EQ(help.status, 0) << help.err;
  std::set<std::string> shown;
  const std::regex flag(R"((^|\n)\s+(?:-\w,)?(--[a-z0-9-]+))");
  for (std::sregex_iterator m(help.out.begin(), help.out.end(), flag), none; m != none; ++m) shown.insert((*m)[2]);
  std::set<std::string> expected = {"--help", "--resume", "--export", "--rank", "--world-size",
                                    "--master-addr", "--master-port", "--timeout-seconds"};
  for (const OptionField& f : option_fields()) {
    if (f.field != Field::segment_steps) expected.insert(flag_of(f));  // an API knob, no flag
  }
  EXPECT_EQ(shown, expected);
  // Help texts are the registry's, with the fields they name shown as flags.
  EXPECT_NE(help.out.find("epochs at which the step schedule multiplies lr by --lr-gamma"), std::string::npos);
  EXPECT_EQ(help.out.find("Options::"), std::string::npos) << help.out;
}

TEST(Cli, BenchAndMemoryBadFlagsExitTwo) {
  expect_one_line_error(run_cli({"bench", "--steps", "3"}), 2, "--steps 3: a 2-partition pipeline needs 4K+2 = 10");
  expect_one_line_error(run_cli({"bench", "--pipeline", "none"}), 2, "at least one register");
  expect_one_line_error(run_cli({"bench", "--pipeline", "9"}), 2, "a register may follow layer 1, 2, 3, 4");
  expect_one_line_error(run_cli({"bench", "--pipeline", "2", "--partitions", "3"}), 2, "--partitions");
  expect_one_line_error(run_cli({"bench", "--model", "resnet21"}), 2, "6n+2");
  expect_one_line_error(run_cli({"bench", "--batch-size", "0"}), 2, "--batch-size must be >= 1, got 0");
  expect_one_line_error(run_cli({"bench", "--balance", "luck"}), 2, "--balance 'luck'");
  expect_one_line_error(run_cli({"bench", "--warmup-steps", "-1"}), 2, "--warmup-steps must be >= 0");
  expect_one_line_error(run_cli({"bench", "--partitions", "0"}), 2, "--partitions must be 1..64, got 0");
  expect_one_line_error(run_cli({"bench", "--rounds", "0"}), 2, "--rounds must be 1..100, got 0");
  expect_one_line_error(run_cli({"bench", "--seconds", "-1"}), 2, "--seconds must be in (0, 3600], got -1");
  expect_one_line_error(run_cli({"bench", "--seconds", "1", "--rounds", "2"}), 2, "--rounds 2: with --seconds");
  expect_one_line_error(run_cli({"bench", "--seconds", "1", "--processes"}), 2, "--processes: not with --seconds");
  expect_one_line_error(run_cli({"bench", "--cuda-graphs"}), 2,
                        "--devices, --precision and --cuda-graphs: the configuration set runs on the CPU in fp32");
  expect_one_line_error(run_cli({"memory"}), 2, "--pipeline");
  expect_one_line_error(run_cli({"memory", "--pipeline", "none"}), 2, "at least one register");
  expect_one_line_error(run_cli({"memory", "--pipeline", "9"}), 2, "a register may follow layer");
  expect_one_line_error(run_cli({"memory", "--pipeline", "2", "--recompute", "9"}), 2, "--recompute 9: model lenet5");
  expect_one_line_error(run_cli({"bench", "--recompute", "9"}), 2, "--recompute 9: model lenet5");
  expect_one_line_error(run_cli({"memory", "--pipeline", "2", "--channels", "0"}), 2, "--channels must be 1..64");
}

TEST(Cli, SimulateLinkAndProfileDeviceErrorsNameTheFlag) {
  expect_one_line_error(run_cli({"simulate", "--pipeline", "2", "--link", "warp9"}), 2,
                        "--link warp9: not a link; expected one of ideal, nvlink4, pcie5, pcie4, pcie3");
  expect_one_line_error(run_cli({"simulate", "--pipeline", "2", "--link", "25e9,soon"}), 2,
                        "--link 25e9,soon: the latency 'soon' must be a number of seconds >= 0");
  expect_one_line_error(run_cli({"simulate", "--pipeline", "2", "--link", "pcie4", "--transfer-ms", "1"}), 2,
                        "--transfer-ms excludes --link");
  expect_one_line_error(run_cli({"simulate", "--pipeline", "2", "--transfer-ms", "-1"}), 2,
                        "--transfer-ms must be >= 0, got -1");
  // No machine has 100 GPUs; a CPU-only LibTorch has none.
  expect_one_line_error(run_cli({"profile", "--device", "cuda:99"}), 2, "--device: cuda:99 is not present");
  expect_one_line_error(run_cli({"profile", "--device", "tpu"}), 2, "--device tpu: 'tpu' is not a device");
  expect_one_line_error(run_cli({"profile", "--device", "cpu,cpu"}), 2, "--device cpu,cpu: name one device");
  expect_one_line_error(run_cli({"simulate", "--paper-table5", "/nonexistent-profiles"}), 1,
                        "/nonexistent-profiles/resnet56.json");
}

TEST(Cli, SimulateLinkAndPaperTable5) {
  // The link's message time shows in the predicted step: LeNet-5 at PPV 2 sends 16 samples of
  // 16 x 5 x 5 floats (25.6 KB) each way; over 1 MB/s a message takes 25.6 ms, two per cycle
  // of two mini-batches, so the stale step, at least partition 1's F + B (a few ms) without
  // the link, becomes both partitions' (F + B) / 2 + 25.6 ms: it grows by 25.6 ms less half
  // the difference of the partitions' times.
  TempDir dir;
  auto step_ms = [](const std::string& out) {
    const auto at = out.find("one mini-batch every ");
    return at == std::string::npos ? -1.0 : std::stod(out.substr(at + 21));
  };
  const std::string lenet = dir.file("lenet5.json");
  ASSERT_EQ(run_cli({"profile", "--batch-size", "16", "--json", lenet}).status, 0);
  const auto fast = run_cli({"simulate", "--pipeline", "2", "--profile", lenet, "--link", "ideal"});
  ASSERT_EQ(fast.status, 0) << fast.err;
  EXPECT_NE(fast.out.find("link ideal (unlimited, 0 us)"), std::string::npos) << fast.out;
  const auto slow = run_cli({"simulate", "--pipeline", "2", "--profile", lenet, "--link", "1e6,0"});
  ASSERT_EQ(slow.status, 0) << slow.err;
  EXPECT_NE(slow.out.find("link custom (0.001 GB/s, 0 us)"), std::string::npos) << slow.out;
  EXPECT_GT(step_ms(fast.out), 0) << fast.out;
  const double grown = step_ms(slow.out) - step_ms(fast.out);
  EXPECT_GT(grown, 20.0) << fast.out << slow.out;
  EXPECT_LE(grown, 25.6 + 1e-6) << fast.out << slow.out;
  // Profiles of the four networks on this CPU (tiny: batch 2, one step), two partitions each
  // timed as blocks, then the table.
  const std::pair<const char*, const char*> networks[] = {
      {"resnet56", "19"}, {"resnet110", "37"}, {"resnet224", "75"}, {"resnet362", "121"}};
  for (const auto& [model, ppv] : networks) {
    const auto r = run_cli({"profile", "--model", model, "--channels", "3", "--batch-size", "2", "--warmup", "0",
                            "--repeats", "1", "--device", "cpu", "--pipeline", ppv, "--json",
                            dir.file(std::string(model) + ".json")});
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.out.find("each partition timed as one block"), std::string::npos) << r.out;
  }
  const auto table = run_cli({"simulate", "--paper-table5", dir.path()});
  ASSERT_EQ(table.status, 0) << table.err;
  EXPECT_NE(table.out.find("profiles taken on cpu"), std::string::npos) << table.out;
  for (const char* row : {"resnet56 (19)", "resnet110 (37)", "resnet224 (75)", "resnet362 (121)", "1.65x", "1.82x",
                          "nvlink4 (450 GB/s, 5 us)", "pcie3 (12 GB/s, 10 us)"}) {
    EXPECT_NE(table.out.find(row), std::string::npos) << row << "\n" << table.out;
  }
  EXPECT_EQ(table.out.find("not measured"), std::string::npos) << table.out;
}

TEST(Cli, BenchAndMemoryReport) {
  // Correctness of the paths, not speed: small batch, few steps.
  TempDir dir;
  const auto bench = run_cli({"bench", "--model", "lenet5", "--batch-size", "16", "--warmup-steps", "1",
                              "--steps", "10", "--threads", "2", "--rounds", "3", "--json", dir.path() + "/bench.json"});
  ASSERT_EQ(bench.status, 0) << bench.err;
  EXPECT_NE(bench.out.find("bit-identical"), std::string::npos) << bench.out;
  EXPECT_NE(bench.out.find("medians of 3 alternated rounds"), std::string::npos) << bench.out;
  const auto j = nlohmann::json::parse(std::ifstream(dir.path() + "/bench.json"));
  EXPECT_TRUE(j.at("executors_agree").get<bool>());
  EXPECT_EQ(j.at("partitions").get<int>(), 2);
  EXPECT_EQ(j.at("rounds").get<int>(), 3);
  // 1 thread, 2 threads, pipeline, emulated, the pipeline's 2 workers side by side
  EXPECT_EQ(j.at("measurements").size(), 5u);
  EXPECT_EQ(j.at("measurements")[4].at("key"), "side_by_side");
  // Each rate is the middle one of its three rounds.
  for (const auto& m : j.at("measurements")) {
    auto rounds = m.at("round_images_per_second").get<std::vector<double>>();
    ASSERT_EQ(rounds.size(), 3u) << m.at("key");
    std::sort(rounds.begin(), rounds.end());
    EXPECT_DOUBLE_EQ(m.at("images_per_second").get<double>(), rounds[1]) << m.at("key");
    const std::string key = m.at("key");
    EXPECT_DOUBLE_EQ(j.at("rates").at(key).get<double>(), rounds[1]) << key;
  }
  EXPECT_NE(bench.out.find("ceiling: the pipeline's 2 workers run side by side"), std::string::npos);
  for (const char* rate : {"one_thread", "all_threads", "pipeline", "emulated", "bound", "simulated",
                           "side_by_side"}) {
    EXPECT_GT(j.at("rates").at(rate).get<double>(), 0) << rate;
  }
  EXPECT_EQ(j.at("targets").size(), 7u);  // the replicas' is not measured here
  const auto replicated = run_cli({"bench", "--model", "lenet5", "--batch-size", "16", "--warmup-steps", "1", "--steps",
                                   "10", "--threads", "2", "--replicas", "2", "--json", dir.path() + "/replicas.json"});
  ASSERT_EQ(replicated.status, 0) << replicated.err;
  const auto jr = nlohmann::json::parse(std::ifstream(dir.path() + "/replicas.json"));
  EXPECT_GT(jr.at("rates").at("replicas").get<double>(), 0);
  EXPECT_GT(jr.at("rates").at("simulated_replicas").get<double>(), 0);
  EXPECT_NE(replicated.out.find("2 replicas of it, threads executor, 4 x 1 thread(s)"), std::string::npos)
      << replicated.out;
  const auto memory = run_cli({"memory", "--model", "lenet5", "--pipeline", "2", "--batch-size", "8",
                               "--json", dir.path() + "/memory.json"});
  ASSERT_EQ(memory.status, 0) << memory.err;
  const auto m = nlohmann::json::parse(std::ifstream(dir.path() + "/memory.json"));
  ASSERT_EQ(m.at("partitions").size(), 2u);
  EXPECT_EQ(m.at("partitions")[0].at("max_in_flight").get<int>(), 2);
  EXPECT_GT(m.at("partitions")[0].at("measured_peak_bytes").get<int64_t>(), 0);
  EXPECT_GT(m.at("scheme_percent").get<double>(), 0);
  // The stale pipeline and its recomputing point (all of partition 1: layer 2) side by side.
  EXPECT_NE(memory.out.find("  stale pipeline, --recompute 2 "), std::string::npos) << memory.out;
  EXPECT_LT(m.at("recompute_peak_bytes").get<int64_t>(), m.at("stale_peak_bytes").get<int64_t>());
}

TEST(Cli, BenchProcessesReportsTheMedianOfAlternatedRuns) {
  TempDir dir;
  const auto bench = run_cli({"bench", "--model", "lenet5", "--batch-size", "16", "--warmup-steps", "1",
                              "--steps", "10", "--threads", "2", "--processes", "--processes-repeats", "3",
                              "--json", dir.path() + "/bench.json"});
  ASSERT_EQ(bench.status, 0) << bench.err;
  const auto rates = nlohmann::json::parse(std::ifstream(dir.path() + "/bench.json")).at("rates");
  for (const char* which : {"processes", "threads_train"}) {
    auto runs = rates.at(std::string(which) + "_runs").get<std::vector<double>>();
    ASSERT_EQ(runs.size(), 3u) << which;
    for (double r : runs) EXPECT_GT(r, 0) << which;
    std::sort(runs.begin(), runs.end());
    EXPECT_DOUBLE_EQ(rates.at(which).get<double>(), runs[1]) << which;
  }
  EXPECT_NE(bench.out.find("medians of 3 alternated runs"), std::string::npos) << bench.out;
  expect_one_line_error(run_cli({"bench", "--processes", "--processes-repeats", "0"}), 2,
                        "--processes-repeats");
}

nlohmann::json summary(const std::string& dir) {
  return nlohmann::json::parse(std::ifstream(dir + "/summary.json"));
}

// kill -9 after the first checkpoint, then --resume: the same summary as an uninterrupted run.
void expect_killed_run_resumes_to_the_same_result(const std::vector<std::string>& run) {
  TempDir whole, killed;
  ASSERT_EQ(run_cli(with(run, {"--out", whole.path()})).status, 0);
  const pid_t pid = start_cli(with(run, {"--out", killed.path()}), killed.path() + "/o", killed.path() + "/e");
  wait_for_checkpoint(killed.path());
  kill(pid, SIGKILL);
  wait_cli(pid);
  ASSERT_TRUE(fs::exists(killed.path() + "/lock"));  // left behind; the kernel released the flock
  const auto resumed = run_cli({"train", "--resume", killed.path(), "--progress", "none"});
  ASSERT_EQ(resumed.status, 0) << resumed.err;
  EXPECT_EQ(summary(killed.path())["test_loss"], summary(whole.path())["test_loss"]);
  EXPECT_EQ(summary(killed.path())["test_accuracy"], summary(whole.path())["test_accuracy"]);
  // eval reads the final checkpoint and reproduces the summary's accuracy.
  const auto eval = run_cli({"eval", "--run", killed.path()});
  ASSERT_EQ(eval.status, 0) << eval.err;
  char expected[64];
  std::snprintf(expected, sizeof expected, "test_accuracy %.4f", summary(whole.path())["test_accuracy"].get<double>());
  EXPECT_NE(eval.out.find(expected), std::string::npos) << eval.out;
}

TEST(Cli, KilledRunResumesToTheSameResult) { expect_killed_run_resumes_to_the_same_result(kSmallRun); }

// Dropout masks come from (seed, partition, step): a resumed run draws the ones it would have.
TEST(Cli, KilledRunWithDropoutResumesToTheSameResult) {
  expect_killed_run_resumes_to_the_same_result(
      with(kSmallRun, {"--model", "alexnet", "--dropout", "0.5", "--pipeline", "3,6", "--threads", "3",
                       "--data", "synthetic:128", "--test-subset", "32"}));
}

// AdamW's moments and counts, and the delay-corrected look-ahead, live in the checkpoint too.
TEST(Cli, KilledRunWithAdamWOrTheLookAheadResumesToTheSameResult) {
  expect_killed_run_resumes_to_the_same_result(
      with(kSmallRun, {"--optimizer", "adamw", "--lr", "0.002", "--betas", "0.8,0.99", "--weight-decay", "0.05"}));
  expect_killed_run_resumes_to_the_same_result(with(kSmallRun, {"--delay-nesterov", "--delay-aware-lr"}));
}

TEST(Cli, InterruptDrainsAndCheckpoints) {
  TempDir dir;
  const pid_t pid = start_cli(with(kSmallRun, {"--out", dir.path(), "--epochs", "30"}), dir.path() + "/o", dir.path() + "/e");
  wait_for_checkpoint(dir.path());
  kill(pid, SIGINT);
  EXPECT_EQ(wait_cli(pid), 130);
  // Resuming a finished-or-stopped run works, and starting over in the same folder is refused.
  const auto again = run_cli(with(kSmallRun, {"--out", dir.path()}));
  expect_one_line_error(again, 2, "already holds a run with a checkpoint; resume it");
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// Ctrl-Z / SIGTSTP stops the run until SIGCONT, and the time stopped is not training time.
// The signal follows the first epoch's checkpoint, so it falls in the second epoch, whose
// training time must stay below the pause.
TEST(Cli, TimeStoppedBySigtstpIsNotTrainingTime) {
  TempDir dir;
  const pid_t pid = start_cli({"train", "--data", "synthetic:2048", "--batch-size", "16", "--epochs", "2",
                               "--pipeline", "2", "--threads", "2", "--progress", "none", "--out", dir.path()},
                              dir.path() + "/o", dir.path() + "/e");
  wait_for_checkpoint(dir.path());
  kill(pid, SIGTSTP);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, WUNTRACED), pid);
  ASSERT_TRUE(WIFSTOPPED(status)) << "the run ended before it was stopped";
  constexpr double kPauseSeconds = 4.0;
  std::this_thread::sleep_for(std::chrono::duration<double>(kPauseSeconds));
  kill(pid, SIGCONT);
  ASSERT_EQ(wait_cli(pid), 0) << read_bytes(dir.path() + "/e");
  std::vector<double> trained;  // training seconds at each epoch's end
  std::ifstream metrics(dir.path() + "/metrics.jsonl");
  for (std::string line; std::getline(metrics, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j["type"] == "epoch") trained.push_back(j["wall_seconds"].get<double>());
  }
  ASSERT_EQ(trained.size(), 2u);
  EXPECT_LT(trained[1] - trained[0], kPauseSeconds);
}

// kSmallRun stopped at step 20: its checkpoints are step 20 (newest) and step 16 (previous).
void stopped_at_20(const std::string& dir) {
  const auto r = run_cli(with(kSmallRun, {"--out", dir, "--stop-at-step", "20"}));
  ASSERT_EQ(r.status, 130) << r.err;
  ASSERT_TRUE(fs::exists(dir + "/checkpoint/step-20/part-2.pt"));
  ASSERT_TRUE(fs::exists(dir + "/checkpoint/step-16/part-2.pt"));
}

// The lines of `text` that contain `fragment`.
int lines_with(const std::string& text, const std::string& fragment) {
  std::istringstream in(text);
  int n = 0;
  for (std::string line; std::getline(in, line);) n += line.find(fragment) != std::string::npos;
  return n;
}

TEST(Cli, ResumeOverADamagedNewestCheckpointTakesThePreviousOne) {
  TempDir whole;
  ASSERT_EQ(run_cli(with(kSmallRun, {"--out", whole.path()})).status, 0);
  const struct {
    const char* name;
    const char* file;  // under checkpoint/
    std::function<std::string(std::string)> damage;
    const char* fault;
  } cases[] = {
      {"truncated shard", "step-20/part-2.pt", [](std::string b) { return b.substr(0, b.size() - 100); },
       "step-20/part-2.pt: truncated or grown: "},
      {"flipped bit", "step-20/part-1.pt", [](std::string b) { b[b.size() / 3] ^= 0x04; return b; },
       "step-20/part-1.pt: damaged: CRC-32 "},
      {"corrupt manifest", "manifest.json", [](std::string b) { return b.substr(0, b.size() / 2); },
       "manifest.json: corrupt checkpoint manifest: not valid JSON"},
  };
  for (const auto& c : cases) {
    TempDir dir;
    stopped_at_20(dir.path());
    const std::string file = dir.path() + "/checkpoint/" + c.file;
    write_bytes(file, c.damage(read_bytes(file)));
    // config.json keeps --stop-at-step 20, so the resume from step 16 stops there again (130).
    const auto resumed = run_cli({"train", "--resume", dir.path(), "--progress", "none"});
    ASSERT_EQ(resumed.status, 130) << c.name << ": " << resumed.err;
    EXPECT_EQ(lines_with(resumed.err, "warning: " + file.substr(0, file.size() - std::strlen(c.file))), 1)
        << c.name << ": " << resumed.err;
    EXPECT_EQ(lines_with(resumed.err, std::string(c.fault)), 1) << c.name << ": " << resumed.err;
    EXPECT_EQ(lines_with(resumed.err, "falling back to the previous checkpoint " + dir.path() +
                                          "/checkpoint/previous.json"), 1) << resumed.err;
    EXPECT_NE(resumed.err.find("resuming at step 16"), std::string::npos) << c.name << ": " << resumed.err;
    const auto finished = run_cli({"train", "--resume", dir.path(), "--progress", "none"});
    ASSERT_EQ(finished.status, 0) << c.name << ": " << finished.err;
    EXPECT_EQ(finished.err.find("warning"), std::string::npos) << c.name << ": " << finished.err;
    EXPECT_EQ(summary(dir.path())["test_loss"], summary(whole.path())["test_loss"]) << c.name;
    EXPECT_EQ(summary(dir.path())["test_accuracy"], summary(whole.path())["test_accuracy"]) << c.name;
  }
}

TEST(Cli, ResumeWithBothCheckpointsDamagedExitsOneNamingEach) {
  TempDir dir;
  stopped_at_20(dir.path());
  const std::string c = dir.path() + "/checkpoint/";
  write_bytes(c + "step-20/part-2.pt", "");
  write_bytes(c + "step-16/part-1.pt", read_bytes(c + "step-16/part-1.pt").substr(0, 64));
  const auto r = run_cli({"train", "--resume", dir.path(), "--progress", "none"});
  expect_one_line_error(r, 1, dir.path() + ": no usable checkpoint: " + c + "step-20/part-2.pt: truncated or grown: 0 bytes");
  EXPECT_NE(r.err.find(c + "step-16/part-1.pt: truncated or grown: 64 bytes"), std::string::npos) << r.err;
  // eval takes the same fall-back and fails the same way.
  expect_one_line_error(run_cli({"eval", "--run", dir.path()}), 1, "no usable checkpoint");
}

TEST(Cli, ASecondWriterIsRefusedAtOnceEvenBeforeTheFirstCheckpoint) {
  TempDir dir;
  const std::string run = dir.path() + "/run";
  // One long epoch (ResNet-20: about a minute; LeNet-5's ended before the resume below) and no
  // checkpoint before its end: the refusal cannot come from the checkpoint.
  const auto first_args = std::vector<std::string>{"train", "--model", "resnet20", "--data", "synthetic:16384",
                                                   "--batch-size", "16", "--lr", "0.01", "--epochs", "1", "--pipeline", "3",
                                                   "--threads", "1", "--progress", "none", "--out", run};
  const pid_t first = start_cli(first_args, dir.path() + "/o", dir.path() + "/e");
  for (int i = 0; i < 600 && read_bytes(run + "/lock").empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const std::string holder = "pid " + std::to_string(first) + " holds " + run + "/lock";
  const auto second = run_cli(with(kSmallRun, {"--out", run}));
  const bool checkpointed = fs::exists(run + "/checkpoint/manifest.json");
  ASSERT_EQ(waitpid(first, nullptr, WNOHANG), 0) << "the first run ended early: " << read_bytes(dir.path() + "/e");
  expect_one_line_error(second, 2, "run directory " + run + ": another run is writing there (" + holder + ")");
  EXPECT_FALSE(checkpointed) << "the first run wrote a checkpoint before the second was refused";
  const auto resume = run_cli({"train", "--resume", run, "--progress", "none"});
  expect_one_line_error(resume, 2, "another run is writing there (" + holder + ")");
  // kill -9 leaves the lock file, but not the lock: the directory is free again.
  kill(first, SIGKILL);
  wait_cli(first);
  ASSERT_TRUE(fs::exists(run + "/lock"));
  const auto after = run_cli(with(kSmallRun, {"--out", run}));
  EXPECT_EQ(after.status, 0) << after.err;
}

}  // namespace
}  // namespace stalepipe::test

namespace stalepipe::test {
namespace {

// One assembly path: train, the library, bench and simulate cut a model the same way for
// the same K and criterion (memory takes a PPV and cuts nothing).
TEST(OneAssemblyPath, TrainApiBenchAndSimulateChooseTheSamePpv) {
  for (const std::string balance : {"params", "flops"}) {
    TempDir dir;
    const auto trained = run_cli({"train", "--data", "synthetic:64", "--batch-size", "16", "--epochs", "1",
                                  "--max-steps", "2", "--partitions", "3", "--balance", balance,
                                  "--progress", "none", "--out", dir.path() + "/run"});
    ASSERT_EQ(trained.status, 0) << trained.err;
    const std::string ppv = nlohmann::json::parse(std::ifstream(dir.path() + "/run/summary.json"))["ppv"];

    Options options;
    options.pipeline().partitions(3).balance(partition::balance_from_name(balance));
    options.optimizer().lr_schedule(LrScheduleKind::kConstant);
    const PipelineTrainer api(models::make_model("lenet5", models::InputShape{}), options);
    EXPECT_EQ(partition::format_ppv(api.info().ppv), ppv) << balance;

    const auto bench = run_cli({"bench", "--partitions", "3", "--balance", balance, "--batch-size", "8",
                                "--warmup-steps", "0", "--steps", "14", "--threads", "2",
                                "--json", dir.path() + "/bench.json"});
    ASSERT_EQ(bench.status, 0) << bench.err;
    EXPECT_EQ(nlohmann::json::parse(std::ifstream(dir.path() + "/bench.json"))["ppv"], ppv) << balance;

    const auto simulated = run_cli({"simulate", "--partitions", "3", "--balance", balance, "--batch-size", "8"});
    ASSERT_EQ(simulated.status, 0) << simulated.err;
    EXPECT_NE(simulated.out.find("balanced by " + balance + ": --pipeline " + ppv + "\n"), std::string::npos)
        << simulated.out;
  }
}

}  // namespace
}  // namespace stalepipe::test
