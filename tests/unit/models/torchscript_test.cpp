// Networks written in Python: a TorchScript file trains as a Model and goes back to
// TorchScript. The files are built in C++ (support/script_modules.h), as torch.jit.script
// would make them, so no Python is needed.
#include <cmath>
#include <fstream>

#include <gtest/gtest.h>
#include <torch/script.h>
#include <torch/version.h>

#include "stalepipe/api/pipeline_trainer.h"
#include "stalepipe/models/layer_table.h"
#include "stalepipe/models/torchscript.h"
#include "support/error_of.h"
#include "support/script_modules.h"
#include "support/temp_dir.h"

namespace stalepipe {
namespace {

using test::error_of;
using test::script_conv2d;
using test::script_flatten;
using test::script_linear;
using test::script_max_pool2d;
using test::script_relu;
using test::script_sequential;

const models::InputShape kInput{1, 8, 8, 3};

std::string small_cnn_file(const test::TempDir& dir, uint64_t seed = 3) {
  torch::manual_seed(seed);
  return test::save_script(test::script_small_cnn(), dir.file("cnn.pt"));
}

Options two_partitions(const std::string& executor) {
  Options o;
  o.optimizer().lr_schedule(LrScheduleKind::kConstant).lr(0.05);
  o.pipeline().ppv({1}).executor(exec::executor_from_name(executor)).threads(2);
  return o;
}

// Seeded batches for kInput.
std::vector<std::pair<torch::Tensor, torch::Tensor>> batches(int n) {
  torch::manual_seed(11);
  std::vector<std::pair<torch::Tensor, torch::Tensor>> out;
  for (int i = 0; i < n; ++i) out.emplace_back(torch::randn({4, 1, 8, 8}), torch::randint(0, 3, {4}));
  return out;
}

void feed_all(PipelineTrainer& trainer, const std::vector<std::pair<torch::Tensor, torch::Tensor>>& data) {
  for (const auto& [x, y] : data) trainer.feed(x, y);
  trainer.flush();
}

TEST(TorchScript, EachTopLevelChildIsAUnitSharingTheScriptedTensors) {
  test::TempDir dir;
  const auto model = models::load_torchscript(small_cnn_file(dir), kInput);
  EXPECT_EQ(model.name, "cnn");
  ASSERT_EQ(model.units.size(), 3u);
  EXPECT_EQ(model.units[0].name, "0");
  EXPECT_EQ(model.units[0].weight_layers, std::vector<int>({1}));
  EXPECT_TRUE(model.units[1].weight_layers.empty());
  EXPECT_EQ(model.units[2].weight_layers, std::vector<int>({2, 3}));
  EXPECT_EQ(model.cut_layers(), std::vector<int>({1}));  // unit 2 ends with the last layer
  ASSERT_NE(model.script, nullptr);
  int64_t scripted = 0;
  for (const auto& p : model.script->parameters()) scripted += p.numel();
  EXPECT_EQ(model.num_parameters(), scripted);
  EXPECT_EQ(scripted, 4 * 9 + 4 + 4 + 4 + 36 * 16 + 16 + 16 * 3 + 3);
  // The same tensors, not copies: what the optimizer updates is what the file will hold.
  const auto unit_params = model.as_sequential()->parameters();
  const auto script_params = model.script->parameters();
  size_t i = 0;
  for (const auto& p : script_params) {
    ASSERT_LT(i, unit_params.size());
    EXPECT_TRUE(unit_params[i++].is_same(p)) << "parameter " << i;
  }
  EXPECT_EQ(i, unit_params.size());
  EXPECT_EQ(model.as_sequential()->buffers().size(), 3u);  // running mean, var, batches tracked
}

TEST(TorchScript, TrainAndEvalSwitchTheScriptedModules) {
  test::TempDir dir;
  auto model = models::load_torchscript(small_cnn_file(dir), kInput);
  auto bn = model.script->attr("0").toModule().attr("1").toModule();
  auto chain = model.as_sequential();
  chain->eval();
  EXPECT_FALSE(bn.is_training());
  chain->train();
  EXPECT_TRUE(bn.is_training());
  // The file is written in eval mode; the model stays in training mode.
  models::save_torchscript(model, dir.file("saved.pt"));
  EXPECT_TRUE(bn.is_training());
  EXPECT_FALSE(torch::jit::load(dir.file("saved.pt")).attr("0").toModule().attr("1").toModule().is_training());
}

TEST(TorchScript, LayerTableShowsShapesParametersAndFlops) {
  test::TempDir dir;
  auto model = models::load_torchscript(small_cnn_file(dir), kInput);
  const auto rows = models::describe_units(model);
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0].output_shape, std::vector<int64_t>({4, 3, 3}));
  EXPECT_EQ(rows[1].output_shape, std::vector<int64_t>({36}));
  EXPECT_EQ(rows[2].output_shape, std::vector<int64_t>({3}));
  EXPECT_EQ(rows[0].parameters, 4 * 9 + 4 + 8);
  // One multiply-add = 2 FLOPs, conv and linear only (the zoo's convention).
  EXPECT_DOUBLE_EQ(rows[0].forward_mflops, 1e-6 * 2 * (4 * 6 * 6) * 9);
  EXPECT_DOUBLE_EQ(rows[1].forward_mflops, 0.0);
  EXPECT_DOUBLE_EQ(rows[2].forward_mflops, 1e-6 * 2 * (36 * 16 + 16 * 3));
  const std::string table = models::format_layer_table(model, rows);
  EXPECT_NE(table.find("model cnn: input 1x8x8, 3 classes, 3 weight layers"), std::string::npos) << table;
}

TEST(TorchScript, ThreadsTrainBitIdenticalToEmulatedAndExportReloadsToThePrediction) {
  test::TempDir dir;
  const std::string file = small_cnn_file(dir);
  const auto data = batches(6);
  PipelineTrainer emulated(models::load_torchscript(file, kInput), two_partitions("emulated"));
  feed_all(emulated, data);
  PipelineTrainer threads(models::load_torchscript(file, kInput), two_partitions("threads"));
  feed_all(threads, data);
  const auto a = emulated.parameters(), b = threads.parameters();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i], b[i])) << "parameter " << i;
  const auto initial = models::load_torchscript(file, kInput).as_sequential()->parameters();
  EXPECT_FALSE(torch::equal(initial.front(), a.front())) << "training changed nothing; the comparison proves nothing";

  models::save_torchscript(threads.model(), dir.file("trained.pt"));
  auto reloaded = torch::jit::load(dir.file("trained.pt"));
  EXPECT_FALSE(reloaded.is_training());
  const auto x = data.front().first;
  const auto expected = threads.predict(x);
  const auto got = reloaded.forward({x}).toTensor();
  EXPECT_TRUE(torch::equal(got, expected)) << got << expected;
}

TEST(TorchScript, CheckpointResumesWhereTheRunStopped) {
  test::TempDir dir;
  const std::string file = small_cnn_file(dir);
  const auto data = batches(6);
  // The uninterrupted run drains where the other stops (checkpoints are taken at drains).
  PipelineTrainer whole(models::load_torchscript(file, kInput), two_partitions("emulated"));
  feed_all(whole, {data.begin(), data.begin() + 3});
  feed_all(whole, {data.begin() + 3, data.end()});

  PipelineTrainer first(models::load_torchscript(file, kInput), two_partitions("emulated"));
  feed_all(first, {data.begin(), data.begin() + 3});
  first.save(dir.path());
  PipelineTrainer second(models::load_torchscript(file, kInput), two_partitions("emulated"));
  second.load(dir.path());
  feed_all(second, {data.begin() + 3, data.end()});
  const auto a = whole.parameters(), b = second.parameters();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i], b[i])) << "parameter " << i;
  // The scripted module holds the resumed weights too.
  models::save_torchscript(second.model(), dir.file("resumed.pt"));
  const auto x = data.front().first;
  EXPECT_TRUE(torch::equal(torch::jit::load(dir.file("resumed.pt")).forward({x}).toTensor(), whole.predict(x)));
}

TEST(TorchScript, MissingGarbageAndTruncatedFiles) {
  test::TempDir dir;
  EXPECT_NE(error_of<UsageError>([&] { models::load_torchscript(dir.file("none.pt"), kInput); })
                .find("none.pt: no such file"),
            std::string::npos);
  std::ofstream(dir.file("garbage.pt")) << "not a zip archive";
  const std::string garbage = error_of<RuntimeError>([&] { models::load_torchscript(dir.file("garbage.pt"), kInput); });
  const std::string reader = c10::str("LibTorch ", TORCH_VERSION_MAJOR, ".", TORCH_VERSION_MINOR);
  EXPECT_NE(garbage.find("garbage.pt: not a TorchScript module " + reader + " can read"), std::string::npos) << garbage;
  EXPECT_EQ(garbage.find('\n'), std::string::npos) << garbage;
  {
    std::ifstream in(small_cnn_file(dir), std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::ofstream(dir.file("truncated.pt"), std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  }
  const std::string truncated = error_of<RuntimeError>([&] { models::load_torchscript(dir.file("truncated.pt"), kInput); });
  EXPECT_NE(truncated.find("truncated.pt: not a TorchScript module"), std::string::npos) << truncated;
  EXPECT_EQ(truncated.find('\n'), std::string::npos) << truncated;
  const std::string future =
      error_of<RuntimeError>([&] { models::load_torchscript(test::save_future_archive(dir.file("future.pt")), kInput); });
  EXPECT_NE(future.find("future.pt: not a TorchScript module " + reader +
                        " can read (Attempted to read a PyTorch file with version 99"),
            std::string::npos) << future;
  EXPECT_EQ(future.find('\n'), std::string::npos) << future;
}

// tests/fixtures/saved_by_pytorch_2_11.pt: torch.jit.script of a Linear after
// F.scaled_dot_product_attention (an operator LibTorch 1.13 lacks), saved by PyTorch 2.11.
TEST(TorchScript, AFileSavedByANewerPyTorchNamesBothVersions) {
  if (TORCH_VERSION_MAJOR >= 2) GTEST_SKIP() << "LibTorch " << TORCH_VERSION << " reads the file";
  const std::string file = STALEPIPE_SOURCE_DIR "/tests/fixtures/saved_by_pytorch_2_11.pt";
  const std::string error = error_of<UsageError>([&] { models::load_torchscript(file, kInput); });
  EXPECT_NE(error.find("saved_by_pytorch_2_11.pt: saved by a PyTorch newer than the LibTorch 1.13 that reads it"),
            std::string::npos) << error;
  EXPECT_NE(error.find("(Unknown builtin op: aten::scaled_dot_product_attention.)"), std::string::npos) << error;
  EXPECT_EQ(error.find('\n'), std::string::npos) << error;
}

TEST(TorchScript, RefusesModulesItCannotTrainAsUnits) {
  test::TempDir dir;
  const auto load = [&](torch::jit::Module m) {
    return error_of<UsageError>([&] { models::load_torchscript(test::save_script(m, dir.file("m.pt")), kInput); });
  };
  torch::manual_seed(1);
  EXPECT_NE(load(script_sequential({})).find("m.pt: the scripted module has no child modules"), std::string::npos);
  const std::string pickled = error_of<UsageError>(
      [&] { models::load_torchscript(test::save_torch_save_archive(dir.file("state.pt")), kInput); });
  EXPECT_NE(pickled.find("state.pt: holds data saved with torch.save"), std::string::npos) << pickled;
  // Linear(30) cannot take the 36 features: ModelBuilder's message, prefixed with the file.
  const std::string misfit = load(script_sequential({script_conv2d(1, 4, 3), script_relu(), script_max_pool2d(2),
                                                     script_flatten(), script_linear(30, 3)}));
  EXPECT_NE(misfit.find("m.pt: model m: unit 5 (4) cannot take the output of unit 4 (3), [2, 36]"), std::string::npos)
      << misfit;
  // A dropout held by a block of the user's own cannot be replaced.
  auto block = test::script_module("__torch__.Block", {{"fc", script_linear(64, 3)}, {"drop", test::script_dropout(0.2)}},
                                   "\ndef forward(self, x):\n    return self.drop.forward(self.fc.forward(torch.flatten(x, 1)))\n");
  const std::string random = load(script_sequential({block}));
  EXPECT_NE(random.find("m.pt: unit 1 (0.drop, torch.nn.Dropout) calls aten::dropout, which draws random numbers "
                        "from PyTorch's global generator"),
            std::string::npos) << random;
}

// A forward that is not its children in order (here: it skips the ReLU) is cut at its weight
// layers instead (torchscript_dag_test.cpp): one unit, the flatten and the Linear.
TEST(TorchScript, AForwardThatSkipsAChildIsCutIntoPieces) {
  test::TempDir dir;
  torch::manual_seed(1);
  const auto net = test::script_module("__torch__.Net", {{"flat", script_flatten()}, {"fc", script_linear(64, 3)}, {"act", script_relu()}},
                                       "\ndef forward(self, x):\n    return self.fc.forward(self.flat.forward(x))\n");
  const auto model = models::load_torchscript(test::save_script(net, dir.file("m.pt")), kInput);
  ASSERT_EQ(model.units.size(), 1u);
  EXPECT_EQ(model.units[0].name, "fc");
  const auto x = torch::randn({2, 1, 8, 8});
  EXPECT_TRUE(torch::equal(model.forward(x), torch::jit::Module(*model.script).forward({x}).toTensor()));
}

TEST(TorchScript, FilesThatLoadButCannotBeTrainedSayWhy) {
  test::TempDir dir;
  EXPECT_NE(error_of<UsageError>([&] { models::load_torchscript(dir.path(), kInput); }).find(dir.path() + ": is a directory"),
            std::string::npos);
  // A weight record whose bytes no longer match its CRC-32 loads in LibTorch, which does not check.
  const std::string damaged = test::damage_record(small_cnn_file(dir), "data/0");
  ASSERT_NO_THROW(torch::jit::load(damaged));
  const std::string crc = error_of<RuntimeError>([&] { models::load_torchscript(damaged, kInput); });
  EXPECT_NE(crc.find("cnn.pt: damaged: record data/0 has CRC-32 "), std::string::npos) << crc;
  EXPECT_NE(crc.find(", the zip directory records "), std::string::npos) << crc;

  torch::manual_seed(1);
  auto nan = test::script_small_cnn();
  {
    torch::NoGradGuard no_grad;
    (*nan.named_parameters().begin()).value.view(-1)[0].fill_(std::nan(""));
  }
  const std::string weight = error_of<UsageError>(
      [&] { models::load_torchscript(test::save_script(nan, dir.file("nan.pt")), kInput); });
  EXPECT_NE(weight.find("nan.pt: unit 1 (0): parameter 0.0.weight is not finite"), std::string::npos) << weight;

  const std::string certain = error_of<UsageError>([&] {
    models::load_torchscript(
        test::save_script(script_sequential({script_flatten(), test::script_dropout(1.0), script_linear(64, 3)}),
                          dir.file("drop.pt")),
        kInput);
  });
  EXPECT_NE(certain.find("drop.pt: unit 2 (1, torch.nn.Dropout): dropout probability must be in [0, 1), got 1"),
            std::string::npos) << certain;
}

TEST(TorchScript, ExportNeedsAModelLoadedFromTorchScript) {
  models::Model model;
  model.name = "lenet5";
  EXPECT_NE(error_of<UsageError>([&] { models::save_torchscript(model, "x.pt"); })
                .find("model lenet5 was not loaded from TorchScript"),
            std::string::npos);
}

}  // namespace
}  // namespace stalepipe
