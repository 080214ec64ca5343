// A scripted module whose forward is not its children in order: cut into pieces at its weight
// layers, with the tensors that jump a piece as skip tensors. The modules are built in C++
// (support/script_modules.h) as torch.jit.script would make them.
#include <gtest/gtest.h>
#include <torch/script.h>

#include "stalepipe/api/pipeline_trainer.h"
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

// A register between c1 and c2 cuts the residual: without staleness the shortcut's gradient
// reaches c1 whole, so the weights are those without the register; and executors agree.
TEST(TorchScriptDag, ARegisterInsideTheResidualTrainsAsWithoutIt) {
  test::TempDir dir;
  const std::string file = residual_file(dir);
  EXPECT_TRUE(test::all_equal(trained(file, {1}, ScheduleKind::kSequential, "emulated"),
                              trained(file, {}, ScheduleKind::kSequential, "emulated")));
  EXPECT_TRUE(test::all_equal(trained(file, {1, 2}, ScheduleKind::kStale, "threads"),
                              trained(file, {1, 2}, ScheduleKind::kStale, "emulated")));
}

TEST(TorchScriptDag, WhatCannotBeCutIsRefusedNamingTheNode) {
  test::TempDir dir;
  auto load = [&](const torch::jit::Module& m) {
    return error_of<UsageError>([&] { models::load_torchscript(test::save_script(m, dir.file("m.pt")), kInput); });
  };
  // A batch size read with c1 and used with c2: an int cannot cross the register between them.
  const std::string size = load(test::script_module(
      "__torch__.Net",
      {{"c1", test::script_conv2d(1, 4, 1)}, {"c2", test::script_conv2d(4, 4, 1)}, {"fc", test::script_linear(256, 3)}},
      "\ndef forward(self, x):\n    n = x.size(0)\n    h = self.c2.forward(self.c1.forward(x))\n"
      "    return self.fc.forward(h.reshape(n, -1))\n"));
  EXPECT_NE(size.find("m.pt: aten::size"), std::string::npos) << size;
  EXPECT_NE(size.find("makes a int that the forward uses after a place where a pipeline register may go; only "
                      "tensors can cross a register"),
            std::string::npos)
      << size;
  // A parameter read by two pieces would train in two partitions.
  torch::jit::Module own("__torch__.Own");
  own.register_attribute("training", c10::BoolType::get(), true);
  own.register_module("c1", test::script_conv2d(1, 4, 1));
  own.register_parameter("scale", torch::ones({1}), false);
  own.register_module("fc", test::script_linear(256, 3));
  own.define("\ndef forward(self, x):\n    h = self.c1.forward(x * self.scale) * self.scale\n"
             "    return self.fc.forward(torch.flatten(h, 1)) * self.scale\n");
  const std::string param = load(own);
  EXPECT_NE(param.find("m.pt: parameter scale is read by two pieces of the forward, 1 (c1) and 2 (fc)"),
            std::string::npos)
      << param;
}

}  // namespace
}  // namespace stalepipe
