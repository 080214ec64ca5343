// Skip tensors in a model (models/skips.h): what the builder refuses, each with one line naming
// the unit and the skip, and what a model with skips computes.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "stalepipe/common/error.h"
#include "stalepipe/models/model_builder.h"
#include "stalepipe/models/skips.h"
#include "support/error_of.h"

namespace stalepipe::models {
namespace {

using test::error_of;

// {x} -> {relu(x), x}: stashes its input.
struct StashInputImpl : torch::nn::Module {
  std::vector<torch::Tensor> forward(std::vector<torch::Tensor> in) { return {torch::relu(in[0]), in[0]}; }
};
TORCH_MODULE(StashInput);

// {x, s} -> {x + s}.
struct AddPoppedImpl : torch::nn::Module {
  std::vector<torch::Tensor> forward(std::vector<torch::Tensor> in) { return {in[0] + in[1]}; }
};
TORCH_MODULE(AddPopped);

ModelBuilder small() { return ModelBuilder("net", {1, 4, 4, 16}); }
torch::nn::Flatten flatten() { return torch::nn::Flatten(); }

TEST(SkipModel, ForwardHandsTheStashToItsPop) {
  const Model model = small()
                          .add("keep", StashInput(), UnitOptions().stashes({"x"}))
                          .add("double", torch::nn::Functional([](torch::Tensor t) { return 2 * t; }))
                          .add("join", AddPopped(), UnitOptions().pops({"x"}))
                          .add("flat", flatten())
                          .build();
  EXPECT_TRUE(model.has_skips());
  const torch::Tensor x = torch::randn({3, 1, 4, 4});
  EXPECT_TRUE(torch::equal(model.forward(x), (2 * torch::relu(x) + x).flatten(1)));
}

TEST(SkipModel, BadSkipsAreOneLineUsageErrorsNamingTheUnit) {
  EXPECT_EQ(error_of<UsageError>([] { small().add("join", AddPopped(), UnitOptions().pops({"x"})).add("flat", flatten()).build(); }),
            "model net: unit 1 (join) pops 'x', which no unit stashes");
  EXPECT_EQ(error_of<UsageError>([] {
              small().add("join", AddPopped(), UnitOptions().pops({"x"}))
                  .add("keep", StashInput(), UnitOptions().stashes({"x"}))
                  .add("flat", flatten())
                  .build();
            }),
            "model net: unit 1 (join) pops 'x', which unit 2 (keep) stashes after it; a skip must go forward");
  EXPECT_EQ(error_of<UsageError>([] {
              small().add("a", StashInput(), UnitOptions().stashes({"x"}))
                  .add("b", StashInput(), UnitOptions().stashes({"x"}))
                  .add("join", AddPopped(), UnitOptions().pops({"x"}))
                  .add("flat", flatten())
                  .build();
            }),
            "model net: unit 2 (b) stashes 'x', which unit 1 (a) stashes already");
  EXPECT_EQ(error_of<UsageError>([] {
              small().add("keep", StashInput(), UnitOptions().stashes({"x"})).add("flat", flatten()).build();
            }),
            "model net: unit 1 (keep) stashes 'x', which no later unit pops");
  EXPECT_EQ(error_of<UsageError>([] {
              small().add("keep", StashInput(), UnitOptions().stashes({"x"}))
                  .add("join", AddPopped(), UnitOptions().pops({"x"}))
                  .add("again", AddPopped(), UnitOptions().pops({"x"}))
                  .add("flat", flatten())
                  .build();
            }),
            "model net: unit 3 (again) pops 'x', which unit 2 (join) popped already; stash it under two names");
  EXPECT_EQ(error_of<UsageError>([] {
              small().add("keep", StashInput(), UnitOptions().stashes({"gradient"})).add("flat", flatten()).build();
            }),
            "model net: unit 1 (keep) stashes 'gradient', a name the engine's messages use; choose another");
}

TEST(SkipModel, AUnitReturningTheWrongNumberOfTensorsIsNamed) {
  const std::string error = error_of<UsageError>([] {
    small().add("keep", StashInput(), UnitOptions().stashes({"x", "y"}))
        .add("join", AddPopped(), UnitOptions().pops({"x", "y"}))
        .add("flat", flatten())
        .build();
  });
  EXPECT_EQ(error, "model net: unit keep returned 2 tensors; it stashes 2 so it must return 3 (its output, then the stashed ones)");
}

}  // namespace
}  // namespace stalepipe::models
