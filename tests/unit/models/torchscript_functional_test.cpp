// Forwards written the way people write them, cut into pieces: compiled functions
// (prim::CallFunction, as F.relu and F.adaptive_avg_pool2d script), a three-way concatenation,
// a layer scale and a raw conv2d weight read outside any layer call, drop-path and functional
// dropout. Each trains with a register in the middle; without staleness it trains as without
// the register, bit for bit; stale threads train as the emulated executor. The modules are
// built in C++ (support/script_modules.h) as torch.jit.script would make them.
#include <gtest/gtest.h>

#include <ATen/Context.h>
#include <torch/script.h>

#include "stalepipe/api/pipeline_trainer.h"
#include "stalepipe/exec/stage.h"
#include "stalepipe/models/dropout.h"
#include "stalepipe/models/layer_table.h"
#include "stalepipe/models/torchscript.h"
#include "support/error_of.h"
#include "support/pipeline_runs.h"
#include "support/script_runs.h"
#include "support/script_modules.h"
#include "support/temp_dir.h"

namespace stalepipe {
namespace {

using test::error_of;

const models::InputShape& kInput = test::kScriptInput;

// Functions as torch.nn.functional's script: called through prim::CallFunction, one calling another.
const char* const kFunctions = R"(
def act(x):
    return torch.relu(x)

def pool(x):
    return torch.adaptive_avg_pool2d(act(x), [2, 2])

def drop_path(x, p: float, training: bool):
    if not training or p == 0.0:
        return x
    keep = 1.0 - p
    noise = torch.empty([x.size(0), 1, 1, 1], dtype=x.dtype, device=x.device).bernoulli_(keep)
    return x * noise.div_(keep)

def dropout(x, p: float, training: bool):
    return torch.dropout(x, p, training)
)";

// A module with 1x1 convolutions c1 (1 -> 4), c2, c3 (4 -> 4), a Linear fc and the
// given extra parameters, whose forward is `body` (x in, the result returned).
torch::jit::Module net(const std::string& name, const std::string& body,
                       const std::vector<std::pair<std::string, torch::Tensor>>& parameters = {},
                       int64_t fc_inputs = 16) {
  torch::manual_seed(5);
  torch::jit::Module m("__torch__." + name);
  m.register_attribute("training", c10::BoolType::get(), true);
  m.register_module("c1", test::script_conv2d(1, 4, 1));
  m.register_module("c2", test::script_conv2d(4, 4, 1));
  m.register_module("c3", test::script_conv2d(4, 4, 1));
  m.register_module("fc", test::script_linear(fc_inputs, 3));
  m.register_attribute("p", c10::FloatType::get(), 0.5);
  m.register_attribute("drop_rate", c10::FloatType::get(), 0.0);
  for (const auto& [n, t] : parameters) m.register_parameter(n, t.clone().requires_grad_(), false);
  test::define_with_functions(m, kFunctions, "\ndef forward(self, x):\n" + body);
  return m;
}

// The forwards under test; each has 4 weight-layer pieces: c1, c2, c3, fc.
torch::jit::Module functional() {
  return net("Functional",
             "    h = act(self.c1.forward(x))\n"
             "    h = self.c3.forward(act(self.c2.forward(h)))\n"
             "    return self.fc.forward(torch.flatten(pool(h), 1))\n");
}
torch::jit::Module concatenation() {
  return net("Concat",
             "    a = act(self.c1.forward(x))\n"
             "    b = act(self.c2.forward(a))\n"
             "    c = self.c3.forward(b)\n"
             "    return self.fc.forward(torch.flatten(pool(torch.cat([a, b, c], 1)), 1))\n",
             {}, 48);
}
torch::jit::Module layer_scale() {
  return net("LayerScale",
             "    h = act(self.c1.forward(x))\n"
             "    h = h + self.gamma * self.c2.forward(h)\n"
             "    h = self.c3.forward(act(h))\n"
             "    return self.fc.forward(torch.flatten(pool(h), 1))\n",
             {{"gamma", torch::full({4, 1, 1}, 0.1)}});
}
torch::jit::Module raw_conv() {
  return net("RawConv",
             "    h = act(self.c1.forward(x))\n"
             "    h = torch.conv2d(h, self.w, None, [1, 1], [1, 1])\n"
             "    h = self.c3.forward(act(self.c2.forward(h)))\n"
             "    return self.fc.forward(torch.flatten(pool(h), 1))\n",
             {{"w", torch::randn({4, 4, 3, 3}) * 0.2}});
}
// c1's output read by the three later pieces, after their layers.
torch::jit::Module shared_value() {
  return net("SharedValue",
             "    a = act(self.c1.forward(x))\n"
             "    b = self.c2.forward(a) + a\n"
             "    c = self.c3.forward(act(b)) + a\n"
             "    return self.fc.forward(torch.flatten(pool(c), 1)) + a.mean()\n");
}
// DenseNet's block: a list of features that grows by appends, each sum of it read where the
// next layer needs it.
torch::jit::Module growing_list() {
  return net("GrowingList",
             "    features = [act(self.c1.forward(x))]\n"
             "    features.append(act(self.c2.forward(torch.stack(features).sum(0))))\n"
             "    features.append(self.c3.forward(torch.stack(features).sum(0)))\n"
             "    return self.fc.forward(torch.flatten(pool(torch.stack(features).sum(0)), 1))\n");
}
// Drop-path on c2's branch and dropout after c3; after c1 two dropouts that never draw: one
// with p = 0, one under a branch on a setting that rules it out (DenseNet's drop_rate 0).
torch::jit::Module drawing() {
  return net("Drawing",
             "    h = dropout(act(self.c1.forward(x)), 0.0, self.training)\n"
             "    if self.drop_rate > 0:\n"
             "        h = dropout(h, self.drop_rate, self.training)\n"
             "    h = h + drop_path(self.c2.forward(h), self.p, self.training)\n"
             "    h = dropout(self.c3.forward(act(h)), self.p, self.training)\n"
             "    return self.fc.forward(torch.flatten(pool(h), 1))\n");
}

constexpr int kSteps = 4;

std::vector<torch::Tensor> trained(const std::string& file, std::vector<int> ppv, ScheduleKind schedule,
                                   const char* executor) {
  return test::train_script(file, kSteps, test::script_options(std::move(ppv), schedule, executor));
}

// The checks every forward here must pass; `cut` is the register that the sequential schedule
// must not see.
void expect_cut_trains_exactly(const torch::jit::Module& module, const std::vector<int>& cut) {
  test::TempDir dir;
  const std::string file = test::save_script(module, dir.file("net.pt"));
  const auto model = models::load_torchscript(file, kInput);
  ASSERT_EQ(model.units.size(), 4u) << "pieces c1, c2, c3, fc";
  EXPECT_EQ(model.units[1].name, "c2");
  size_t parameters = 0;
  for (const auto& unit : model.units) parameters += unit.module.ptr()->parameters().size();
  EXPECT_EQ(parameters, model.script->parameters().size()) << "every parameter trains in one piece";

  std::vector<torch::Tensor> before;
  for (const auto& unit : model.units) {
    for (const auto& p : unit.module.ptr()->parameters()) before.push_back(p.detach().clone());
  }
  const auto cut_middle = trained(file, cut, ScheduleKind::kSequential, "emulated");
  ASSERT_EQ(cut_middle.size(), before.size());
  for (size_t i = 0; i < before.size(); ++i) {
    EXPECT_TRUE(torch::isfinite(cut_middle[i]).all().item<bool>()) << "tensor " << i;
    EXPECT_FALSE(torch::equal(cut_middle[i], before[i])) << "tensor " << i << " did not train";
  }
  EXPECT_TRUE(test::all_equal(cut_middle, trained(file, {}, ScheduleKind::kSequential, "emulated")));
  EXPECT_TRUE(test::all_equal(trained(file, {1, 2}, ScheduleKind::kStale, "threads"),
                              trained(file, {1, 2}, ScheduleKind::kStale, "emulated")));
}

TEST(TorchScriptFunctional, CompiledFunctionsAreInlinedAndTheCutTrainsExactly) {
  expect_cut_trains_exactly(functional(), {2});
}

TEST(TorchScriptFunctional, AThreeWayConcatenationTrainsExactly) {
  test::TempDir dir;
  const auto model = models::load_torchscript(test::save_script(concatenation(), dir.file("cat.pt")), kInput);
  ASSERT_EQ(model.units.size(), 4u);
  EXPECT_EQ(model.units[2].skips.pops.size(), 1u) << "a jumps c2 to the concatenation after c3";
  expect_cut_trains_exactly(concatenation(), {2});
}

// c1's output goes to the pieces of c2, c3 and fc as one value handed on from each to the next,
// so that it crosses the register once and its gradients add up in the whole forward's order.
TEST(TorchScriptFunctional, AValueReadByThreeLaterPiecesCrossesARegisterOnce) {
  test::TempDir dir;
  const auto model = models::load_torchscript(test::save_script(shared_value(), dir.file("shared.pt")), kInput);
  ASSERT_EQ(model.units.size(), 4u);
  EXPECT_TRUE(model.units[0].skips.stashes.empty()) << "c2's piece receives c1's output as its input";
  EXPECT_EQ(model.units[1].skips.stashes.size(), 1u) << "and hands it on";
  EXPECT_EQ(model.units[2].skips.pops.size(), 1u);
  EXPECT_EQ(model.units[2].skips.stashes.size(), 1u);
  EXPECT_EQ(model.units[3].skips.pops.size(), 1u);
  expect_cut_trains_exactly(shared_value(), {1});
}

// The list's states are built again where they are read, from the tensors that cross.
TEST(TorchScriptFunctional, AListGrownByAppendsIsCutAndTrainsExactly) {
  test::TempDir dir;
  const auto model = models::load_torchscript(test::save_script(growing_list(), dir.file("list.pt")), kInput);
  ASSERT_EQ(model.units.size(), 4u);
  EXPECT_EQ(model.units[0].skips.stashes.size(), 1u) << "c1's output, beside the sum of the list";
  EXPECT_EQ(model.units[1].skips.pops.size(), 1u);
  EXPECT_EQ(model.units[1].skips.stashes.size(), 2u) << "c1's output handed on, and c2's";
  EXPECT_EQ(model.units[2].skips.pops.size(), 2u);
  expect_cut_trains_exactly(growing_list(), {1});
}

TEST(TorchScriptFunctional, ALayerScaleTrainsInThePieceThatReadsIt) {
  test::TempDir dir;
  const auto model = models::load_torchscript(test::save_script(layer_scale(), dir.file("scale.pt")), kInput);
  const auto gamma = model.script->attr("gamma").toTensor();
  bool in_c2 = false;
  for (const auto& p : model.units[1].module.ptr()->parameters()) in_c2 |= p.is_same(gamma);
  EXPECT_TRUE(in_c2) << "gamma is read next to c2";
  expect_cut_trains_exactly(layer_scale(), {2});
}

// A convolution called as a function on a parameter is a weight layer of its own, its piece
// named after the parameter, with the operations that make its weight (a standardisation)
// in that piece; its FLOPs count, and a register after it trains as without it.
void expect_functional_layer_trains(const torch::jit::Module& module) {
  test::TempDir dir;
  const std::string file = test::save_script(module, dir.file("net.pt"));
  auto model = models::load_torchscript(file, kInput);
  ASSERT_EQ(model.units.size(), 5u) << "pieces c1, w, c2, c3, fc";
  EXPECT_EQ(model.units[1].name, "w");
  EXPECT_EQ(model.units[1].weight_layers, (std::vector<int>{2}));
  const auto params = model.units[1].module.ptr()->parameters();
  ASSERT_EQ(params.size(), 1u);
  EXPECT_TRUE(params[0].is_same(model.script->attr("w").toTensor()));
  EXPECT_GT(models::describe_units(model)[1].forward_mflops, 0);
  const std::string cut = error_of<UsageError>([&] { trained(file, {6}, ScheduleKind::kSequential, "emulated"); });
  EXPECT_NE(cut.find("a register may follow layer 1, 2, 3, 4"), std::string::npos) << cut;
  EXPECT_TRUE(test::all_equal(trained(file, {2}, ScheduleKind::kSequential, "emulated"),
                              trained(file, {}, ScheduleKind::kSequential, "emulated")));
  EXPECT_TRUE(test::all_equal(trained(file, {1, 2}, ScheduleKind::kStale, "threads"),
                              trained(file, {1, 2}, ScheduleKind::kStale, "emulated")));
}

TEST(TorchScriptFunctional, ARawConv2dIsAWeightLayerOfItsOwn) { expect_functional_layer_trains(raw_conv()); }

TEST(TorchScriptFunctional, AStandardisedWeightIsMadeInItsLayersPiece) {
  expect_functional_layer_trains(net("Standardised",
                                     "    h = act(self.c1.forward(x))\n"
                                     "    w = (self.w - self.w.mean()) / (self.w.std() + 0.00001)\n"
                                     "    h = torch.conv2d(h, w, None, [1, 1], [1, 1])\n"
                                     "    h = self.c3.forward(act(self.c2.forward(h)))\n"
                                     "    return self.fc.forward(torch.flatten(pool(h), 1))\n",
                                     {{"w", torch::randn({4, 4, 3, 3}) * 0.2}}));
}

TEST(TorchScriptFunctional, DropPathAndDropoutDrawFromTheUnitsGenerator) {
  test::TempDir dir;
  const auto model = models::load_torchscript(test::save_script(drawing(), dir.file("draw.pt")), kInput);
  auto chain = model.as_sequential();
  chain->train();
  const auto x = torch::randn({4, 1, 8, 8});
  auto under = [&](uint64_t seed) {
    models::RandomScope scope(seed);
    return chain->forward(x);
  };
  EXPECT_TRUE(torch::equal(under(1), under(1))) << "the draws come from the scope's generator";
  EXPECT_FALSE(torch::equal(under(1), under(2))) << "the draws are active in training mode";
  auto draws = [&](size_t unit) {
    return dynamic_cast<const models::RandomDrawing&>(*model.units[unit].module.ptr()).draws_random_numbers();
  };
  EXPECT_FALSE(draws(0)) << "a dropout with p = 0 or under `if self.drop_rate > 0` with drop_rate 0 never runs";
  EXPECT_TRUE(draws(1)) << "drop-path";
  EXPECT_TRUE(draws(2)) << "dropout";
  EXPECT_FALSE(draws(3));
  expect_cut_trains_exactly(drawing(), {1});  // the draws' seeds name their unit, not their partition
}

// Recomputation, channels-last and bf16 run the pieces as they run zoo units: recomputing the
// first partition (with drop-path and dropout in it) trains exactly as keeping its activations.
TEST(TorchScriptFunctional, RecomputeChannelsLastAndBf16TrainThePieces) {
  test::TempDir dir;
  const std::string file = test::save_script(drawing(), dir.file("draw.pt"));
  auto options = [](auto change) {
    Options o = test::script_options({2}, ScheduleKind::kStale, "threads");
    change(o.pipeline());
    return o;
  };
  const auto kept = test::train_script(file, kSteps, options([](PipelineOptions&) {}));
  EXPECT_TRUE(test::all_equal(kept, test::train_script(file, kSteps, options([](PipelineOptions& p) { p.recompute(2); }))));
  auto expect_close_to_kept = [&](const Options& o, const std::string& what) {
    const auto trained = test::train_script(file, kSteps, o);
    ASSERT_EQ(trained.size(), kept.size());
    for (size_t i = 0; i < trained.size(); ++i) {
      EXPECT_TRUE(torch::isfinite(trained[i]).all().item<bool>()) << i;
      EXPECT_TRUE(torch::allclose(trained[i], kept[i], 0.05, 0.05)) << what << " tensor " << i << " trains as in fp32 NCHW";
    }
  };
  expect_close_to_kept(options([](PipelineOptions& p) { p.layout(Layout::kChannelsLast); }), "channels-last");
  const Options bf16 = options([](PipelineOptions& p) { p.precision(exec::Precision::kBf16); });
  expect_close_to_kept(bf16, "bf16");
  // ATen's own bf16 kernels too: what a CPU without AVX-512 runs (docs/reliability.md). Either
  // family stays within 0.0008 of fp32 here, against the bound of 0.05.
  // The switch is the process's: restored however the lambda leaves, so that the suite's later
  // tests run as configured.
  struct OneDnnOff {
    const bool was = at::globalContext().userEnabledMkldnn();
    OneDnnOff() { at::globalContext().setUserEnabledMkldnn(false); }
    ~OneDnnOff() { at::globalContext().setUserEnabledMkldnn(was); }
  };
  const OneDnnOff onednn_off;
  expect_close_to_kept(bf16, "bf16 without oneDNN");
}

TEST(TorchScriptFunctional, GraphsRefuseAPieceThatDraws) {
  test::TempDir dir;
  const auto model = models::load_torchscript(test::save_script(drawing(), dir.file("draw.pt")), kInput);
  std::vector<models::Skips> skips;
  for (const auto& unit : model.units) skips.push_back(unit.skips);
  exec::Stage stage(model.as_sequential(), exec::StageOptions(0, 1).skips(skips));
  exec::GraphSettings settings;
  settings.mode = exec::GraphMode::kReplayForTests;
  const std::string error = error_of<UsageError>([&] { stage.use_graphs(settings); });
  EXPECT_NE(error.find("partition 1: unit c2 draws random numbers"), std::string::npos) << error;
  EXPECT_EQ(error.find('\n'), std::string::npos) << error;
}

TEST(TorchScriptFunctional, RefusalsNameTheFileAndTheFault) {
  test::TempDir dir;
  auto load = [&](const torch::jit::Module& m) {
    return error_of<UsageError>([&] { models::load_torchscript(test::save_script(m, dir.file("m.pt")), kInput); });
  };
  // A parameter two pieces read joins them: it trains in one partition.
  const auto shared = models::load_torchscript(
      test::save_script(net("Shared",
                            "    h = self.c1.forward(x) * self.s\n"
                            "    h = self.c3.forward(self.c2.forward(h) * self.s)\n"
                            "    return self.fc.forward(torch.flatten(pool(h), 1))\n",
                            {{"s", torch::ones({1})}}),
                        dir.file("shared.pt")),
      kInput);
  ASSERT_FALSE(shared.units.empty());
  EXPECT_EQ(shared.units[0].weight_layers, (std::vector<int>{1, 2}));
  EXPECT_EQ(shared.units[0].joined, "parameter s is read on both sides");
  const std::string tuple = load(net("Tuple",
                                     "    h = self.c3.forward(self.c2.forward(self.c1.forward(x)))\n"
                                     "    y = self.fc.forward(torch.flatten(pool(h), 1))\n"
                                     "    return y, y\n"));
  EXPECT_NE(tuple.find("m.pt: forward returns (Tensor, Tensor); it must return one tensor"), std::string::npos)
      << tuple;
  const std::string like = load(net("Like",
                                    "    h = self.c1.forward(x)\n"
                                    "    h = self.c3.forward(self.c2.forward(h + torch.rand_like(h)))\n"
                                    "    return self.fc.forward(torch.flatten(pool(h), 1))\n"));
  EXPECT_NE(like.find("m.pt: aten::rand_like"), std::string::npos) << like;
  EXPECT_NE(like.find("draws random numbers and has no form that takes a generator"), std::string::npos) << like;
  for (const std::string& error : {tuple, like}) EXPECT_EQ(error.find('\n'), std::string::npos) << error;
}

}  // namespace
}  // namespace stalepipe
