// --replicas through the CLI: R x K ranks of the processes executor equal R x K threads bit for
// bit; a killed rank ends every other rank within the bound, naming it, and --resume then
// equals the uninterrupted run; a world size that is not R x K is refused.
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <set>
#include <thread>

#include <gtest/gtest.h>

#include "support/cli.h"
#include "support/ranks.h"
#include "support/temp_dir.h"

namespace stalepipe::test {
namespace {

using Clock = std::chrono::steady_clock;

// train_args of `model` with `replicas` copies of its K-partition pipeline.
std::vector<std::string> replica_args(const std::string& model, const std::string& ppv, int K, int replicas,
                                      const std::string& out, const std::string& executor, int epochs,
                                      const std::string& data) {
  auto args = train_args(ppv, K * replicas, out, executor, epochs, data);
  std::replace(args.begin(), args.end(), std::string("lenet5"), model);
  args.insert(args.end(), {"--replicas", std::to_string(replicas)});
  return args;
}

struct ReplicaCase {
  std::string name, model, ppv;
  std::vector<std::string> flags;
};

void PrintTo(const ReplicaCase& c, std::ostream* out) { *out << c.name; }

class ReplicaProcessesEqualThreads : public ::testing::TestWithParam<ReplicaCase> {};

TEST_P(ReplicaProcessesEqualThreads, BitForBit) {
  const ReplicaCase& c = GetParam();
  TempDir dir;
  const std::string ref = dir.file("threads"), run = dir.file("processes");
  const std::string data = c.model == "lenet5" ? "synthetic:256" : "synthetic:96";
  auto args = [&](const std::string& out, const std::string& executor) {
    auto a = replica_args(c.model, c.ppv, 2, 2, out, executor, 2, data);
    a.insert(a.end(), c.flags.begin(), c.flags.end());
    return a;
  };
  ASSERT_EQ(wait_for(spawn(args(ref, "threads"), {}, dir.file("ref.log")), 120), 0) << slurp(dir.file("ref.log"));
  ASSERT_EQ(run_launch(4, args(run, "processes"), dir.file("run.log"), 120), 0) << slurp(dir.file("run.log"));
  expect_same_results(ref, run);
  const std::string log = slurp(dir.file("run.log"));
  EXPECT_NE(log.find("replica 2: ranks 2-3 (partitions 1-2)"), std::string::npos) << log;
  // One copy of the weights: the checkpoint has a shard per partition, not per rank.
  EXPECT_EQ(json_file(run + "/checkpoint/manifest.json")["shards"].size(), 2u);
}

// GPipe's micro-batches: the gradient sums start in the last micro-batch's backward only; 1F1B
// runs backward with stashed weights, recomputation backward twice.
INSTANTIATE_TEST_SUITE_P(Models, ReplicaProcessesEqualThreads,
                         ::testing::Values(ReplicaCase{"lenet5", "lenet5", "2", {}},
                                           ReplicaCase{"resnet20", "resnet20", "8", {}},
                                           ReplicaCase{"lenet5_gpipe", "lenet5", "2", {"--schedule", "gpipe", "--micro-batches", "2"}},
                                           ReplicaCase{"lenet5_1f1b_prediction_recompute", "lenet5", "2",
                                                       {"--schedule", "1f1b-stash", "--weight-prediction", "--recompute", "1"}},
                                           ReplicaCase{"lenet5_adamw", "lenet5", "2",
                                                       {"--optimizer", "adamw", "--lr", "0.002", "--weight-decay", "0.05"}},
                                           ReplicaCase{"lenet5_delay_nesterov", "lenet5", "2", {"--delay-nesterov"}}),
                         [](const auto& info) { return info.param.name; });

class ReplicaKill : public ::testing::TestWithParam<std::pair<std::string, std::string>> {};

TEST_P(ReplicaKill, AKilledRankEndsEveryRankNamingItAndResumeEqualsTheUninterruptedRun) {
  const auto [model, ppv] = GetParam();
  TempDir dir;
  const std::string ref = dir.file("ref"), run = dir.file("run");
  // A small lr, so that a long run cannot diverge before the kill.
  auto args_for = [&, model = model, ppv = ppv](const std::string& out) {
    auto args = replica_args(model, ppv, 2, 2, out, "processes", 6, model == "lenet5" ? "synthetic:1024" : "synthetic:256");
    args.insert(args.end(), {"--checkpoint-every", "8", "--lr", "0.005", "--timeout-seconds", "10"});
    return args;
  };
  ASSERT_EQ(run_launch(4, args_for(ref), dir.file("ref.log"), 120), 0) << slurp(dir.file("ref.log"));

  const int port = free_port();
  std::vector<pid_t> pids;
  for (int r = 0; r < 4; ++r) pids.push_back(spawn(args_for(run), rank_env(r, 4, port), dir.file("rank" + std::to_string(r) + ".log")));
  ASSERT_TRUE(file_shows(run + "/checkpoint/manifest.json", "\"step\"", 60)) << slurp(dir.file("rank0.log"));
  ::kill(pids[3], SIGKILL);
  EXPECT_EQ(wait_for(pids[3], 5), 128 + SIGKILL);
  const auto killed = Clock::now();
  for (int r : {0, 1, 2}) {
    const int status = wait_for(pids[r], 10 + 5);
    const std::string log = slurp(dir.file("rank" + std::to_string(r) + ".log"));
    EXPECT_NE(status, -1) << "rank " << r << " still ran 15 s after rank 3 died\n" << log;
    EXPECT_NE(status, 0) << log;
    EXPECT_NE(log.find("rank 3 (replica 2, partition 2)"), std::string::npos) << "rank " << r << "\n" << log;
  }
  EXPECT_LT(Clock::now() - killed, std::chrono::seconds(15));

  ASSERT_EQ(run_launch(4, {"train", "--resume", run, "--progress", "none"}, dir.file("resume.log"), 120), 0)
      << slurp(dir.file("resume.log"));
  expect_same_results(ref, run);
}

INSTANTIATE_TEST_SUITE_P(Models, ReplicaKill,
                         ::testing::Values(std::make_pair(std::string("lenet5"), std::string("2")),
                                           std::make_pair(std::string("resnet20"), std::string("8"))),
                         [](const auto& info) { return info.param.first; });

// Evaluation between epochs, the trace (a lane per worker of every replica) and the
// divergence guard, with two replicas in one process.
TEST(ReplicasCli, EvalEveryTracesAndTheDivergenceGuardWorkWithReplicas) {
  TempDir dir;
  auto args = replica_args("lenet5", "2", 2, 2, dir.file("run"), "threads", 2, "synthetic:256");
  args.insert(args.end(), {"--eval-every", "2", "--trace", dir.file("trace.json")});
  ASSERT_EQ(wait_for(spawn(args, {}, dir.file("run.log")), 60), 0) << slurp(dir.file("run.log"));
  // 8 steps per epoch: steps 2, 4, 6, 8 (the epoch's end), 10, ..., 16.
  EXPECT_EQ(json_file(dir.file("run") + "/summary.json")["evaluations"], 8) << slurp(dir.file("run.log"));
  const auto trace = json_file(dir.file("trace.json"));
  std::set<int> lanes;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] == "X") lanes.insert(e["tid"].get<int>());
  }
  EXPECT_EQ(lanes, (std::set<int>{1, 2, 3, 4}));

  auto diverging = replica_args("lenet5", "2", 2, 2, dir.file("bad"), "threads", 2, "synthetic:256");
  diverging.insert(diverging.end(), {"--lr", "1e9", "--momentum", "0"});
  EXPECT_EQ(wait_for(spawn(diverging, {}, dir.file("bad.log")), 60), 1) << slurp(dir.file("bad.log"));
  EXPECT_NE(slurp(dir.file("bad.log")).find("the run diverged"), std::string::npos) << slurp(dir.file("bad.log"));
}

// Every command that takes --replicas refuses an impossible one in one line, exit 2.
TEST(ReplicasCli, BadReplicaSettingsAreOneLineErrors) {
  expect_one_line_error(run_cli({"train", "--replicas", "0", "--data", "synthetic:96", "--progress", "none"}), 2,
                        "--replicas must be >= 1, got 0");
  expect_one_line_error(run_cli({"train", "--data", "synthetic:97", "--batch-size", "32", "--replicas", "2", "--pipeline",
                                 "2", "--epochs", "1", "--progress", "none"}),
                        2, "--replicas 2: the last mini-batch of each epoch has only 1 samples; set --drop-last");
  expect_one_line_error(run_cli({"simulate", "--model", "lenet5", "--pipeline", "2", "--replicas", "0"}), 2,
                        "--replicas must be >= 1, got 0");
  expect_one_line_error(run_cli({"simulate", "--model", "lenet5", "--pipeline", "2", "--replicas", "2", "--replica-link",
                                 "nonsense"}),
                        2, "--replica-link nonsense: not a link");
  expect_one_line_error(run_cli({"bench", "--model", "lenet5", "--replicas", "0"}), 2, "--replicas must be >= 1, got 0");
}

TEST(ReplicasCli, AWorldSizeThatIsNotReplicasTimesPartitionsIsRefused) {
  TempDir dir;
  const pid_t p = spawn(replica_args("lenet5", "2", 2, 2, dir.file("a"), "processes", 1, "synthetic:256"),
                        rank_env(0, 3, free_port()), dir.file("r0.log"));
  EXPECT_EQ(wait_for(p, 30), 2);
  EXPECT_NE(slurp(dir.file("r0.log")).find("--replicas 2: --world-size 3 is not a multiple of it"), std::string::npos)
      << slurp(dir.file("r0.log"));
}

}  // namespace
}  // namespace stalepipe::test
