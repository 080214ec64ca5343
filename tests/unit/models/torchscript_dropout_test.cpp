// A scripted torch.nn.Dropout inside a Sequential unit trains exactly under concurrent
// partitions: it becomes stalepipe's Dropout (models/dropout.h), whose masks come from the
// unit generator the pipeline seeds per partition and mini-batch, not from the global one.
#include <gtest/gtest.h>

#include "stalepipe/api/pipeline_trainer.h"
#include "stalepipe/models/torchscript.h"
#include "support/script_modules.h"
#include "support/temp_dir.h"

namespace stalepipe {
namespace {

const models::InputShape kInput{1, 8, 8, 3};

Options two_partitions(const std::string& executor) {
  Options o;
  o.optimizer().lr_schedule(LrScheduleKind::kConstant).lr(0.05);
  o.pipeline().ppv({1}).executor(exec::executor_from_name(executor)).threads(2);
  return o;
}

std::vector<torch::Tensor> train(const std::string& file, const std::string& executor) {
  PipelineTrainer trainer(models::load_torchscript(file, kInput), two_partitions(executor));
  torch::manual_seed(11);
  for (int i = 0; i < 6; ++i) trainer.feed(torch::randn({4, 1, 8, 8}), torch::randint(0, 3, {4}));
  trainer.flush();
  return trainer.parameters();
}

TEST(TorchScriptDropout, ADropoutChildOfASequentialUnitIsExactUnderThreads) {
  test::TempDir dir;
  torch::manual_seed(3);
  const std::string file = test::save_script(
      test::script_sequential({test::script_sequential({test::script_conv2d(1, 4, 3), test::script_relu()}),
                               test::script_sequential({test::script_flatten(), test::script_dropout(0.5),
                                                        test::script_linear(144, 3)})}),
      dir.file("drop.pt"));
  auto model = models::load_torchscript(file, kInput);
  auto chain = model.as_sequential();
  const auto x = torch::randn({4, 1, 8, 8});
  chain->train();
  const auto dropped = chain->forward(x);
  chain->eval();
  EXPECT_FALSE(torch::equal(dropped, chain->forward(x))) << "dropout is not active in training mode";

  const auto emulated = train(file, "emulated"), threads = train(file, "threads");
  ASSERT_EQ(emulated.size(), threads.size());
  for (size_t i = 0; i < emulated.size(); ++i) EXPECT_TRUE(torch::equal(emulated[i], threads[i])) << "parameter " << i;
}

}  // namespace
}  // namespace stalepipe
