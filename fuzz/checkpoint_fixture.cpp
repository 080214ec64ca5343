#include "checkpoint_fixture.h"

#include <torch/torch.h>

#include "fuzz_support.h"
#include "stalepipe/models/zoo.h"
#include "stalepipe/partition/plan.h"

namespace stalepipe::fuzz {

const CheckpointFixture& checkpoint_fixture() {
  static const CheckpointFixture fixture = [] {
    torch::manual_seed(1);
    models::InputShape input;
    input.channels = 1;
    static const models::Model model = models::make_model("lenet5", input);
    static const partition::Plan plan = partition::make_plan(model, partition::parse_ppv("2"));
    static exec::Pipeline pipeline(model, plan, {torch::kCPU, torch::kCPU}, optim::UpdateOptions());
    exec::CheckpointInfo info;
    info.step = 4;
    info.ppv = "2";
    info.config_hash = "0123456789abcdef";
    const std::string run_dir = scratch_dir() + "/run";
    exec::save_checkpoint(run_dir, pipeline.stages(), info);
    return CheckpointFixture{&pipeline, run_dir};
  }();
  return fixture;
}

}  // namespace stalepipe::fuzz
