// A scripted unit that draws random numbers from PyTorch's global generator is refused, naming
// the file, the unit and the operation; whether an operation draws is read from its
// registration (the nondeterministic_seeded tag), so draws that no list of names foresaw, such
// as torch.binomial or torch._standard_gamma, are refused too.
#include <gtest/gtest.h>
#include <torch/csrc/jit/runtime/custom_operator.h>

#include "stalepipe/common/error.h"
#include "stalepipe/models/torchscript.h"
#include "support/error_of.h"
#include "support/script_modules.h"
#include "support/temp_dir.h"

namespace stalepipe {
namespace {

const models::InputShape kInput{1, 8, 8, 3};

// A file whose one unit is a block that computes `expression` of x (a [N, 1, 8, 8] tensor)
// before its Linear head.
std::string block_file(const test::TempDir& dir, const std::string& expression) {
  torch::manual_seed(1);
  auto block = test::script_module("__torch__.Noisy", {{"fc", test::script_linear(64, 3)}},
                                   "\ndef forward(self, x):\n    y = " + expression +
                                       "\n    return self.fc.forward(torch.flatten(y, 1))\n");
  return test::save_script(test::script_sequential({block}), dir.file("noisy.pt"));
}

std::string load_error(const std::string& file) {
  return test::error_of<UsageError>([&] { models::load_torchscript(file, kInput); });
}

TEST(TorchScriptRandom, EveryDrawFromTheGlobalGeneratorIsRefusedNamingFileUnitAndOp) {
  test::TempDir dir;
  const std::pair<const char*, const char*> kDraws[] = {
      {"x * torch.binomial(torch.ones_like(x), torch.full_like(x, 0.5))", "aten::binomial"},
      {"torch._standard_gamma(x.abs() + 1.0)", "aten::_standard_gamma"},
      {"x * torch._sample_dirichlet(x.abs() + 1.0)", "aten::_sample_dirichlet"},
      {"torch.poisson(x.abs())", "aten::poisson"},
      {"x + torch.multinomial(x.abs().flatten(1) + 0.1, 1).unsqueeze(2).unsqueeze(3).float()", "aten::multinomial"},
      {"torch.normal(x, 0.1)", "aten::normal"},
      {"x + torch.rand_like(x)", "aten::rand_like"},
      {"x + torch.randn(x.size())", "aten::randn"},
      {"x[torch.randperm(x.size(0))]", "aten::randperm"},
      {"x * torch.bernoulli(torch.full_like(x, 0.5))", "aten::bernoulli"},
      {"torch.dropout(x, 0.5, True)", "aten::dropout"},
      {"torch.feature_dropout(x, 0.5, True)", "aten::feature_dropout"},
      {"torch.alpha_dropout(x, 0.5, True)", "aten::alpha_dropout"},
      {"torch.rrelu(x, 0.1, 0.3, True)", "aten::rrelu"},
      {"x + torch.empty_like(x).uniform_(0.0, 1.0)", "aten::uniform_"},
      {"x + torch.empty_like(x).exponential_(1.0)", "aten::exponential_"},
      {"x + torch._no_grad_normal_(torch.empty_like(x), 0.0, 1.0)", "aten::_no_grad_normal_"},
  };
  for (const auto& [expression, op] : kDraws) {
    const std::string error = load_error(block_file(dir, expression));
    EXPECT_NE(error.find("noisy.pt: unit 1 (0, Noisy) calls " + std::string(op) + ", "), std::string::npos)
        << expression << ": " << error;
    EXPECT_EQ(error.find('\n'), std::string::npos) << error;
  }
}

TEST(TorchScriptRandom, ADrawInABranchOrAChildIsFoundToo) {
  test::TempDir dir;
  const std::string branch = load_error(block_file(dir, "x if x.size(0) > 1000 else torch.poisson(x.abs())"));
  EXPECT_NE(branch.find("unit 1 (0, Noisy) calls aten::poisson, which draws random numbers"), std::string::npos) << branch;
  auto noise = test::script_module("__torch__.Noise", {}, "\ndef forward(self, x):\n    return x + torch.randn_like(x)\n");
  auto block = test::script_module("__torch__.Outer", {{"noise", noise}, {"flat", test::script_flatten()}},
                                   "\ndef forward(self, x):\n    return self.flat.forward(self.noise.forward(x))\n");
  const std::string child = load_error(test::save_script(
      test::script_sequential({test::script_relu(), block, test::script_linear(64, 3)}), dir.file("child.pt")));
  EXPECT_NE(child.find("child.pt: unit 2 (1.noise, Noise) calls aten::randn_like, which draws random numbers"),
            std::string::npos) << child;
}

// Registered with the interpreter only (no dispatcher entry, so no tags), as an extension's
// operator might be: stalepipe cannot tell whether it draws.
torch::jit::RegisterOperators kUntagged({torch::jit::Operator(
    "aten::stalepipe_test_untagged(Tensor x) -> Tensor",
    [](torch::jit::Stack& stack) {
      auto x = torch::jit::pop(stack).toTensor();
      torch::jit::push(stack, x.clone());
    },
    c10::AliasAnalysisKind::FROM_SCHEMA)});

TEST(TorchScriptRandom, AnOperationWithoutTagsThatStalepipeDoesNotKnowIsRefused) {
  test::TempDir dir;
  const std::string error = load_error(block_file(dir, "torch.stalepipe_test_untagged(x)"));
  EXPECT_NE(error.find("noisy.pt: unit 1 (0, Noisy) calls aten::stalepipe_test_untagged, an operation registered "
                       "without the tags"),
            std::string::npos) << error;
}

TEST(TorchScriptRandom, DeterministicInterpreterAndNativeOperationsLoad) {
  test::TempDir dir;
  // Sizes, list and number arithmetic, indexing, einsum, a clamp and a copy: none draws.
  const std::string file = block_file(
      dir, "torch.einsum('nchw->nchw', [x[:, :, :, :].clamp(-1.0, 1.0)]) * float(len(x.size())) / 4.0 + "
           "torch.zeros_like(x).copy_(x) * 0.0");
  const auto model = models::load_torchscript(file, kInput);
  EXPECT_EQ(model.units.size(), 1u);
}

}  // namespace
}  // namespace stalepipe
