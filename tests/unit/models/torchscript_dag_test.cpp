// A scripted module whose forward is not its children in order: cut into pieces at its weight
// layers, with the tensors that jump a piece as skip tensors. The modules are built in C++
// (support/script_modules.h) as torch.jit.script would make them.
#include <algorithm>
#include <numeric>

#include <gtest/gtest.h>
#include <torch/script.h>

#include "stalepipe/api/pipeline_trainer.h"
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

// h = c1(x); out = fc(flatten(c2(relu(h)) + h)): a residual whose shortcut jumps c2.
std::string residual_file(const test::TempDir& dir, uint64_t seed = 3) {
  torch::manual_seed(seed);
  const auto net = test::script_module(
      "__torch__.ResidualNet",
      {{"c1", test::script_conv2d(1, 4, 1)}, {"act", test::script_relu()}, {"c2", test::script_conv2d(4, 4, 1)},
       {"fc", test::script_linear(256, 3)}},
      "\ndef forward(self, x):\n    h = self.c1.forward(x)\n    y = self.c2.forward(self.act.forward(h))\n"
      "    return self.fc.forward(torch.flatten(y + h, 1))\n");
  return test::save_script(net, dir.file("residual.pt"));
}

constexpr int kSteps = 6;

std::vector<torch::Tensor> trained(const std::string& file, std::vector<int> ppv, ScheduleKind schedule,
                                   const char* executor) {
  return test::train_script(file, kSteps, test::script_options(std::move(ppv), schedule, executor));
}

// Registers after the layers of `sequential` train as without them where nothing is stale, and
// the stale pipeline cut after those of `stale` trains alike on the threads and emulated
// executors.
void expect_trains_as_uncut_and_alike(const std::string& file, const std::vector<int>& sequential,
                                      const std::vector<int>& stale) {
  EXPECT_TRUE(test::all_equal(trained(file, sequential, ScheduleKind::kSequential, "emulated"),
                              trained(file, {}, ScheduleKind::kSequential, "emulated")))
      << file;
  EXPECT_TRUE(test::all_equal(trained(file, stale, ScheduleKind::kStale, "threads"),
                              trained(file, stale, ScheduleKind::kStale, "emulated")))
      << file;
}

TEST(TorchScriptDag, AResidualForwardIsCutAtItsWeightLayersWithTheShortcutAsASkip) {
  test::TempDir dir;
  const auto model = models::load_torchscript(residual_file(dir), kInput);
  ASSERT_EQ(model.units.size(), 3u);
  EXPECT_EQ(model.units[0].name, "c1");
  EXPECT_EQ(model.units[1].name, "c2");
  EXPECT_EQ(model.units[2].name, "fc");
  ASSERT_EQ(model.units[0].skips.stashes.size(), 1u);  // h, for the add after c2
  EXPECT_EQ(model.units[1].skips.pops, model.units[0].skips.stashes);
  EXPECT_TRUE(model.units[2].skips.empty());
  EXPECT_EQ(model.cut_layers(), (std::vector<int>{1, 2}));
  // The units hold the scripted module's own tensors.
  EXPECT_EQ(model.units[1].module.ptr()->parameters()[0].data_ptr(),
            model.script->attr("c2").toModule().attr("weight").toTensor().data_ptr());
  const auto x = torch::randn({2, 1, 8, 8});
  EXPECT_TRUE(torch::allclose(model.forward(x), torch::jit::Module(*model.script).forward({x}).toTensor()));
}

// The FLOPs of each piece's linear map, also where the piece adds a skip tensor to its output
// (as a transformer block's projection does): the interpreter shows the operation more stack
// slots than its arguments.
TEST(TorchScriptDag, EachPieceCountsTheFlopsOfItsWeightLayer) {
  test::TempDir dir;
  torch::manual_seed(3);
  const auto net = test::script_module(
      "__torch__.SkipNet",
      {{"c1", test::script_conv2d(1, 4, 1)}, {"l1", test::script_linear(256, 256)},
       {"l2", test::script_linear(256, 256)}, {"l3", test::script_linear(256, 3)}},
      "\ndef forward(self, x):\n    h = torch.flatten(self.c1.forward(x), 1)\n    y = self.l1.forward(h)\n"
      "    return self.l3.forward(self.l2.forward(y) + h)\n");
  auto model = models::load_torchscript(test::save_script(net, dir.file("skip.pt")), kInput);
  const auto rows = models::describe_units(model);
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_DOUBLE_EQ(rows[0].forward_mflops, 1e-6 * 2 * (4 * 8 * 8));
  EXPECT_DOUBLE_EQ(rows[1].forward_mflops, 1e-6 * 2 * (256 * 256));
  EXPECT_DOUBLE_EQ(rows[2].forward_mflops, 1e-6 * 2 * (256 * 256));
  EXPECT_DOUBLE_EQ(rows[3].forward_mflops, 1e-6 * 2 * (256 * 3));
}

// A register between c1 and c2 cuts the residual: without staleness the shortcut's gradient
// reaches c1 whole, so the weights are those without the register; and executors agree.
TEST(TorchScriptDag, ARegisterInsideTheResidualTrainsAsWithoutIt) {
  test::TempDir dir;
  const std::string file = residual_file(dir);
  expect_trains_as_uncut_and_alike(file, {1}, {1, 2});
}

// What only tensors may cross never refuses a network: the pieces it would cross between are one
// unit, which says why, and the network trains, bit for bit as uncut where there is no staleness.
std::string joined_file(const test::TempDir& dir, const std::string& name, const std::string& forward,
                        int64_t c2_channels = 4) {
  torch::manual_seed(5);
  const auto net = test::script_module(
      "__torch__.Net",
      {{"c1", test::script_conv2d(1, 4, 1)}, {"c2", test::script_conv2d(c2_channels, c2_channels, 1)},
       {"c3", test::script_conv2d(4, 4, 1)}, {"fc", test::script_linear(256, 3)}},
      forward);
  return test::save_script(net, dir.file(name));
}

void expect_joined_trains(const std::string& file, const std::string& why) {
  const auto model = models::load_torchscript(file, kInput);
  ASSERT_EQ(model.units.size(), 3u) << file;
  EXPECT_EQ(model.units[0].weight_layers, (std::vector<int>{1, 2})) << file;
  EXPECT_NE(model.units[0].joined.find(why), std::string::npos) << model.units[0].joined;
  EXPECT_EQ(model.cut_layers(), (std::vector<int>{2, 3}));
  // A register inside the joined unit is refused in one line naming the reason and the places.
  const std::string inside = error_of<UsageError>([&] { trained(file, {1}, ScheduleKind::kSequential, "emulated"); });
  EXPECT_NE(inside.find("inside unit 1 (c1), which holds layers 1-2 together: " + why), std::string::npos) << inside;
  EXPECT_NE(inside.find("a register may follow layer 2, 3"), std::string::npos) << inside;
  expect_trains_as_uncut_and_alike(file, {2, 3}, {2, 3});
}

// A number and a list of tensors of a fixed length cross registers as tensors: every place may
// hold one, and the network trains as uncut and alike on every executor.
void expect_crossing_trains(const std::string& file, const std::string& crossing) {
  const auto model = models::load_torchscript(file, kInput);
  ASSERT_EQ(model.units.size(), 4u) << file;
  for (const auto& unit : model.units) EXPECT_EQ(unit.joined, "") << unit.name;
  EXPECT_EQ(model.cut_layers(), (std::vector<int>{1, 2, 3}));
  const auto& pops = model.units[1].skips.pops;
  const auto receives = [&](const std::string& p) { return p.find(crossing) != std::string::npos; };
  EXPECT_TRUE(std::any_of(pops.begin(), pops.end(), receives)) << "c2 receives " << crossing;
  expect_trains_as_uncut_and_alike(file, {1, 2}, {1, 2});
}

TEST(TorchScriptDag, AnIntFromAShapeCrossesAsATensor) {
  test::TempDir dir;
  // A batch size read with c1 and used after c2.
  expect_crossing_trains(joined_file(dir, "size.pt",
                                     "\ndef forward(self, x):\n    n = x.size(0)\n"
                                     "    h = self.c2.forward(self.c1.forward(x))\n"
                                     "    h = torch.relu(h).reshape(n, 4, 8, 8)\n"
                                     "    return self.fc.forward(torch.flatten(self.c3.forward(h), 1))\n"),
                         "_n");
}

TEST(TorchScriptDag, AListOfIntsCrossesAsATensor) {
  test::TempDir dir;
  // The sizes of c1's output, read before c2 and used after it.
  expect_crossing_trains(joined_file(dir, "sizes.pt",
                                     "\ndef forward(self, x):\n    h = self.c1.forward(x)\n    sizes = h.size()\n"
                                     "    h = torch.relu(self.c2.forward(h)).reshape(sizes)\n"
                                     "    return self.fc.forward(torch.flatten(self.c3.forward(h), 1))\n"),
                         "_sizes");
}

TEST(TorchScriptDag, AListOfIntsUnpackedAfterALayerCrossesAsATensor) {
  test::TempDir dir;
  // A list the forward builds and unpacks (`H, W = size`, as PVTv2's stages take theirs).
  expect_crossing_trains(joined_file(dir, "unpacked.pt",
                                     "\ndef forward(self, x):\n    h = self.c1.forward(x)\n"
                                     "    size = [h.size(2), h.size(3)]\n    h = torch.relu(self.c2.forward(h))\n"
                                     "    H, W = size\n    h = h.reshape(-1, 4, H, W)\n"
                                     "    return self.fc.forward(torch.flatten(self.c3.forward(h), 1))\n"),
                         "_size");
}

TEST(TorchScriptDag, ATupleACallReturnsCrossesAsItsElements) {
  test::TempDir dir;
  // A stage that returns its output with its (H, W), as Twins' patch embeddings do: once the
  // call is inlined, the tuple is its elements, and the two ints cross where c2 is cut off.
  expect_crossing_trains(joined_file(dir, "tuple.pt",
                                     "\ndef stage(self, h: Tensor) -> Tuple[Tensor, Tuple[int, int]]:\n"
                                     "    return torch.relu(h), (h.size(2), h.size(3))\n"
                                     "\ndef forward(self, x):\n    h, size = self.stage(self.c1.forward(x))\n"
                                     "    h = torch.relu(self.c2.forward(h))\n    H, W = size\n"
                                     "    h = h.reshape(-1, 4, H, W)\n"
                                     "    return self.fc.forward(torch.flatten(self.c3.forward(h), 1))\n"),
                         "s");
}

// A dict the forward fills in evaluation mode (timm's attention-bias caches) holds values made
// from the weights of that time: emptied when the mode switches, an evaluation after training
// computes with the weights as they are, as the network loaded afresh does.
TEST(TorchScriptDag, ACacheTheForwardFillsIsEmptiedWhenTheModeSwitches) {
  test::TempDir dir;
  torch::manual_seed(5);
  const auto net = test::script_module(
      "__torch__.CacheNet",
      {{"c1", test::script_conv2d(1, 4, 1)}, {"c2", test::script_conv2d(4, 4, 1)}, {"fc", test::script_linear(256, 3)}},
      "\ndef forward(self, x):\n    h = self.c1.forward(x)\n    if self.training:\n        b = self.table * 2.0\n"
      "    else:\n        if 'b' not in self.cache:\n            self.cache['b'] = self.table * 2.0\n"
      "        b = self.cache['b']\n    h = self.c2.forward(torch.relu(h + b))\n"
      "    return self.fc.forward(torch.flatten(h, 1))\n",
      [](torch::jit::Module& m) {
        m.register_parameter("table", torch::randn({4, 1, 1}), false);
        const auto dict = c10::DictType::create(c10::StringType::get(), c10::TensorType::get());
        m.register_attribute("cache", dict, c10::impl::GenericDict(c10::StringType::get(), c10::TensorType::get()));
      });
  const std::string file = test::save_script(net, dir.file("cache.pt"));
  const auto model = models::load_torchscript(file, kInput);
  ASSERT_EQ(model.units.size(), 3u);
  auto mode = [&](bool training) {
    for (const auto& unit : model.units) unit.module.ptr()->train(training);
  };
  const auto x = torch::randn({2, 1, 8, 8});
  torch::NoGradGuard no_grad;
  mode(false);
  model.forward(x);  // fills the cache
  model.script->attr("table").toTensor().mul_(3.0);  // a training step
  mode(true);
  EXPECT_EQ(model.script->attr("cache").toGenericDict().size(), 0u);
  mode(false);
  auto fresh = torch::jit::load(file);
  fresh.attr("table").toTensor().copy_(model.script->attr("table").toTensor());
  fresh.eval();
  EXPECT_TRUE(torch::equal(model.forward(x), fresh.forward({x}).toTensor()));
}

// A skip tensor that is a view of a parameter (ConViT's `self.cls_token.expand(B, -1, -1)`,
// made in the first piece and read in the last) leaves its partition as a copy: the partition
// that owns the parameter updates it in place while a later one may still be to read it, and
// the threads executor trained as its timing fell, unlike the emulated one.
TEST(TorchScriptDag, ASkipThatViewsAParameterCrossesAsItWasInTheForward) {
  test::TempDir dir;
  torch::manual_seed(5);
  const auto net = test::script_module(
      "__torch__.TokenNet",
      {{"c1", test::script_conv2d(1, 4, 1)}, {"c2", test::script_conv2d(4, 4, 1)}, {"c3", test::script_conv2d(4, 4, 1)},
       {"fc", test::script_linear(256, 3)}},
      "\ndef forward(self, x):\n    t = self.token.expand(x.size(0), 4, 8, 8)\n    h = self.c1.forward(x)\n"
      "    h = self.c3.forward(torch.relu(self.c2.forward(h))) + t\n"
      "    return self.fc.forward(torch.flatten(h, 1))\n",
      [](torch::jit::Module& m) { m.register_parameter("token", torch::randn({1, 4, 1, 1}).requires_grad_(), false); });
  const std::string file = test::save_script(net, dir.file("token.pt"));
  expect_trains_as_uncut_and_alike(file, {1, 2}, {2});
}

// A shortcut's projection beside the convolution on the same input (ResNetV2's, DLA's, the NF
// nets' downsampling): the layer after the register reads only what the one before it read,
// which passes through that piece as its output, and a register may follow every layer.
TEST(TorchScriptDag, ALayerBesideTheOneBeforeItContinuesFromTheirInput) {
  test::TempDir dir;
  const std::string file = joined_file(dir, "beside.pt",
                                       "\ndef forward(self, x):\n    h = torch.relu(self.c1.forward(x))\n"
                                       "    a = self.c2.forward(h)\n    b = self.c3.forward(h)\n"
                                       "    y = self.fc.forward(torch.flatten(torch.relu(b), 1))\n"
                                       "    return y + torch.flatten(a, 1).mean(1, True)\n");
  const auto model = models::load_torchscript(file, kInput);
  ASSERT_EQ(model.units.size(), 4u);
  for (const auto& unit : model.units) EXPECT_EQ(unit.joined, "") << unit.name;
  EXPECT_EQ(model.cut_layers(), (std::vector<int>{1, 2, 3}));
  ASSERT_EQ(model.units[1].skips.stashes.size(), 1u);  // c2's output, for the sum after fc
  EXPECT_EQ(model.units[3].skips.pops, model.units[1].skips.stashes);
  expect_trains_as_uncut_and_alike(file, {1, 2, 3}, {1, 2});
}

// A piece whose input holds windows of the samples (n * 4 of them, as a window attention makes)
// and adds a skip tensor of n samples back: its FLOPs are counted on inputs shaped as it ran.
TEST(TorchScriptDag, APieceOnWindowsCountsItsFlopsWithItsSkipAsItRan) {
  test::TempDir dir;
  const std::string file = joined_file(dir, "windows.pt",
                                       "\ndef forward(self, x):\n    n = x.size(0)\n    h = self.c1.forward(x)\n"
                                       "    w = self.c2.forward(h.reshape(n * 4, 1, 8, 8))\n"
                                       "    y = w.reshape(n, 4, 8, 8) + h\n"
                                       "    return self.fc.forward(torch.flatten(self.c3.forward(y), 1))\n",
                                       /*c2_channels=*/1);
  auto model = models::load_torchscript(file, kInput);
  ASSERT_EQ(model.units.size(), 4u);
  const auto rows = models::describe_units(model);
  EXPECT_DOUBLE_EQ(rows[1].forward_mflops, 1e-6 * 2 * (8 * 8));  // per window: a 1x1 convolution of 1 channel
}

TEST(TorchScriptDag, AListOfTensorsFromSplitCrossesAsItsTensors) {
  test::TempDir dir;
  // The list is read after c2: its two tensors cross the register there.
  expect_crossing_trains(joined_file(dir, "split.pt",
                                     "\ndef forward(self, x):\n    parts = torch.split(self.c1.forward(x), 2, 1)\n"
                                     "    h = torch.cat([self.c2.forward(parts[0]), parts[1]], 1)\n"
                                     "    return self.fc.forward(torch.flatten(self.c3.forward(h), 1))\n",
                                     /*c2_channels=*/2),
                         "parts_1");
}

TEST(TorchScriptDag, AListWhoseLengthFollowsTheBatchJoinsThePiecesItWouldCross) {
  test::TempDir dir;
  // One part per sample: as many as the batch has, which the last batch may change.
  expect_joined_trains(joined_file(dir, "samples.pt",
                                   "\ndef forward(self, x):\n    h = self.c1.forward(x)\n"
                                   "    parts = torch.split(h, 1, 0)\n"
                                   "    h = self.c2.forward(h) + parts[0]\n"
                                   "    return self.fc.forward(torch.flatten(self.c3.forward(h), 1))\n"),
                       "aten::split");
}

TEST(TorchScriptDag, LayersInABranchAreOneUnitThatSaysWhy) {
  test::TempDir dir;
  // Which layers run is known only when the forward runs (TinyViT's window attention, padded
  // first where the input's size asks for it).
  const std::string file = joined_file(dir, "branch_layers.pt",
                                       "\ndef forward(self, x):\n    h = self.c1.forward(x)\n"
                                       "    if bool(h.sum() > 0.0):\n        h = self.c3.forward(self.c2.forward(h))\n"
                                       "    else:\n        h = self.c3.forward(h)\n"
                                       "    return self.fc.forward(torch.flatten(h, 1))\n");
  const auto model = models::load_torchscript(file, kInput);
  ASSERT_EQ(model.units.size(), 3u);
  EXPECT_NE(model.units[1].joined.find("prim::If"), std::string::npos) << model.units[1].joined;
  EXPECT_NE(model.units[1].joined.find("a branch or loop decided as it runs"), std::string::npos);
  EXPECT_EQ(model.cut_layers(), (std::vector<int>{1, 4}));
}

TEST(TorchScriptDag, AListABranchMakesJoinsThePiecesItWouldCross) {
  test::TempDir dir;
  // Which list the branch makes is known only when it runs; it is read after c2.
  expect_joined_trains(joined_file(dir, "branch.pt",
                                   "\ndef forward(self, x):\n    h = self.c1.forward(x)\n    if bool(h.sum() > 0.0):\n"
                                   "        parts = [h, h * 2.0]\n    else:\n        parts = [h * 2.0, h]\n"
                                   "    h = self.c2.forward(parts[0]) + parts[1]\n"
                                   "    return self.fc.forward(torch.flatten(self.c3.forward(h), 1))\n"),
                       "prim::If");
}

// Lists whose every state the cutter can name cross registers as their tensors: a list of
// children that grows in a call taking it as Optional[List[Tensor]] (DLA's trees), a list
// assigned into in a loop over a ModuleList, and modules picked from a ModuleList by an index
// the loop computes (HRNet's branches and head). The fixtures are written by
// tests/fixtures/list_networks.py (torch.jit.script of PyTorch 1.13). A register may follow
// every layer, and registers there train as without them and alike on every executor.
void expect_cut_everywhere(const std::string& name, int layers) {
  const std::string file = STALEPIPE_SOURCE_DIR "/tests/fixtures/" + name;
  const auto model = models::load_torchscript(file, kInput);
  std::vector<int> everywhere(static_cast<size_t>(layers - 1));
  std::iota(everywhere.begin(), everywhere.end(), 1);
  EXPECT_EQ(model.cut_layers(), everywhere);
  for (const auto& unit : model.units) EXPECT_EQ(unit.joined, "") << unit.name;
  const auto x = torch::randn({2, 1, 8, 8});
  EXPECT_TRUE(torch::allclose(model.forward(x), torch::jit::Module(*model.script).forward({x}).toTensor()));
  expect_trains_as_uncut_and_alike(file, everywhere, {2, 4});
}

TEST(TorchScriptDag, AListOfChildrenHandedToACallCrossesAsItsTensors) { expect_cut_everywhere("children_list.pt", 5); }

TEST(TorchScriptDag, AListAssignedInALoopAndModulesPickedByIndexCrossAsTensors) {
  expect_cut_everywhere("branches_list.pt", 8);
}

// An LSTM (Sequencer's blocks) reads its weights from the list nn.LSTM keeps of them: they are
// the tensors of the piece that runs it, and train as without the register.
TEST(TorchScriptDag, AnLstmsWeightsReadAsAListBelongToItsPiece) {
  const std::string file = STALEPIPE_SOURCE_DIR "/tests/fixtures/lstm_list.pt";
  const auto model = models::load_torchscript(file, kInput);
  ASSERT_EQ(model.units.size(), 2u);
  EXPECT_EQ(model.cut_layers(), (std::vector<int>{1}));
  const auto params = model.units[0].module.ptr()->named_parameters();
  EXPECT_NE(params.find("rnn_weight_ih_l0"), nullptr);
  const auto x = torch::randn({2, 1, 8, 8});
  EXPECT_TRUE(torch::allclose(model.forward(x), torch::jit::Module(*model.script).forward({x}).toTensor()));
  expect_trains_as_uncut_and_alike(file, {1}, {1});
}

// A register hands on a tensor in the layout it has: the next layer computes on what it
// computes on uncut, so the sequential schedule with a register trains as without. The fixture,
// tests/fixtures/permuted_blocks.pt, is torch.jit.script (PyTorch 1.13) of ConvNeXt-like blocks
// on 1x8x8 inputs, 3 classes: a 1x1 stem conv to 16 channels, then twice
//   y = x.permute(0, 2, 3, 1); y = fc2(gelu(fc1(layer_norm(conv_dw7x7(x)...)))).permute(0, 3, 1, 2)
//   x = y * gamma + x
// (depthwise 7x7 conv, LayerNorm(16), Linear(16, 64), Linear(64, 16)), then a mean over the
// pixels and Linear(16, 3). A register after the first block's fc2 (layer 4) carries its sum,
// which has channels-last strides; made contiguous there, the next depthwise convolution
// added in another order than uncut.
TEST(TorchScriptDag, ATensorCrossesARegisterInTheLayoutItHas) {
  const std::string file = STALEPIPE_SOURCE_DIR "/tests/fixtures/permuted_blocks.pt";
  expect_trains_as_uncut_and_alike(file, {4}, {2, 4});
}

TEST(TorchScriptDag, AParameterTwoPiecesReadJoinsThem) {
  test::TempDir dir;
  torch::manual_seed(5);
  torch::jit::Module own("__torch__.Own");
  own.register_attribute("training", c10::BoolType::get(), true);
  own.register_module("c1", test::script_conv2d(1, 4, 1));
  own.register_parameter("scale", torch::ones({1}), false);
  own.register_module("fc", test::script_linear(256, 3));
  own.define("\ndef forward(self, x):\n    h = self.c1.forward(x * self.scale) * self.scale\n"
             "    return self.fc.forward(torch.flatten(h, 1)) * self.scale\n");
  const auto model = models::load_torchscript(test::save_script(own, dir.file("own.pt")), kInput);
  ASSERT_EQ(model.units.size(), 1u);
  EXPECT_EQ(model.units[0].joined, "parameter scale is read on both sides");
  EXPECT_TRUE(model.cut_layers().empty());
}

}  // namespace
}  // namespace stalepipe
