// Built against an installed stalepipe by tests/install/run.sh. Pipelines a 3-unit model over
// 2 partitions for 6 synthetic mini-batches; prints "consumer ok: ..." and exits 0 only if
// every loss came back and the weights changed.
#include <cstdio>

#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>

#include "stalepipe/stalepipe.h"

int main() {
  torch::manual_seed(0);
  auto model = stalepipe::models::ModelBuilder("tiny", {1, 8, 8, 4})
                   .add("conv", torch::nn::Conv2d(1, 2, 3))
                   .add("flat", torch::nn::Flatten(), stalepipe::models::UnitOptions().weight_layers(0))
                   .add("fc", torch::nn::Linear(72, 4))
                   .build();
  stalepipe::Options options;
  options.pipeline().ppv({1}).threads(1);
  options.optimizer().lr_schedule(stalepipe::LrScheduleKind::kConstant);
  stalepipe::PipelineTrainer trainer(model, options);
  const auto before = trainer.parameters();
  int losses = 0;
  for (int t = 0; t < 6; ++t) {
    if (trainer.feed(torch::randn({4, 1, 8, 8}), torch::randint(4, {4}))) ++losses;
  }
  losses += static_cast<int>(trainer.finish().size());
  const bool changed = !torch::equal(before[0], trainer.parameters()[0]);
  std::printf("consumer %s: stalepipe %d.%d.%d, %d partitions, %d losses\n",
              losses == 6 && changed ? "ok" : "FAILED", STALEPIPE_VERSION_MAJOR,
              STALEPIPE_VERSION_MINOR, STALEPIPE_VERSION_PATCH, trainer.plan().num_partitions(), losses);
  return losses == 6 && changed ? 0 : 1;
}
