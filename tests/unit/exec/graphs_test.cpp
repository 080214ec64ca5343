// CUDA graphs (exec::Stage::use_graphs): the slots, static inputs and outputs, gradients
// accumulated in place and the update's values on the device give the training (and the
// losses) the eager passes give. On the CPU the graphs are the stand-in that behaves like a
// replay (src/exec/step_graph_impl.h): it runs the work again but leaves the results in the
// capture's memory, so a result kept without a copy is overwritten as a replay would; what
// these tests check there is the plumbing around the graphs, not a capture.
// STALEPIPE_TEST_DEVICE=cuda:N (scripts/gpu-check.sh graphs) trains on that GPU with real CUDA
// graphs instead.
#include <cstdlib>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>

#include "common/backward_impl.h"
#include "exec/step_graph_impl.h"
#include "stalepipe/common/error.h"
#include "stalepipe/exec/device_stream.h"
#include "stalepipe/models/dropout.h"
#include "stalepipe/stalepipe.h"
#include "support/error_of.h"
#include "support/pipeline_runs.h"
#include "support/temp_dir.h"
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
  return {torch::kCPU, exec::GraphMode::kReplayForTests};
}

// Trains `spec` with a cosine learning rate eagerly, then with graphs, from the same seed;
// returns the graphed run's notes. The weights (and buffers) and the losses, read every 4
// steps (a slot's next replay comes first), agree bit for bit on the CPU, where the update
// with its values on the device rounds as the host's (tests/unit/optim); on a GPU, with
// cuDNN's deterministic algorithms, within 1e-3 relative, 1e-5 absolute (the descent's
// product of lr may round apart from the fused kernels).
std::vector<std::string> expect_graphed_equals_eager(RunSpec spec, const std::string& what) {
  const GraphTarget target = graph_target();
  const DeterministicCuDNN deterministic;
  spec.device = target.device;
  spec.cosine_lr = true;
  spec.read_losses_every = 4;
  std::vector<double> eager_losses, graphed_losses;
  std::vector<double>* losses = &eager_losses;
  spec.on_step = [&](int64_t, const exec::StepLoss& loss) { losses->push_back(loss.loss); };
  const auto eager = run_pipeline(spec);
  spec.graphs = target.mode;
  losses = &graphed_losses;
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
  EXPECT_EQ(graphed_losses.size(), eager_losses.size()) << what;
  if (target.device.is_cpu()) {
    EXPECT_TRUE(all_equal(graphed, eager)) << what;
    EXPECT_EQ(graphed_losses, eager_losses) << what << ": the losses";
  } else {
    EXPECT_TRUE(all_close(graphed, eager, 1e-3, 1e-5)) << what;
  }
  return notes;
}

exec::Stage small_stage(torch::nn::Sequential module, size_t recompute_units = 0) {
  return exec::Stage(std::move(module), exec::StageOptions(0, 1).recompute_units(recompute_units));
}

exec::GraphSettings replay_settings(int64_t batch_size) {
  exec::GraphSettings settings;
  settings.mode = exec::GraphMode::kReplayForTests;
  settings.batch_size = batch_size;
  return settings;
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
  spec.executor = "threads";
  expect_graphed_equals_eager(spec, "hybrid, threads");
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

// After a resume whose first batch is partial the graphs wait for a whole one: the partial
// batches run eagerly, the whole ones as graphs.
TEST(Graphs, AResumeAtAPartialBatchCapturesAtTheFirstWholeOne) {
  RunSpec spec = lenet5_two_partitions();
  spec.train_size = 40;  // 16, 16, 8 each epoch
  spec.first_step = 2;   // the partial one
  const auto notes = expect_graphed_equals_eager(spec, "resumed at a partial batch");
  ASSERT_EQ(notes.size(), 2u);
  for (const std::string& note : notes) {  // graphs captured for [8, ...] would leave [16, ...] eager
    EXPECT_NE(note.find("has input [8, "), std::string::npos) << note;
    EXPECT_EQ(note.find("captured input [8, "), std::string::npos) << note;
  }
}

// GPipe's micro-batches of 8, then sequential mini-batches of 16: the switch drops the
// micro-batches' graphs and the first whole mini-batch captures new ones; no pass runs eagerly
// for its shapes (that would leave a note).
// Each segment of the threads executor runs on new threads, so the new graphs are captured
// there only after one eager pass (a capture on a thread that ran none throws).
TEST(Graphs, ASwitchToOtherMicroBatchesCapturesAnew) {
  RunSpec spec = lenet5_two_partitions();
  spec.before_switch = ScheduleKind::kGPipe;
  spec.micro_batches = 2;
  spec.switch_step = 6;
  for (const char* executor : {"emulated", "threads"}) {
    spec.executor = executor;
    const auto notes = expect_graphed_equals_eager(spec, c10::str("gpipe M=2, then sequential, ", executor));
    EXPECT_TRUE(notes.empty()) << notes.front();
  }
}

// A load() drops the graphs (the weights may move); the next segment, on new threads with the
// threads executor, runs a pass of each partition eagerly before it captures them again.
TEST(Graphs, ALoadCapturesAgainOnlyAfterAnEagerPassOnTheNewThreads) {
  const TempDir dir;
  for (const char* executor : {"emulated", "threads"}) {
    Options o;
    o.optimizer().lr(0.05).lr_schedule(LrScheduleKind::kConstant);
    o.pipeline().ppv({2}).threads_per_worker(1).executor(exec::executor_from_name(executor));
    torch::manual_seed(4);
    PipelineTrainer trainer(models::make_model("lenet5", models::InputShape{}), o);
    exec::GraphSettings graphs = replay_settings(8);
    for (auto* stage : trainer.pipeline().stages()) stage->use_graphs(graphs);
    const auto feed = [&](int64_t steps) {
      for (int64_t i = 0; i < steps; ++i) trainer.feed(torch::randn({8, 1, 32, 32}), torch::full({8}, i % 10, torch::kLong));
      trainer.flush();
    };
    feed(6);
    trainer.save(dir.path());
    std::vector<int64_t> eager, graphed;
    for (auto* stage : trainer.pipeline().stages()) {
      eager.push_back(stage->eager_passes());
      graphed.push_back(stage->graphed_passes());
    }
    trainer.load(dir.path());
    feed(6);
    for (int k = 0; k < 2; ++k) {
      const exec::Stage& stage = trainer.pipeline().stage(k);
      EXPECT_GE(stage.eager_passes() - eager[k], 2) << executor << ", partition " << k + 1 << ": a forward and its backward";
      EXPECT_GT(stage.graphed_passes(), graphed[k]) << executor << ", partition " << k + 1;
    }
  }
}

TEST(Graphs, RefusedWhereAPartitionCannotBeCaptured) {
  exec::GraphSettings settings = replay_settings(2);
  settings.mode = exec::GraphMode::kCuda;
  settings.option = "PipelineOptions::cuda_graphs";
  auto linear = [] { return torch::nn::Sequential(torch::nn::Linear(4, 2)); };
  const std::string cpu = error_of<UsageError>([&] { small_stage(linear()).use_graphs(settings); });
  EXPECT_NE(cpu.find("PipelineOptions::cuda_graphs: partition 1"), std::string::npos) << cpu;
  settings.mode = exec::GraphMode::kReplayForTests;
  const std::string dropout = error_of<UsageError>([&] {
    small_stage(torch::nn::Sequential(torch::nn::Linear(4, 4), models::Dropout(0.5))).use_graphs(settings);
  });
  EXPECT_NE(dropout.find("partition 1 has dropout in unit 1"), std::string::npos) << dropout;
  const std::string recompute = error_of<UsageError>([&] {
    small_stage(torch::nn::Sequential(torch::nn::Linear(4, 4), torch::nn::Linear(4, 2)), 1).use_graphs(settings);
  });
  EXPECT_NE(recompute.find("partition 1 recomputes"), std::string::npos) << recompute;
  const std::string no_batch = error_of<UsageError>([&] { small_stage(linear()).use_graphs(replay_settings(0)); });
  EXPECT_NE(no_batch.find("the mini-batch size"), std::string::npos) << no_batch;
  EXPECT_NO_THROW(small_stage(linear()).use_graphs(settings));
}

// Trains a one-partition stage on batches of 2 with graphs; returns its graphed passes.
int64_t train_graphed(exec::Stage& stage, int64_t steps) {
  stage.use_graphs(replay_settings(2));
  stage.begin_segment(schedule::make_sequential(1, 0, steps), [](int64_t) { return 0.1; });
  torch::manual_seed(3);
  for (int64_t t = 0; t < steps; ++t) {
    stage.forward_loss(t, torch::randn({2, 4}), torch::tensor({0, 1}));
    stage.backward(t, torch::Tensor());
    stage.update(t, 0.1);
  }
  return stage.graphed_passes();
}

// A unit that draws from the device's default generator (LibTorch's own dropout) is found in
// the eager passes before the first capture, and named.
TEST(Graphs, AUnitThatDrawsFromTheDefaultGeneratorIsRefused) {
  exec::Stage plain = small_stage(torch::nn::Sequential(torch::nn::Linear(4, 4), torch::nn::Linear(4, 2)));
  EXPECT_GT(train_graphed(plain, 4), 0);  // no draw: captured
  exec::Stage drawing = small_stage(torch::nn::Sequential(torch::nn::Linear(4, 4), torch::nn::Dropout(0.5),
                                                          torch::nn::Linear(4, 2)));
  const std::string error = error_of<UsageError>([&] { train_graphed(drawing, 4); });
  EXPECT_NE(error.find("cuda_graphs: partition 1, unit 1 draws random numbers from the device's default generator"),
            std::string::npos) << error;
}

// The stand-in behaves like a replay: a result kept without a copy (the mistake a missing
// clone() makes) holds what the next replay wrote, as on a GPU; a re-run alone would leave it
// the old value. The result keeps its autograd graph, and stays where the capture left it.
TEST(Graphs, TheReplayStandInOverwritesAResultKeptWithoutACopy) {
  const torch::Tensor w = torch::ones({3}, torch::requires_grad());
  const torch::Tensor x = torch::full({3}, 2.0);
  torch::Tensor out;
  exec::detail::GraphResults results;
  results.outputs = [&] { return std::vector<torch::Tensor*>{&out}; };
  auto graph = exec::detail::make_replay_graph("test graph");
  graph->capture([&] { out = w * x; }, results);
  const torch::Tensor kept = out;  // no clone()
  x.fill_(5.0);
  graph->replay();
  EXPECT_TRUE(torch::equal(kept, torch::full({3}, 5.0))) << kept;
  EXPECT_EQ(out.data_ptr(), kept.data_ptr());
  out.sum().backward();
  EXPECT_TRUE(torch::equal(w.grad(), x)) << w.grad();
}

// A tensor a replay writes in place (a gradient) that the work moved is named.
TEST(Graphs, TheReplayStandInRefusesAFixedTensorThatMoved) {
  const torch::Tensor w = torch::ones({3}, torch::requires_grad());
  w.mutable_grad() = torch::zeros_like(w);
  exec::detail::GraphResults results;
  results.fixed = [&] { return std::vector<std::pair<std::string, torch::Tensor>>{{"w's gradient", w.grad()}}; };
  auto graph = exec::detail::make_replay_graph("test graph");
  graph->capture([&] { w.mutable_grad() = torch::ones_like(w); }, results);  // re-allocates
  const std::string error = error_of<RuntimeError>([&] { graph->replay(); });
  EXPECT_NE(error.find("test graph: w's gradient moved"), std::string::npos) << error;
}

// Partitions capture, replay and drop their graphs from threads of their own, at once: on a
// GPU each of these calls updates the default generator's record of graphs, which LibTorch
// keeps without a lock (step_graph.cpp).
TEST(Graphs, ThreadsCaptureReplayAndDropGraphsAtOnce) {
  const GraphTarget target = graph_target();
  constexpr int kThreads = 3, kGraphs = 40, kReplays = 4;
  std::vector<std::string> errors(kThreads);
  const auto work = [&](int t) {
    try {
      const auto stream = exec::make_stream(target.device);
      const auto on_stream = stream->enter();
      const torch::Tensor x = torch::full({256}, static_cast<float>(t), torch::TensorOptions(target.device));
      torch::Tensor y = torch::zeros_like(x);
      for (int g = 0; g < kGraphs; ++g) {
        const std::string what = "thread " + std::to_string(t) + ", graph " + std::to_string(g);
        auto graph = target.mode == exec::GraphMode::kCuda ? exec::detail::make_cuda_graph(what)
                                                           : exec::detail::make_replay_graph(what);
        exec::detail::GraphResults results;
        results.outputs = [&y] { return std::vector<torch::Tensor*>{&y}; };
        graph->capture([&] { y.copy_(x * 2 + g); }, results);
        for (int r = 0; r < kReplays; ++r) graph->replay();
        stream->synchronize();
        const float expected = static_cast<float>(2 * t + g);
        if (!torch::equal(y.cpu(), torch::full({256}, expected))) errors[t] = what + ": the replay's result differs";
      }
    } catch (const std::exception& e) {
      errors[t] = e.what();
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back(work, t);
  for (auto& thread : threads) thread.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(errors[t], "") << "thread " << t;
}

// The negative control of the graphs' lock: threads that capture and replay a convolution with
// batch norm, forward and backward, at once give what one capture alone gives, bit for bit.
// STALEPIPE_TEST_GRAPH_LOCK=off runs it without the lock (scripts/gpu-check.sh lock runs it in
// many processes each way and counts the crashes and other bits); on the CPU it runs the
// stand-in, which takes no lock.
TEST(GraphLock, ThreadsCaptureAConvolutionWithBatchNormAtOnceAsOneAlone) {
  const GraphTarget target = graph_target();
  const DeterministicCuDNN deterministic;
  const char* lock = std::getenv("STALEPIPE_TEST_GRAPH_LOCK");
  const bool was_on = exec::detail::set_graph_lock_for_tests(!(lock && std::string(lock) == "off"));
  constexpr int kThreads = 3, kGraphs = 12, kReplays = 3;
  const torch::TensorOptions on(target.device);
  // One capture's result on this thread, alone: the output and every gradient.
  const auto run = [&](int t, std::vector<torch::Tensor>* results, std::string* error) {
    const auto stream = exec::make_stream(target.device);
    const auto on_stream = stream->enter();
    torch::nn::Conv2d conv(torch::nn::Conv2dOptions(3, 16, 3).padding(1));
    torch::nn::BatchNorm2d norm(16);
    conv->to(target.device);
    norm->to(target.device);
    {  // each thread's own weights, drawn from no generator that another thread draws from
      torch::NoGradGuard no_grad;
      for (auto& p : conv->parameters()) p.copy_(torch::linspace(-0.3, 0.3 + 0.1 * t, p.numel(), on).view(p.sizes()));
    }
    const torch::Tensor x = torch::linspace(-1, 1, 8 * 3 * 16 * 16, on).reshape({8, 3, 16, 16});
    const torch::Tensor weights = torch::linspace(0, 1, 8 * 16 * 16 * 16, on).reshape({8, 16, 16, 16});
    std::vector<torch::Tensor> params = conv->parameters();
    for (const auto& p : norm->parameters()) params.push_back(p);
    for (auto& p : params) p.mutable_grad() = torch::zeros_like(p);
    torch::Tensor out;
    for (int g = 0; g < kGraphs; ++g) {
      auto graph = target.mode == exec::GraphMode::kCuda ? exec::detail::make_cuda_graph("lock control")
                                                         : exec::detail::make_replay_graph("lock control");
      exec::detail::GraphResults outputs;
      outputs.outputs = [&out] { return std::vector<torch::Tensor*>{&out}; };
      graph->capture([&] {
        {
          torch::NoGradGuard no_grad;
          for (auto& p : params) p.mutable_grad().zero_();
        }
        out = norm(conv(x)) * weights;
        backward_on_this_thread({out}, {torch::ones_like(out)});
      }, outputs);
      for (int r = 0; r < kReplays; ++r) graph->replay();
      stream->synchronize();
      std::vector<torch::Tensor> now = {out.detach().cpu()};
      for (const auto& p : params) now.push_back(p.grad().cpu());
      if (results->empty()) {
        *results = now;
      } else if (!all_equal(now, *results)) {
        *error = "thread " + std::to_string(t) + ", graph " + std::to_string(g) + ": other bits than its first graph's";
        return;
      }
    }
  };
  std::vector<std::vector<torch::Tensor>> alone(kThreads), together(kThreads);
  std::vector<std::string> errors(kThreads);
  for (int t = 0; t < kThreads; ++t) run(t, &alone[t], &errors[t]);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      try {
        run(t, &together[t], &errors[t]);
      } catch (const std::exception& e) {
        errors[t] = e.what();
      }
    });
  }
  for (auto& thread : threads) thread.join();
  exec::detail::set_graph_lock_for_tests(was_on);
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(errors[t], "") << "thread " << t;
    EXPECT_TRUE(all_equal(together[t], alone[t])) << "thread " << t << ": other bits than alone";
  }
}

}  // namespace
}  // namespace stalepipe::test
