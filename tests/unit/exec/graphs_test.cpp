// CUDA graphs (exec::Stage::use_graphs): the slots, static inputs and outputs, gradients
// accumulated in place and the update's values on the device give the training the eager
// passes give. On the CPU the graphs are the test double that runs their work again at each
// replay (src/exec/step_graph_impl.h): what these tests check there is the plumbing around the
// graphs, not a capture. STALEPIPE_TEST_DEVICE=cuda:N (scripts/gpu-check.sh graphs) trains on
// that GPU with real CUDA graphs instead.
#include <string>

#include <gtest/gtest.h>
#include <torch/nn/modules/linear.h>

#include "stalepipe/common/error.h"
#include "stalepipe/models/dropout.h"
#include "support/error_of.h"
#include "support/pipeline_runs.h"
#include "support/test_device.h"

namespace stalepipe::test {
namespace {

using schedule::ScheduleKind;

struct GraphTarget {
  torch::Device device;
  exec::GraphMode mode;
};

GraphTarget graph_target() {
  const torch::Device device = test_device();
  if (device.is_cuda()) return {device, exec::GraphMode::kCuda};
  return {torch::kCPU, exec::GraphMode::kRerunForTests};
}

// Trains `spec` with a cosine learning rate eagerly, then with graphs, from the same seed;
// returns the graphed run's notes. The weights (and buffers) agree bit for bit on the CPU,
// where the update with its values on the device rounds as the host's (tests/unit/optim);
// on a GPU within 1e-3 relative, 1e-5 absolute (the update's products may round apart from
// fused kernels, and cuDNN picks its algorithms per run).
std::vector<std::string> expect_graphed_equals_eager(RunSpec spec, const std::string& what) {
  const GraphTarget target = graph_target();
  spec.device = target.device;
  spec.cosine_lr = true;
  const auto eager = run_pipeline(spec);
  spec.graphs = target.mode;
  int64_t passes = 0;
  std::vector<std::string> notes;
  spec.inspect = [&](exec::Pipeline& pipeline) {
    for (auto* stage : pipeline.stages()) {
      passes += stage->graphed_passes();
      for (auto& note : stage->take_notes()) notes.push_back(note);
    }
  };
  const auto graphed = run_pipeline(spec);
  EXPECT_GT(passes, 0) << what << ": no pass ran as a graph";
  if (target.device.is_cpu()) {
    EXPECT_TRUE(all_equal(graphed, eager)) << what;
  } else {
    EXPECT_TRUE(all_close(graphed, eager, 1e-3, 1e-5)) << what;
  }
  return notes;
}

RunSpec lenet5_two_partitions() {
  RunSpec spec;
  spec.ppv = {2};
  spec.steps = 12;
  spec.batch_size = 16;
  spec.train_size = 48;  // whole batches: a partial one is its own test
  return spec;
}

TEST(Graphs, LeNetStaleEqualsEagerOnEveryExecutor) {
  RunSpec spec = lenet5_two_partitions();
  for (const char* executor : {"emulated", "threads"}) {
    spec.executor = executor;
    EXPECT_TRUE(expect_graphed_equals_eager(spec, executor).empty());
  }
}

TEST(Graphs, LeNetEqualsEagerWithMicroBatchesStashingPredictionAndASwitch) {
  RunSpec spec = lenet5_two_partitions();
  spec.kind = ScheduleKind::kGPipe;
  spec.micro_batches = 2;
  expect_graphed_equals_eager(spec, "gpipe M=2");
  spec.kind = ScheduleKind::kOneFOneB;
  spec.micro_batches = 1;
  expect_graphed_equals_eager(spec, "1f1b-stash");
  spec.kind = ScheduleKind::kStale;
  spec.weight_prediction = true;
  spec.spike_compensation = true;
  expect_graphed_equals_eager(spec, "weight prediction, spike compensation");
  spec.weight_prediction = spec.spike_compensation = false;
  spec.switch_step = 6;  // stale, then sequential: the slots of the first segment serve the second
  expect_graphed_equals_eager(spec, "hybrid");
}

TEST(Graphs, ResNetWithBatchNormEqualsEager) {
  RunSpec spec = small_resnet20({7});  // buffers compared too: the running statistics
  spec.executor = "threads";
  expect_graphed_equals_eager(spec, "resnet20 stale");
  spec.precision = exec::Precision::kBf16;  // autocast inside the captured forward
  expect_graphed_equals_eager(spec, "resnet20 stale, bf16");
}

TEST(Graphs, APartialLastBatchRunsEagerlyWithOneNotePerPartition) {
  RunSpec spec = lenet5_two_partitions();
  spec.train_size = 40;  // 16, 16, 8 each epoch
  const auto notes = expect_graphed_equals_eager(spec, "partial batches");
  ASSERT_EQ(notes.size(), 2u);
  for (int k = 0; k < 2; ++k) {
    EXPECT_NE(notes[k].find("partition " + std::to_string(k + 1)), std::string::npos) << notes[k];
    EXPECT_NE(notes[k].find("run without graphs"), std::string::npos) << notes[k];
    EXPECT_NE(notes[k].find("[8, "), std::string::npos) << notes[k];
  }
}

exec::Stage small_stage(torch::nn::Sequential module, size_t recompute_units = 0) {
  return exec::Stage(0, 1, std::move(module), torch::kCPU, optim::SgdOptions(), {}, 0,
                     torch::MemoryFormat::Contiguous, recompute_units);
}

TEST(Graphs, RefusedWhereAPartitionCannotBeCaptured) {
  exec::GraphSettings settings;
  settings.mode = exec::GraphMode::kCuda;
  settings.option = "PipelineOptions::cuda_graphs";
  auto linear = [] { return torch::nn::Sequential(torch::nn::Linear(4, 2)); };
  const std::string cpu = error_of<UsageError>([&] { small_stage(linear()).use_graphs(settings); });
  EXPECT_NE(cpu.find("PipelineOptions::cuda_graphs: partition 1"), std::string::npos) << cpu;
  settings.mode = exec::GraphMode::kRerunForTests;
  const std::string dropout = error_of<UsageError>([&] {
    small_stage(torch::nn::Sequential(torch::nn::Linear(4, 4), models::Dropout(0.5))).use_graphs(settings);
  });
  EXPECT_NE(dropout.find("partition 1 has dropout in unit 1"), std::string::npos) << dropout;
  const std::string recompute = error_of<UsageError>([&] {
    small_stage(torch::nn::Sequential(torch::nn::Linear(4, 4), torch::nn::Linear(4, 2)), 1).use_graphs(settings);
  });
  EXPECT_NE(recompute.find("partition 1 recomputes"), std::string::npos) << recompute;
  EXPECT_NO_THROW(small_stage(linear()).use_graphs(settings));
}

}  // namespace
}  // namespace stalepipe::test
