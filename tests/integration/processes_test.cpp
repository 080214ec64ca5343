// --executor processes through the CLI on loopback: equality with the emulated executor,
// failure handling (a killed rank, mismatched flags), per-partition checkpoints and resume.
// Every run is lenet5 on synthetic data; the whole file takes well under a minute.
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/serialize.h>
#include <torch/version.h>

#include "stalepipe/exec/checkpoint.h"
#include "stalepipe/exec/pipeline.h"
#include "stalepipe/exec/processes.h"
#include "stalepipe/models/zoo.h"
#include "stalepipe/partition/plan.h"
#include "support/sanitizers.h"
#include "support/ranks.h"
#include "support/script_modules.h"
#include "support/temp_dir.h"

namespace stalepipe::test {
namespace {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

class ProcessesEqualEmulated : public ::testing::TestWithParam<std::pair<std::string, int>> {};

TEST_P(ProcessesEqualEmulated, BitForBit) {
  const auto [ppv, K] = GetParam();
  TempDir dir;
  const std::string ref = dir.file("emulated"), run = dir.file("processes");
  ASSERT_EQ(wait_for(spawn(train_args(ppv, K, ref, "emulated"), {}, dir.file("ref.log")), 60), 0)
      << slurp(dir.file("ref.log"));
  ASSERT_EQ(run_launch(K, train_args(ppv, K, run, "processes"), dir.file("run.log"), 60), 0)
      << slurp(dir.file("run.log"));
  expect_same_results(ref, run);
  // Rank 0 writes the run's files; the metrics came from the last rank.
  std::istringstream ma(slurp(ref + "/metrics.jsonl")), mb(slurp(run + "/metrics.jsonl"));
  int lines = 0;
  for (std::string la, lb; std::getline(ma, la) && std::getline(mb, lb); ++lines) {
    const auto ja = nlohmann::json::parse(la), jb = nlohmann::json::parse(lb);
    for (const char* key : {"train_loss", "train_accuracy", "test_loss", "test_accuracy"}) {
      EXPECT_EQ(ja[key], jb[key]) << key << " line " << lines;
    }
  }
  EXPECT_EQ(lines, 2);
  EXPECT_EQ(json_file(run + "/checkpoint/manifest.json")["shards"].size(), static_cast<size_t>(K));
}

INSTANTIATE_TEST_SUITE_P(Ranks, ProcessesEqualEmulated,
                         ::testing::Values(std::make_pair(std::string("2"), 2),
                                           std::make_pair(std::string("1,3"), 3)),
                         [](const auto& info) { return "K" + std::to_string(info.param.second); });

// A channels-last tensor crosses ranks as its NHWC view: it arrives channels-last with the
// same values; a plain tensor arrives plain. Two ranks of one group, on two threads.
TEST(Processes, ChannelsLastTensorsArriveChannelsLast) {
  const int port = free_port();
  auto options = [port](int rank) {
    return exec::ProcessGroupOptions().world_size(2).rank(rank).master_addr("127.0.0.1").master_port(port)
        .timeout_seconds(30);
  };
  torch::manual_seed(1);
  const torch::Tensor cl = torch::randn({2, 3, 4, 5}).contiguous(torch::MemoryFormat::ChannelsLast);
  const torch::Tensor plain = torch::randn({2, 3, 4, 5});
  exec::ProcessGroup::Received got_cl, got_plain;
  std::string errors[2];
  auto rank = [&](int r) {
    try {
      exec::ProcessGroup group(options(r), "same");
      if (r == 0) {
        group.send_tensor(cl, 1, 10, 0);
        group.send_tensor(plain, 1, 20, 1);
        group.flush();
      } else {
        got_cl = group.recv_tensor(0, 10);
        got_plain = group.recv_tensor(0, 20);
      }
      group.barrier();  // neither group goes before the other is done
    } catch (const std::exception& e) {
      errors[r] = e.what();
    }
  };
  std::thread one(rank, 1);
  rank(0);
  one.join();
  ASSERT_EQ(errors[0] + errors[1], "");
  ASSERT_TRUE(got_cl.tensor.defined() && got_plain.tensor.defined());
  EXPECT_EQ(got_cl.tensor.sizes(), cl.sizes());
  EXPECT_EQ(got_cl.tensor.strides(), cl.strides());
  EXPECT_TRUE(torch::equal(got_cl.tensor, cl));
  EXPECT_EQ(got_plain.tensor.strides(), plain.strides());
  EXPECT_TRUE(torch::equal(got_plain.tensor, plain));
  EXPECT_EQ(got_plain.step, 1);
}

// Activations and gradients cross the ranks channels-last (as NHWC views) and the weights
// still equal the emulated executor's, with or without recomputation on the first rank.
TEST(Processes, AChannelsLastResNetEqualsEmulated) {
  TempDir dir;
  auto args = [](const std::string& out, const std::string& executor) {
    auto a = train_args("3", 2, out, executor, 1);
    a[2] = "resnet8";  // --model
    a.insert(a.end(), {"--layout", "channels-last"});
    return a;
  };
  const std::string ref = dir.file("emulated"), run = dir.file("processes");
  ASSERT_EQ(wait_for(spawn(args(ref, "emulated"), {}, dir.file("ref.log")), 60), 0) << slurp(dir.file("ref.log"));
  ASSERT_EQ(run_launch(2, args(run, "processes"), dir.file("run.log"), 60), 0) << slurp(dir.file("run.log"));
  expect_same_results(ref, run);

  // Recomputation through weight layer 1 (the stem, part of partition 1) changes what rank 0
  // keeps between forward and backward, not the results.
  const std::string recomputed = dir.file("recomputed");
  auto recompute_args = args(recomputed, "processes");
  recompute_args.insert(recompute_args.end(), {"--recompute", "1"});
  ASSERT_EQ(run_launch(2, recompute_args, dir.file("recomputed.log"), 60), 0) << slurp(dir.file("recomputed.log"));
  expect_same_results(ref, recomputed);
}

TEST(Processes, TorchScriptModelFileEqualsEmulated) {
  // Every rank loads the file; each trains its partition of the scripted module's tensors.
  TempDir dir;
  torch::manual_seed(5);
  const std::string file = save_script(
      script_sequential({script_sequential({script_conv2d(1, 4, 5), script_relu(), script_max_pool2d(2)}),
                         script_flatten(), script_linear(4 * 14 * 14, 10)}),
      dir.file("net.pt"));
  const std::string ref = dir.file("emulated"), run = dir.file("processes");
  auto args = [&](const std::string& out, const std::string& executor) {
    auto a = train_args("1", 2, out, executor, 1);
    a[1] = "--model-file";
    a[2] = file;
    return a;
  };
  ASSERT_EQ(wait_for(spawn(args(ref, "emulated"), {}, dir.file("ref.log")), 60), 0) << slurp(dir.file("ref.log"));
  ASSERT_EQ(run_launch(2, args(run, "processes"), dir.file("run.log"), 60), 0) << slurp(dir.file("run.log"));
  expect_same_results(ref, run);
}

TEST(Processes, NewSchedulesMitigationsAndBf16EqualEmulated) {
  // Micro-batch messages (GPipe), per-rank stashes and delays (1F1B, mitigations) and bf16
  // registers over Gloo.
  const std::vector<std::vector<std::string>> variants = {
      {"--schedule", "gpipe", "--micro-batches", "4"},
      {"--schedule", "1f1b-stash", "--weight-prediction", "--spike-compensation", "--delay-aware-lr"},
      {"--precision", "bf16"},
      {"--delay-nesterov", "--delay-aware-lr", "--warmup-epochs", "0.5"},
      {"--optimizer", "adamw", "--lr", "0.002", "--betas", "0.8,0.99", "--eps", "1e-7", "--weight-decay", "0.05"}};
  for (const auto& extra : variants) {
    TempDir dir;
    const std::string ref = dir.file("emulated"), run = dir.file("processes");
    auto ref_args = train_args("1,3", 3, ref, "emulated", 1);
    auto run_args = train_args("1,3", 3, run, "processes", 1);
    ref_args.insert(ref_args.end(), extra.begin(), extra.end());
    run_args.insert(run_args.end(), extra.begin(), extra.end());
    ASSERT_EQ(wait_for(spawn(ref_args, {}, dir.file("ref.log")), 60), 0) << slurp(dir.file("ref.log"));
    ASSERT_EQ(run_launch(3, run_args, dir.file("run.log"), 60), 0)
        << slurp(dir.file("run.log"));
    SCOPED_TRACE(extra[1]);
    expect_same_results(ref, run);
  }
}

TEST(Processes, KilledRankEndsTheOthersWithinTheBoundNamingIt) {
  TempDir dir;
  const int port = free_port();
  auto args = train_args("1,3", 3, dir.file("run"), "processes", 100000, "synthetic:2048");
  // A small lr: stale weights at lr 0.05 for an epoch of 64 steps can diverge, which would
  // end the ranks before the kill.
  args.insert(args.end(), {"--timeout-seconds", "10", "--lr", "0.005"});
  std::vector<pid_t> pids;
  for (int r = 0; r < 3; ++r) {
    pids.push_back(spawn(args, rank_env(r, 3, port), dir.file("rank" + std::to_string(r) + ".log")));
  }
  // Training runs once rank 0 logged the pipeline (after the rendezvous).
  ASSERT_TRUE(file_shows(dir.file("rank0.log"), "pipeline", 30));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  ::kill(pids[1], SIGKILL);
  EXPECT_EQ(wait_for(pids[1], 5), 128 + SIGKILL);
  const auto killed = Clock::now();
  for (int r : {0, 2}) {
    const int status = wait_for(pids[r], 10 + 5);
    const std::string log = slurp(dir.file("rank" + std::to_string(r) + ".log"));
    EXPECT_NE(status, -1) << "rank " << r << " still ran 15 s after rank 1 died\n" << log;
    EXPECT_NE(status, 0) << log;
    EXPECT_NE(log.find("rank 1 (partition 2)"), std::string::npos) << log;
  }
  EXPECT_LT(Clock::now() - killed, std::chrono::seconds(15));
  for (pid_t pid : pids) EXPECT_EQ(::kill(pid, 0), -1) << "pid " << pid << " is still there";
}

TEST(Processes, LauncherStopsEveryRankWhenOneFails) {
  TempDir dir;
  auto args = train_args("2", 2, dir.file("run"), "processes", 100000, "synthetic:2048");
  // A small lr: stale weights at lr 0.05 for an epoch of 64 steps can diverge, which would
  // end the ranks before the kill.
  args.insert(args.end(), {"--timeout-seconds", "10", "--lr", "0.005"});
  const pid_t launcher = spawn(launch_args(2, args), {}, dir.file("launch.log"));
  std::vector<pid_t> ranks;
  ASSERT_TRUE(file_shows(dir.file("launch.log"), "pipeline", 30));
  std::istringstream log(slurp(dir.file("launch.log")));
  for (std::string line; std::getline(log, line);) {
    const auto at = line.find(": pid ");
    if (line.rfind("[launch] rank ", 0) == 0 && at != std::string::npos) {
      ranks.push_back(std::stoi(line.substr(at + 6)));
    }
  }
  ASSERT_EQ(ranks.size(), 2u) << slurp(dir.file("launch.log"));
  ::kill(ranks[1], SIGKILL);
  const int status = wait_for(launcher, 20);
  const std::string out = slurp(dir.file("launch.log"));
  EXPECT_EQ(status, 128 + SIGKILL) << out;  // the first failure's status
  EXPECT_NE(out.find("[rank 0] "), std::string::npos) << out;
  for (pid_t pid : ranks) EXPECT_EQ(::kill(pid, 0), -1) << "rank pid " << pid << " is still there";
}

TEST(Processes, MismatchedConfigurationsAreRefused) {
  TempDir dir;
  const int port = free_port();
  auto a = train_args("2", 2, dir.file("a"), "processes");
  auto b = train_args("2", 2, dir.file("b"), "processes");
  b.insert(b.end(), {"--lr", "0.01"});
  const pid_t p0 = spawn(a, rank_env(0, 2, port), dir.file("r0.log"));
  const pid_t p1 = spawn(b, rank_env(1, 2, port), dir.file("r1.log"));
  EXPECT_EQ(wait_for(p0, 30), 1);
  EXPECT_EQ(wait_for(p1, 30), 1);
  for (const char* log : {"r0.log", "r1.log"}) {
    EXPECT_NE(slurp(dir.file(log)).find("different configuration"), std::string::npos)
        << slurp(dir.file(log));
  }
}

TEST(Processes, WorldSizeMustMatchThePartitions) {
  TempDir dir;
  const pid_t p = spawn(train_args("2", 2, dir.file("a"), "processes"), rank_env(0, 3, free_port()),
                        dir.file("r0.log"));
  EXPECT_EQ(wait_for(p, 30), 2);
  EXPECT_NE(slurp(dir.file("r0.log")).find("--world-size 3 but"), std::string::npos) << slurp(dir.file("r0.log"));
}

// A TCP connection to 127.0.0.1:port (retried until the listener is up) that sends `bytes`.
int connect_and_send(int port, const std::string& bytes) {
  const auto start = Clock::now();
  for (;;) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
      if (!bytes.empty()) (void)!::write(fd, bytes.data(), bytes.size());
      return fd;
    }
    ::close(fd);
    if (Clock::now() - start > std::chrono::seconds(30)) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

TEST(Processes, GarbageAndSilentConnectionsToTheMasterPortNeitherCrashNorHangTheRanks) {
  TempDir dir;
  const int port = free_port();
  const std::string ref = dir.file("emulated"), run = dir.file("processes");
  ASSERT_EQ(wait_for(spawn(train_args("2", 2, ref, "emulated"), {}, dir.file("ref.log")), 60), 0)
      << slurp(dir.file("ref.log"));
  const pid_t r0 = spawn(train_args("2", 2, run, "processes"), rank_env(0, 2, port), dir.file("rank0.log"));
  std::string garbage(4096, '\0');
  for (size_t i = 0; i < garbage.size(); ++i) garbage[i] = static_cast<char>((i * 2654435761u) >> 13);
  const int noisy = connect_and_send(port, garbage);
  const int silent = connect_and_send(port, "");  // opens and never speaks
  ASSERT_GE(noisy, 0) << "rank 0 never listened on its master port\n" << slurp(dir.file("rank0.log"));
  const pid_t r1 = spawn(train_args("2", 2, run, "processes"), rank_env(1, 2, port), dir.file("rank1.log"));
  EXPECT_EQ(wait_for(r0, 60), 0) << slurp(dir.file("rank0.log"));
  EXPECT_EQ(wait_for(r1, 60), 0) << slurp(dir.file("rank1.log"));
  ::close(noisy);
  ::close(silent);
  expect_same_results(ref, run);
}

TEST(Processes, PortInUseIsAClearError) {
  TempDir dir;
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::listen(fd, 1);
  const int port = ntohs(addr.sin_port);
  auto args = train_args("2", 2, dir.file("a"), "processes");
  args.insert(args.end(), {"--timeout-seconds", "3"});
  const pid_t p = spawn(args, rank_env(0, 2, port), dir.file("r0.log"));
  EXPECT_EQ(wait_for(p, 30), 1);
  ::close(fd);
  EXPECT_NE(slurp(dir.file("r0.log")).find("already in use"), std::string::npos) << slurp(dir.file("r0.log"));
}

TEST(Processes, UnreachableMasterIsAClearError) {
  TempDir dir;
  auto args = train_args("2", 2, dir.file("a"), "processes");
  args.insert(args.end(), {"--timeout-seconds", "3"});
  // Rank 1 with nobody listening at the master's port.
  const pid_t p = spawn(args, rank_env(1, 2, free_port()), dir.file("r1.log"));
  EXPECT_EQ(wait_for(p, 30), 1);
  const std::string log = slurp(dir.file("r1.log"));
  EXPECT_NE(log.find("cannot reach the master (rank 0)"), std::string::npos) << log;
}

TEST(Processes, ResumeFromPartitionShardsMatchesAnUninterruptedRun) {
  TempDir dir;
  const std::string ref = dir.file("ref"), run = dir.file("run");
  const int epochs = 4;
  // Both runs drain every 8 steps, so a stop at one of those points changes nothing.
  auto reference = train_args("2", 2, ref, "processes", epochs, "synthetic:1024");
  reference.insert(reference.end(), {"--checkpoint-every", "8"});
  ASSERT_EQ(run_launch(2, reference, dir.file("ref.log"), 60), 0)
      << slurp(dir.file("ref.log"));
  // Stop every rank at step 40 (32 steps per epoch: mid-epoch 2), deterministically; each
  // rank checkpoints its shard and exits as interrupted (130).
  auto stopped = train_args("2", 2, run, "processes", epochs, "synthetic:1024");
  stopped.insert(stopped.end(), {"--checkpoint-every", "8", "--stop-at-step", "40"});
  ASSERT_EQ(run_launch(2, stopped, dir.file("run.log"), 60), 130) << slurp(dir.file("run.log"));
  const std::string manifest = run + "/checkpoint/manifest.json";
  ASSERT_EQ(json_file(manifest)["step"].get<int>(), 40) << slurp(manifest);
  ASSERT_EQ(json_file(manifest)["epochs_done"].get<int>(), 1) << slurp(manifest);
  ASSERT_EQ(run_launch(2, {"train", "--resume", run, "--progress", "none"}, dir.file("resume.log"), 60), 0)
      << slurp(dir.file("resume.log"));
  expect_same_results(ref, run);

  // A manifest whose shards disagree (partition 2 from another step, with its true checksum)
  // is refused; eval falls back to the previous checkpoint, and fails once there is none.
  const auto m = json_file(manifest);
  const std::string other = "step-1/part-2.pt";
  fs::create_directories(run + "/checkpoint/step-1");
  fs::copy_file(run + "/checkpoint/" + m["shards"][0].get<std::string>(), run + "/checkpoint/" + other);
  auto bad = m;
  bad["shards"][1] = other;
  bad["shard_bytes"][1] = m["shard_bytes"][0];
  bad["shard_crc32"][1] = m["shard_crc32"][0];
  std::ofstream(manifest) << bad.dump(2);
  const pid_t eval = spawn({"eval", "--run", run}, {}, dir.file("eval.log"));
  EXPECT_EQ(wait_for(eval, 30), 0) << slurp(dir.file("eval.log"));
  EXPECT_NE(slurp(dir.file("eval.log")).find("disagree; this checkpoint cannot be resumed; falling back"),
            std::string::npos) << slurp(dir.file("eval.log"));
  fs::remove(run + "/checkpoint/previous.json");
  const pid_t none = spawn({"eval", "--run", run}, {}, dir.file("none.log"));
  EXPECT_EQ(wait_for(none, 30), 1);
  EXPECT_NE(slurp(dir.file("none.log")).find("no usable checkpoint"), std::string::npos) << slurp(dir.file("none.log"));
  EXPECT_NE(slurp(dir.file("none.log")).find("disagree"), std::string::npos) << slurp(dir.file("none.log"));
}

// The ranks agree on the checkpoint to resume: rank 1's damaged shard of the newest one makes
// both ranks take the previous one, and the result is still the uninterrupted run's.
TEST(Processes, ADamagedShardOfOneRankMakesAllRanksResumeFromThePreviousCheckpoint) {
  TempDir dir;
  const std::string ref = dir.file("ref"), run = dir.file("run");
  auto reference = train_args("2", 2, ref, "processes", 2, "synthetic:512");
  reference.insert(reference.end(), {"--checkpoint-every", "8"});
  ASSERT_EQ(run_launch(2, reference, dir.file("ref.log"), 60), 0) << slurp(dir.file("ref.log"));
  auto stopped = train_args("2", 2, run, "processes", 2, "synthetic:512");
  stopped.insert(stopped.end(), {"--checkpoint-every", "8", "--stop-at-step", "24"});
  ASSERT_EQ(run_launch(2, stopped, dir.file("run.log"), 60), 130) << slurp(dir.file("run.log"));
  const auto m = json_file(run + "/checkpoint/manifest.json");
  ASSERT_EQ(m["format"].get<int>(), 2);
  ASSERT_EQ(json_file(run + "/checkpoint/previous.json")["step"].get<int>(), 16);
  // Each rank's digest reached rank 0's manifest.
  for (int k = 0; k < 2; ++k) {
    const std::string shard = slurp(run + "/checkpoint/" + m["shards"][k].get<std::string>());
    EXPECT_EQ(m["shard_bytes"][k].get<int64_t>(), static_cast<int64_t>(shard.size())) << k;
    EXPECT_EQ(m["shard_crc32"][k].get<uint32_t>(), exec::crc32_of(shard)) << k;
  }
  const std::string shard = run + "/checkpoint/step-24/part-2.pt";
  std::string bytes = slurp(shard);
  bytes[bytes.size() / 2] ^= 0x01;
  std::ofstream(shard, std::ios::binary) << bytes;
  // config.json keeps --stop-at-step 24: the resume from step 16 stops there again (130).
  ASSERT_EQ(run_launch(2, {"train", "--resume", run, "--progress", "none"}, dir.file("resume.log"), 60), 130)
      << slurp(dir.file("resume.log"));
  const std::string log = slurp(dir.file("resume.log"));
  EXPECT_NE(log.find("[rank 1] warning: " + shard + ": damaged: CRC-32"), std::string::npos) << log;
  EXPECT_NE(log.find("[rank 0] warning: " + run + "/checkpoint/manifest.json: the shard of partition 2 is damaged"),
            std::string::npos) << log;
  EXPECT_NE(log.find("resuming at step 16"), std::string::npos) << log;
  ASSERT_EQ(run_launch(2, {"train", "--resume", run, "--progress", "none"}, dir.file("end.log"), 60), 0)
      << slurp(dir.file("end.log"));
  expect_same_results(ref, run);
}

}  // namespace
}  // namespace stalepipe::test

namespace stalepipe::test {
namespace {

// Every executor now runs one training loop. These digests were recorded with the
// code before it (commit b84479c, two loops) by the same commands; the weights after 50
// mini-batches of Fashion-MNIST must not have moved by a bit. The CPU kernels are pinned to
// AVX2 (ATen, OpenBLAS, oneDNN) so that the digests hold on any AVX2 machine, not only the one
// that recorded them.
TEST(OneLoop, WeightsEqualThoseOfTheCodeBeforeBitForBit) {
  if (TORCH_VERSION_MAJOR != 1 || TORCH_VERSION_MINOR != 13) {
    GTEST_SKIP() << "the digests were recorded with LibTorch 1.13, whose kernels differ from " << TORCH_VERSION;
  }
#if defined(__x86_64__)
  const bool haswell = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  const bool haswell = false;
#endif
  if (!haswell) GTEST_SKIP() << "the pins below select AVX2 and FMA kernels, which this CPU cannot run";
  const std::vector<std::string> pins = {"ATEN_CPU_CAPABILITY=avx2", "OPENBLAS_CORETYPE=Haswell",
                                         "DNNL_MAX_CPU_ISA=AVX2", "ONEDNN_MAX_CPU_ISA=AVX2",
                                         "OMP_NUM_THREADS=1"};
  struct Case {
    std::string model, ppv, batch, digest;
    int partitions;
  };
  for (const Case& c : {Case{"lenet5", "1,2", "128", "c8186b8efcc3ae96", 3},
                        Case{"resnet20", "7", "32", "fe7ffba1f21ac20b", 2}}) {
    for (const std::string executor : {"emulated", "threads", "processes"}) {
      TempDir dir;
      const std::vector<std::string> args = {"train", "--model", c.model, "--pipeline", c.ppv, "--batch-size", c.batch,
                                             "--max-steps", "50", "--epochs", "1", "--threads-per-worker", "1",
                                             "--layout", "nchw",  // the layout the digests were recorded in
                                             "--executor", executor, "--progress", "none", "--out", dir.file("run")};
      // Sanitized builds (scripts/sanitize.sh) run ResNet-20 5-15x slower.
      const int seconds = test::kSanitizer ? 1800 : 120;
      const int status = executor == "processes" ? run_launch(c.partitions, args, dir.file("log"), seconds, pins)
                                                 : wait_for(spawn(args, pins, dir.file("log")), seconds);
      ASSERT_EQ(status, 0) << slurp(dir.file("log"));
      EXPECT_EQ(weights_digest(dir.file("run"), c.model, c.ppv), c.digest) << c.model << " " << executor;
    }
  }
}


#ifdef STALEPIPE_MNIST_EXAMPLE
// "test_accuracy ..." and "partition k weights_digest ..." lines of examples/mnist_dropout.
std::vector<std::string> result_lines(const std::string& log) {
  std::vector<std::string> lines;
  std::istringstream in(slurp(log));
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("test_accuracy", 0) == 0 || line.rfind("partition", 0) == 0) lines.push_back(line);
  }
  return lines;
}

// The MNIST example's port (dropout, NLL loss, 3 partitions): the same weights on every executor.
TEST(Processes, TheMnistDropoutExampleIsBitIdenticalOnEveryExecutorAndRepeat) {
  TempDir dir;
  const std::vector<std::string> args{"--data", "synthetic:384", "--epochs", "1", "--seed", "3"};
  auto run = [&](const std::string& executor, const std::string& log) {
    auto a = args;
    a.insert(a.end(), {"--executor", executor});
    EXPECT_EQ(wait_for(spawn(a, {}, log, STALEPIPE_MNIST_EXAMPLE), 120), 0) << slurp(log);
    return result_lines(log);
  };
  const auto emulated = run("emulated", dir.path() + "/emulated.log");
  ASSERT_EQ(emulated.size(), 4u) << slurp(dir.path() + "/emulated.log");
  EXPECT_EQ(run("threads", dir.path() + "/threads1.log"), emulated);
  EXPECT_EQ(run("threads", dir.path() + "/threads2.log"), emulated);

  std::vector<pid_t> ranks;
  const std::string port = std::to_string(free_port());
  for (int r = 0; r < 3; ++r) {
    auto a = args;
    a.insert(a.end(), {"--executor", "processes"});
    ranks.push_back(spawn(a, {"RANK=" + std::to_string(r), "WORLD_SIZE=3", "MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + port},
                          dir.path() + "/rank" + std::to_string(r) + ".log", STALEPIPE_MNIST_EXAMPLE));
  }
  for (int r = 0; r < 3; ++r) {
    const std::string log = dir.path() + "/rank" + std::to_string(r) + ".log";
    ASSERT_EQ(wait_for(ranks[r], 120), 0) << slurp(log);
    const auto lines = result_lines(log);
    ASSERT_EQ(lines.size(), 2u) << slurp(log);
    EXPECT_EQ(lines[0], emulated[0]) << "rank " << r;  // the shared test accuracy
    EXPECT_EQ(lines[1], emulated[1 + r]) << "rank " << r << " trains partition " << r + 1;
  }
}
#endif

}  // namespace
}  // namespace stalepipe::test
