// `stalepipe train|layers --model-file FILE.pt` and `train --export`: a network written in
// Python (built here in C++, as torch.jit.script makes it) through the CLI, and every way a
// file can be wrong, each with its exit status and one line.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/script.h>
#include <torch/version.h>

#include "support/cli.h"
#include "support/ranks.h"
#include "support/script_modules.h"
#include "support/temp_dir.h"

namespace stalepipe::test {
namespace {

std::vector<std::string> small_run(const std::string& model_file) {
  return {"train", "--model-file", model_file, "--data", "synthetic:128", "--test-subset", "32",
          "--batch-size", "16", "--epochs", "1", "--pipeline", "2", "--threads", "2",
          "--progress", "none"};
}

// LeNet-like for the 1x32x32 synthetic data and its 10 classes: 4 units, 3 weight layers.
torch::jit::Module lenet(uint64_t seed = 5) {
  torch::manual_seed(seed);
  return script_sequential({script_sequential({script_conv2d(1, 4, 5), script_relu(), script_max_pool2d(2)}),
                            script_sequential({script_conv2d(4, 8, 5), script_relu(), script_max_pool2d(2)}),
                            script_flatten(), script_linear(200, 10)});
}

std::string lenet_file(const TempDir& dir) { return save_script(lenet(), dir.file("lenet.pt")); }

std::string bytes_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

TEST(TorchScriptCli, LayersListsTheFilesUnits) {
  TempDir dir;
  const auto r = run_cli({"layers", "--model-file", lenet_file(dir)});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("model lenet: input 1x32x32, 10 classes, 3 weight layers"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("8x5x5"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("2,010"), std::string::npos) << r.out;  // the Linear(200, 10)
}

TEST(TorchScriptCli, TrainsResumesAndExportsTheTrainedNetwork) {
  TempDir dir;
  const std::string file = lenet_file(dir), run = dir.file("run"), exported = dir.file("trained.pt");
  const auto stopped = run_cli(with(small_run(file), {"--out", run, "--stop-at-step", "3", "--checkpoint-every", "3"}));
  ASSERT_EQ(stopped.status, 130) << stopped.err;
  const auto config = nlohmann::json::parse(std::ifstream(run + "/config.json"));
  EXPECT_EQ(config.at("model_file"), file);
  const auto resumed = run_cli({"train", "--resume", run, "--progress", "none", "--export", exported});
  ASSERT_EQ(resumed.status, 0) << resumed.err;
  EXPECT_NE(resumed.err.find("model " + file), std::string::npos) << resumed.err;
  EXPECT_NE(resumed.err.find("exported the trained network to " + exported), std::string::npos) << resumed.err;
  auto before = torch::jit::load(file), after = torch::jit::load(exported);
  EXPECT_FALSE(after.is_training());
  const auto x = torch::ones({2, 1, 32, 32});
  const auto a = before.forward({x}).toTensor(), b = after.forward({x}).toTensor();
  EXPECT_EQ(b.sizes(), a.sizes());
  EXPECT_FALSE(torch::equal(a, b)) << "the exported file holds the untrained weights";
}

// h = c1(x); out = fc(flatten(c2(relu(h)) + h)) for the 1x32x32 synthetic data: stalepipe cuts
// it into three units, the shortcut h a skip tensor from the first to the second.
std::string residual_file(const TempDir& dir) {
  torch::manual_seed(4);
  const auto net = script_module(
      "__torch__.ResidualNet",
      {{"c1", script_conv2d(1, 4, 1)}, {"act", script_relu()}, {"c2", script_conv2d(4, 4, 1)}, {"fc", script_linear(4096, 10)}},
      "\ndef forward(self, x):\n    h = self.c1.forward(x)\n    y = self.c2.forward(self.act.forward(h))\n"
      "    return self.fc.forward(torch.flatten(y + h, 1))\n");
  return save_script(net, dir.file("residual.pt"));
}

// layers and profile take the file and the input a run would give it; FLOPs come from each
// operation's arguments, without LibTorch's profiler and its warnings.
TEST(TorchScriptCli, LayersAndProfileSeeTheImageSize) {
  TempDir dir;
  const auto net = script_module(
      "__torch__.PooledNet", {{"c1", script_conv2d(1, 4, 3)}, {"fc", script_linear(16, 10)}},
      "\ndef forward(self, x):\n"
      "    return self.fc.forward(torch.flatten(torch.adaptive_avg_pool2d(self.c1.forward(x), [2, 2]), 1))\n");
  const std::string file = save_script(net, dir.file("pooled.pt"));
  const auto layers = run_cli({"layers", "--model-file", file, "--image-size", "48"});
  ASSERT_EQ(layers.status, 0) << layers.err;
  EXPECT_NE(layers.out.find("input 1x48x48"), std::string::npos) << layers.out;
  EXPECT_EQ(layers.err.find("flops"), std::string::npos) << layers.err;
  const auto at32 = run_cli({"layers", "--model-file", file});
  ASSERT_EQ(at32.status, 0) << at32.err;
  auto total = [](const std::string& table) { return table.substr(table.rfind("total")); };
  EXPECT_NE(total(layers.out), total(at32.out)) << "the FLOPs grow with the image";
  const auto profile = run_cli({"profile", "--model-file", file, "--image-size", "48", "--batch-size", "4",
                                "--warmup", "1", "--repeats", "1"});
  ASSERT_EQ(profile.status, 0) << profile.err;
  EXPECT_EQ(profile.err.find("flops"), std::string::npos) << profile.err;
  expect_one_line_error(run_cli({"layers", "--model-file", file, "--image-size", "-3"}), 2, "--image-size -3");
}

// A register inside the residual (after c1): every executor trains the same bits, and with
// the pipeline drained after every step the same as without the register; the exported files
// compute the same outputs.
TEST(TorchScriptCli, AResidualCutInsideItsBlockTrainsAlikeEverywhereAndAsWithoutTheRegister) {
  TempDir dir;
  const std::string file = residual_file(dir);
  auto run = [&](const std::string& ppv) {
    return std::vector<std::string>{"train", "--model-file", file, "--data", "synthetic:128", "--test-subset", "32",
                                    "--batch-size", "16", "--epochs", "1", "--max-steps", "6", "--pipeline", ppv,
                                    "--threads-per-worker", "1", "--checkpoint-every", "1", "--progress", "none"};
  };
  const auto e = run_cli(with(run("1"), {"--executor", "emulated", "--out", dir.file("e"), "--export", dir.file("e.pt")}));
  ASSERT_EQ(e.status, 0) << e.err;
  ASSERT_EQ(run_launch(2, with(run("1"), {"--executor", "processes", "--out", dir.file("p")}), dir.file("launch.log"), 240), 0)
      << slurp(dir.file("launch.log"));
  expect_same_results(dir.file("e"), dir.file("p"));
  const auto w = run_cli(with(run("none"), {"--out", dir.file("w"), "--export", dir.file("w.pt")}));
  ASSERT_EQ(w.status, 0) << w.err;
  const auto a = json_file(dir.file("e") + "/summary.json"), b = json_file(dir.file("w") + "/summary.json");
  for (const char* key : {"train_loss", "test_loss", "test_accuracy"}) EXPECT_EQ(a[key], b[key]) << key;
  const auto x = torch::randn({2, 1, 32, 32});
  EXPECT_TRUE(torch::equal(torch::jit::load(dir.file("e.pt")).forward({x}).toTensor(),
                           torch::jit::load(dir.file("w.pt")).forward({x}).toTensor()));
}

// A number read from a shape and a list from split cross the register after c1 as tensors (a
// tensor of integers and the list's two tensors): ranks hand them on as the emulated executor
// does.
TEST(TorchScriptCli, ANumberAndAListCrossBetweenRanksAsTensors) {
  TempDir dir;
  torch::manual_seed(6);
  const auto net = script_module(
      "__torch__.SplitNet", {{"c1", script_conv2d(1, 4, 1)}, {"c2", script_conv2d(2, 2, 1)}, {"fc", script_linear(4096, 10)}},
      "\ndef forward(self, x):\n    n = x.size(0)\n    parts = torch.split(self.c1.forward(x), 2, 1)\n"
      "    h = torch.cat([self.c2.forward(parts[0]), parts[1]], 1)\n    return self.fc.forward(h.reshape(n, -1))\n");
  const std::string file = save_script(net, dir.file("split.pt"));
  const auto layers = run_cli({"layers", "--model-file", file});
  ASSERT_EQ(layers.status, 0) << layers.err;
  EXPECT_EQ(layers.out.find("no register"), std::string::npos) << layers.out;
  const std::vector<std::string> run = {"train", "--model-file", file, "--data", "synthetic:128", "--test-subset", "32",
                                        "--batch-size", "16", "--epochs", "1", "--max-steps", "4", "--pipeline", "1",
                                        "--threads-per-worker", "1", "--progress", "none"};
  const auto e = run_cli(with(run, {"--executor", "emulated", "--out", dir.file("e")}));
  ASSERT_EQ(e.status, 0) << e.err;
  ASSERT_EQ(run_launch(2, with(run, {"--executor", "processes", "--out", dir.file("p")}), dir.file("launch.log"), 240), 0)
      << slurp(dir.file("launch.log"));
  expect_same_results(dir.file("e"), dir.file("p"));
}

TEST(TorchScriptCli, BadFilesAndFlags) {
  TempDir dir;
  const std::string good = lenet_file(dir);
  expect_one_line_error(run_cli(small_run(dir.file("missing.pt"))), 2, "missing.pt: no such file");
  std::ofstream(dir.file("garbage.pt")) << "print('hello')\n";
  const std::string reader = c10::str("LibTorch ", TORCH_VERSION_MAJOR, ".", TORCH_VERSION_MINOR);
  expect_one_line_error(run_cli(small_run(dir.file("garbage.pt"))), 1,
                        "garbage.pt: not a TorchScript module " + reader + " can read");
  std::ofstream(dir.file("truncated.pt"), std::ios::binary) << bytes_of(good).substr(0, bytes_of(good).size() - 100);
  expect_one_line_error(run_cli(small_run(dir.file("truncated.pt"))), 1, "truncated.pt: not a TorchScript module");
  expect_one_line_error(run_cli(small_run(save_future_archive(dir.file("future.pt")))), 1,
                        "future.pt: not a TorchScript module " + reader +
                            " can read (Attempted to read a PyTorch file with version 99");
  expect_one_line_error(run_cli(small_run(save_torch_save_archive(dir.file("state.pt")))), 2,
                        "state.pt: holds data saved with torch.save (a state dict, a tensor or a pickled module), not a TorchScript module");
  expect_one_line_error(run_cli(small_run(save_script(script_sequential({}), dir.file("empty.pt")))), 2,
                        "empty.pt: the scripted module has no child modules");
  const std::string misfit = save_script(script_sequential({script_flatten(), script_linear(100, 10)}), dir.file("misfit.pt"));
  expect_one_line_error(run_cli({"layers", "--model-file", misfit}), 2,
                        "misfit.pt: model misfit: unit 2 (1) cannot take the output of unit 1 (0), [2, 1024]");
  auto block = script_module("__torch__.Head", {{"drop", script_dropout(0.5)}, {"fc", script_linear(1024, 10)}},
                             "\ndef forward(self, x):\n    return self.fc.forward(self.drop.forward(torch.flatten(x, 1)))\n");
  expect_one_line_error(run_cli(small_run(save_script(script_sequential({block}), dir.file("random.pt")))), 2,
                        "random.pt: unit 1 (0.drop, torch.nn.Dropout) calls aten::dropout, which draws random numbers");
  expect_one_line_error(run_cli(with(small_run(good), {"--model", "resnet20"})), 2,
                        "--model-file " + good + " and --model resnet20 name two models");
  expect_one_line_error(run_cli({"train", "--data", "synthetic:64", "--export", dir.file("x.pt")}), 2,
                        "--export " + dir.file("x.pt") + " writes a model loaded with --model-file");
}

// config.json records where the file is and a digest of its content: a run resumes from any
// directory, and not from a file replaced under the same path.
TEST(TorchScriptCli, ResumeFindsTheFileFromAnywhereAndRefusesAReplacedOne) {
  TempDir dir;
  const std::string file = lenet_file(dir), run = dir.file("run"), original = bytes_of(file);
  const auto stopped = run_cli(with(small_run("lenet.pt"), {"--out", run, "--stop-at-step", "3", "--checkpoint-every", "3"}),
                               dir.path());
  ASSERT_EQ(stopped.status, 130) << stopped.err;
  const auto config = nlohmann::json::parse(std::ifstream(run + "/config.json"));
  EXPECT_EQ(config.at("model_file"), "lenet.pt");
  EXPECT_EQ(config.at("model_file_path"), file);
  const std::string digest = config.at("model_file_digest");
  EXPECT_EQ(digest.rfind("crc32:", 0), 0u) << digest;

  save_script(lenet(6), file);
  const auto replaced = run_cli({"train", "--resume", run, "--progress", "none"}, "/");
  expect_one_line_error(replaced, 2, "model file " + file + " has changed since the run started: its content digest is crc32:");
  EXPECT_NE(replaced.err.find(", config.json records " + digest + ";"), std::string::npos) << replaced.err;

  std::ofstream(file, std::ios::binary | std::ios::trunc) << original;
  const auto resumed = run_cli({"train", "--resume", run, "--progress", "none"}, "/");
  EXPECT_EQ(resumed.status, 0) << resumed.err;
}

TEST(TorchScriptCli, FilesThatLoadButCannotBeTrainedSayWhy) {
  TempDir dir;
  const std::string damaged = damage_record(lenet_file(dir), "data/0");
  expect_one_line_error(run_cli(small_run(damaged)), 1, "lenet.pt: damaged: record data/0 has CRC-32 ");
  auto nan = lenet();
  {
    torch::NoGradGuard no_grad;
    (*nan.named_parameters().begin()).value.view(-1)[0].fill_(std::nan(""));
  }
  expect_one_line_error(run_cli(small_run(save_script(nan, dir.file("nan.pt")))), 2,
                        "nan.pt: unit 1 (0): parameter 0.0.weight is not finite");
  expect_one_line_error(run_cli(small_run(dir.path())), 2, dir.path() + ": is a directory");
  const std::string certain =
      save_script(script_sequential({script_flatten(), script_dropout(1.0), script_linear(1024, 10)}), dir.file("drop.pt"));
  expect_one_line_error(run_cli(small_run(certain)), 2,
                        "drop.pt: unit 2 (1, torch.nn.Dropout): dropout probability must be in [0, 1), got 1");
}

TEST(TorchScriptCli, ExportDestinationIsCheckedBeforeTraining) {
  TempDir dir;
  const std::string good = lenet_file(dir), nowhere = dir.file("no/such/dir/x.pt");
  const auto missing = run_cli(with(small_run(good), {"--export", nowhere}));
  expect_one_line_error(missing, 2, "--export " + nowhere + ": cannot be written (No such file or directory)");
  EXPECT_EQ(missing.err.find("epoch "), std::string::npos) << "trained before refusing: " << missing.err;
  expect_one_line_error(run_cli(with(small_run(good), {"--export", dir.path()})), 2, "--export " + dir.path() + ": is a directory");
}

TEST(TorchScriptCli, TrainHelpListsEveryDataSet) {
  const auto help = run_cli({"train", "--help"});
  ASSERT_EQ(help.status, 0) << help.err;
  EXPECT_NE(help.out.find("synthetic-regression"), std::string::npos) << help.out;
}

// `world` ranks with one file name in two directories of two contents: the first `in_a` ranks
// start in a/, the others in b/. Every rank must refuse, exit 2, naming rank `in_a` (the first
// to load the other content); returns their logs.
std::vector<std::string> ranks_with_two_files(int world, int in_a, const std::vector<std::string>& flags) {
  TempDir dir;
  std::filesystem::create_directories(dir.file("a"));
  std::filesystem::create_directories(dir.file("b"));
  save_script(lenet(5), dir.file("a/net.pt"));
  save_script(lenet(6), dir.file("b/net.pt"));
  const int port = free_port();
  std::vector<pid_t> pids;
  for (int r = 0; r < world; ++r) {
    pids.push_back(spawn(with(small_run("net.pt"), flags), rank_env(r, world, port),
                         dir.file("rank" + std::to_string(r) + ".log"), STALEPIPE_BINARY, dir.file(r < in_a ? "a" : "b")));
  }
  std::vector<std::string> logs;
  for (int r = 0; r < world; ++r) {
    const int status = wait_for(pids[r], 120);
    logs.push_back(slurp(dir.file("rank" + std::to_string(r) + ".log")));
    EXPECT_EQ(status, 2) << logs.back();
    EXPECT_NE(logs.back().find(c10::str("net.pt: rank ", in_a, " loaded content with digest crc32:")), std::string::npos)
        << logs.back();
  }
  return logs;
}

// Two ranks, one file name, two contents (each rank in its own directory): both refuse.
TEST(TorchScriptCli, RanksOfAProcessesRunMustLoadTheSameFile) {
  for (const std::string& log : ranks_with_two_files(2, 1, {"--executor", "processes"})) {
    EXPECT_NE(log.find(", rank 0 crc32:"), std::string::npos) << log;
  }
}

// Two replicas of a 2-partition pipeline, replica 2 with another content: every rank refuses,
// naming the first rank of replica 2.
TEST(TorchScriptCli, ReplicasMustLoadTheSameFile) {
  ranks_with_two_files(4, 2, {"--executor", "processes", "--replicas", "2", "--threads", "4"});
}

}  // namespace
}  // namespace stalepipe::test
