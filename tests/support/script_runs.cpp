#include "support/script_runs.h"

#include "stalepipe/api/pipeline_trainer.h"
#include "stalepipe/models/torchscript.h"

namespace stalepipe::test {

Options script_options(std::vector<int> ppv, schedule::ScheduleKind schedule, const std::string& executor) {
  Options o;
  o.optimizer().lr_schedule(LrScheduleKind::kConstant).lr(0.05);
  o.pipeline().ppv(std::move(ppv)).schedule(schedule).executor(exec::executor_from_name(executor)).threads(2);
  return o;
}

std::vector<torch::Tensor> train_script(const std::string& file, int steps, const Options& options) {
  PipelineTrainer trainer(models::load_torchscript(file, kScriptInput), options);
  torch::manual_seed(11);
  for (int i = 0; i < steps; ++i) trainer.feed(torch::randn({4, 1, 8, 8}), torch::randint(0, 3, {4}));
  trainer.flush();
  return trainer.parameters();
}

}  // namespace stalepipe::test
