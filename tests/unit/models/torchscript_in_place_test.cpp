// A pipeline register right before torch.nn.ReLU(inplace=True) (torchvision's style): the
// partition after it writes into its input, which the register shares with the partition
// before it. It trains on every executor as the unpipelined network does.
#include <gtest/gtest.h>
#include <torch/nn/modules/activation.h>

#include "stalepipe/api/pipeline_trainer.h"
#include "stalepipe/models/in_place.h"
#include "stalepipe/models/model_builder.h"
#include "stalepipe/models/torchscript.h"
#include "support/script_modules.h"
#include "support/temp_dir.h"

namespace stalepipe {
namespace {

const models::InputShape kInput{1, 8, 8, 3};

// Units: 0 conv + batch norm, 1 in-place ReLU + pool, 2 flatten, 3 linear.
std::string in_place_file(const test::TempDir& dir) {
  torch::manual_seed(3);
  return test::save_script(
      test::script_sequential({test::script_sequential({test::script_conv2d(1, 4, 3), test::script_batch_norm2d(4)}),
                               test::script_sequential({test::script_relu_inplace(), test::script_max_pool2d(2)}),
                               test::script_flatten(), test::script_linear(36, 3)}),
      dir.file("inplace.pt"));
}

// ppv {1}: the register sits between unit 0 and the in-place ReLU; {}: one partition.
Options options(std::vector<int> ppv, const std::string& executor, schedule::ScheduleKind kind, int recompute = 0) {
  Options o;
  o.optimizer().lr_schedule(LrScheduleKind::kConstant).lr(0.05);
  o.pipeline().ppv(ppv).partitions(ppv.empty() ? 1 : 0).executor(exec::executor_from_name(executor)).threads(2);
  o.pipeline().schedule(kind).recompute(recompute);
  return o;
}

std::vector<torch::Tensor> train(const std::string& file, const Options& o) {
  PipelineTrainer trainer(models::load_torchscript(file, kInput), o);
  torch::manual_seed(11);
  for (int i = 0; i < 6; ++i) trainer.feed(torch::randn({4, 1, 8, 8}), torch::randint(0, 3, {4}));
  trainer.flush();
  return trainer.parameters();
}

void expect_close(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b, const char* what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::allclose(a[i], b[i], 1e-5, 1e-6)) << what << ", parameter " << i;
}

TEST(TorchScriptInPlace, ARegisterBeforeAnInPlaceReluTrainsAsTheUnpipelinedNetwork) {
  test::TempDir dir;
  const std::string file = in_place_file(dir);
  const auto model = models::load_torchscript(file, kInput);
  EXPECT_FALSE(models::writes_its_input(*model.units[0].module.ptr()));
  EXPECT_TRUE(models::writes_its_input(*model.units[1].module.ptr()));

  using schedule::ScheduleKind;
  const auto whole = train(file, options({}, "emulated", ScheduleKind::kSequential));
  const auto initial = models::load_torchscript(file, kInput).as_sequential()->parameters();
  EXPECT_FALSE(torch::equal(initial.front(), whole.front())) << "training changed nothing";
  // Without staleness the two partitions compute the unpipelined gradients.
  expect_close(train(file, options({1}, "emulated", ScheduleKind::kSequential)), whole, "emulated, sequential");
  expect_close(train(file, options({1}, "threads", ScheduleKind::kSequential)), whole, "threads, sequential");
  // Stale: every executor and the recomputation of unit 1 agree.
  const auto stale = train(file, options({1}, "emulated", ScheduleKind::kStale));
  expect_close(train(file, options({1}, "threads", ScheduleKind::kStale)), stale, "threads, stale");
  expect_close(train(file, options({1}, "emulated", ScheduleKind::kStale, 1)), stale, "recompute 1, stale");
  expect_close(train(file, options({1}, "emulated", ScheduleKind::kStale, 2)), stale, "recompute 2, stale");
}

TEST(TorchScriptInPlace, UnitsThatWriteTheirInput) {
  using namespace torch::nn;
  EXPECT_TRUE(models::writes_its_input(*ReLU(ReLUOptions().inplace(true))));
  EXPECT_FALSE(models::writes_its_input(*ReLU()));
  EXPECT_TRUE(models::writes_its_input(*LeakyReLU(LeakyReLUOptions().inplace(true))));
  // Through a child that hands its input on (a view), not through one that computes anew.
  EXPECT_TRUE(models::writes_its_input(*models::SequentialUnit(Sequential(Flatten(), ReLU(ReLUOptions().inplace(true))))));
  EXPECT_FALSE(models::writes_its_input(*models::SequentialUnit(Sequential(Linear(4, 4), ReLU(ReLUOptions().inplace(true))))));
}

}  // namespace
}  // namespace stalepipe
