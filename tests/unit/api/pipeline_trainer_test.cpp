// The public API: a user's module list pipelined with PipelineTrainer equals the CLI's run of
// the zoo model; the step interface equals a segment run; misuse gives clear errors.
#include <atomic>
#include <chrono>
#include <filesystem>
#include <thread>

#include <gtest/gtest.h>
#include <torch/data/dataloader.h>
#include <torch/data/example.h>
#include <torch/data/samplers/sequential.h>
#include <torch/data/transforms/stack.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/pooling.h>

#include "stalepipe/stalepipe.h"
#include "stalepipe/api/options_json.h"
#include "stalepipe/optim/lr_schedule.h"
#include "stalepipe/train/trainer.h"
#include "support/error_of.h"
#include "support/sanitizers.h"
#include "support/temp_dir.h"

namespace stalepipe {
namespace {

namespace nn = torch::nn;
using test::error_of;

// Options for these tests in one expression: a constant learning rate (the loops here feed
// no epoch length) and the settings each test names.
struct Flat {
  Options o;
  Flat() { o.optimizer().lr_schedule(LrScheduleKind::kConstant); }
  Flat& ppv(std::vector<int> v) { o.pipeline().ppv(std::move(v)); return *this; }
  Flat& partitions(int k) { o.pipeline().partitions(k); return *this; }
  Flat& balance(Balance b) { o.pipeline().balance(b); return *this; }
  Flat& threads(int n) { o.pipeline().threads(n); return *this; }
  Flat& threads_per_worker(int n) { o.pipeline().threads_per_worker(n); return *this; }
  Flat& executor(const std::string& name) { o.pipeline().executor(exec::executor_from_name(name, field_name(Field::executor))); return *this; }
  Flat& schedule(const std::string& name) { o.pipeline().schedule(schedule::schedule_from_name(name, field_name(Field::schedule))); return *this; }
  Flat& hybrid_switch_step(int64_t t) { o.pipeline().hybrid_switch(TrainingPoint::steps(t)); return *this; }
  Flat& hybrid_norm_reset(bool b) { o.pipeline().hybrid_norm_reset(b); return *this; }
  Flat& micro_batches(int m) { o.pipeline().micro_batches(m); return *this; }
  Flat& devices(std::vector<torch::Device> d) { o.pipeline().devices(std::move(d)); return *this; }
  Flat& lr(double v) { o.optimizer().lr(v); return *this; }
  Flat& momentum(double v) { o.optimizer().momentum(v); return *this; }
  Flat& lr_at(std::function<double(int64_t)> f) { o.optimizer().lr_at(std::move(f)); return *this; }
  Flat& loss(exec::LossFn f) { o.optimizer().loss(std::move(f)); return *this; }
  Flat& weight_prediction(bool b) { o.optimizer().weight_prediction(b); return *this; }
  Flat& spike_compensation(bool b) { o.optimizer().spike_compensation(b); return *this; }
  Flat& fixed_weight_norm(bool b) { o.optimizer().fixed_weight_norm(b); return *this; }
  Flat& delay_aware_lr(bool b) { o.optimizer().delay_aware_lr(b); return *this; }
  operator Options() const { return o; }
};

// LeNet-5 (models/zoo.h) written as a user would, with plain LibTorch modules. Constructed in
// the zoo's order, so the same seed gives the same initial weights.
models::Model user_lenet5(uint64_t seed, bool conv2_cut = true) {
  torch::manual_seed(seed);
  return models::ModelBuilder("user-lenet5", {1, 32, 32, 10})
      .add("conv1", nn::Sequential(nn::Conv2d(nn::Conv2dOptions(1, 6, 5)), nn::ReLU(), nn::MaxPool2d(2)))
      .add("conv2", nn::Sequential(nn::Conv2d(nn::Conv2dOptions(6, 16, 5)), nn::ReLU(), nn::MaxPool2d(2)),
           models::UnitOptions().cut_after(conv2_cut))
      .add("fc1", nn::Sequential(nn::Flatten(), nn::Linear(400, 120), nn::ReLU()))
      .add("fc2", nn::Sequential(nn::Linear(120, 84), nn::ReLU()))
      .add("fc3", nn::Linear(84, 10))
      .build();
}

void expect_same(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i], b[i])) << "parameter " << i;
}

TEST(PipelineTrainer, UserModuleListEqualsCliRunOfZooModel) {
  const uint64_t seed = 5;
  const int64_t epochs = 2, batch = 32;
  auto cli = options_from_json({{"model", "lenet5"}, {"data", "synthetic:200"}, {"epochs", epochs},
                                {"batch_size", batch}, {"pipeline", "1,2"}, {"executor", "threads"},
                                {"seed", seed}, {"threads", 2}, {"progress", "none"}}, "test");
  train::TrainHooks quiet;
  quiet.log = [](const std::string&) {};
  const auto expected = train::train(cli, quiet).parameters;

  // The same data, batches and learning rates, fed through fit() one epoch at a time.
  const auto split = data::load_dataset("synthetic:200");
  const data::Loader loader(split.train, data::LoaderOptions().batch_size(batch).seed(seed).pad_to(32)
                                             .normalization(data::compute_normalization(split.train)));
  optim::LrScheduleOptions lr;
  lr.steps_per_epoch = loader.batches_per_epoch();
  lr.total_steps = epochs * lr.steps_per_epoch;
  const optim::LrSchedule schedule(lr);
  auto model = user_lenet5(seed);
  PipelineTrainer trainer(model, Flat().ppv({1, 2}).threads(2).lr_at(
                                     [&schedule](int64_t t) { return schedule.at(t); }));
  EXPECT_EQ(trainer.info().staleness, (std::vector<int>{3, 1, 0}));
  int64_t losses = 0;
  for (int64_t e = 0; e < epochs; ++e) {
    std::vector<torch::data::Example<>> batches;
    const auto order = loader.epoch_order(e);
    for (int64_t i = 0; i < loader.batches_per_epoch(); ++i) {
      const auto b = loader.batch(e, i, order);
      batches.push_back({b.x, b.y});
    }
    FitHooks callbacks;
    callbacks.on_step = [&](const StepLoss& l) { EXPECT_EQ(l.step, losses++); };
    trainer.fit(batches, 1, callbacks);
  }
  EXPECT_EQ(losses, epochs * loader.batches_per_epoch());
  expect_same(trainer.parameters(), expected);
}

size_t threads_of_this_process() {
  size_t n = 0;
  for ([[maybe_unused]] const auto& task : std::filesystem::directory_iterator("/proc/self/task")) ++n;
  return n;
}

// Evaluation and predict leave no OpenMP workers behind on the caller's thread: libgomp keeps
// a pool for each thread that ran a parallel region while that thread lives, and with more
// such workers than cores it stops spinning for the partitions' threads, so that every epoch
// after an evaluation trained slower.
TEST(PipelineTrainer, EvaluationLeavesNoThreadsBehindOnTheCallersThread) {
  PipelineTrainer trainer(user_lenet5(3), Flat().ppv({1}).threads(2));
  std::vector<torch::data::Example<>> batches;
  for (int i = 0; i < 2; ++i) batches.push_back({torch::randn({64, 1, 32, 32}), torch::randint(10, {64})});
  trainer.fit(batches, 1);
  trainer.evaluate(batches);  // what LibTorch starts once, for the process
  trainer.predict(torch::randn({64, 1, 32, 32}));
  std::thread caller([&] {  // a thread of its own: the test's may hold a pool from other tests
    const size_t before = threads_of_this_process();
    trainer.evaluate(batches);
    trainer.predict(torch::randn({64, 1, 32, 32}));
    EXPECT_EQ(threads_of_this_process(), before);
  });
  caller.join();
}

TEST(PipelineTrainer, FitOverATorchDataLoaderEqualsFitOverTheSameBatches) {
  const auto split = data::load_dataset("synthetic:100");
  const auto norm = data::compute_normalization(split.train);
  const data::Loader loader(split.train, data::LoaderOptions().batch_size(16).shuffle(false).pad_to(32).normalization(norm));
  data::TorchDataset dataset(split.train, norm, 32);
  ASSERT_EQ(dataset.size().value(), 100u);
  const auto b1 = loader.batch(0, 1);
  EXPECT_TRUE(torch::equal(dataset.get(17).data, b1.x[1]));
  EXPECT_EQ(dataset.get(17).target.item<int64_t>(), b1.y[1].item<int64_t>());

  std::vector<torch::data::Example<>> batches;
  for (int64_t i = 0; i < loader.batches_per_epoch(); ++i) {
    const auto b = loader.batch(0, i);
    batches.push_back({b.x, b.y});
  }
  const auto options = Flat().ppv({2}).threads_per_worker(1);
  PipelineTrainer reference(user_lenet5(9), options);
  reference.fit(batches, 2);
  auto torch_loader = torch::data::make_data_loader<torch::data::samplers::SequentialSampler>(
      std::move(dataset).map(torch::data::transforms::Stack<>()), 16);
  PipelineTrainer trainer(user_lenet5(9), options);
  const auto epochs = trainer.fit(*torch_loader, 2);
  ASSERT_EQ(epochs.size(), 2u);
  EXPECT_EQ(epochs[1].epoch, 2);
  EXPECT_EQ(epochs[1].end_step, 2 * loader.batches_per_epoch());
  EXPECT_EQ(epochs[1].samples, 100);
  expect_same(trainer.parameters(), reference.parameters());
  const auto eval = trainer.evaluate(*torch_loader);
  EXPECT_EQ(eval.samples, 100);
  EXPECT_EQ(eval.accuracy, reference.evaluate(batches).accuracy);
}

std::vector<exec::Input> synthetic_batches(int n) {
  torch::manual_seed(99);
  std::vector<exec::Input> batches;
  for (int i = 0; i < n; ++i) batches.push_back({torch::randn({8, 1, 32, 32}), torch::randint(10, {8})});
  return batches;
}

TEST(PipelineTrainer, FeedEqualsSegmentRunOnEveryExecutor) {
  const auto batches = synthetic_batches(11);
  for (const std::string executor : {"emulated", "threads"}) {
    const auto options = Flat().ppv({1, 3}).executor(executor).threads_per_worker(1);
    PipelineTrainer reference(user_lenet5(3), options);
    std::vector<StepLoss> expected;
    exec::SegmentContext context;
    context.input = [&](int64_t t) { return batches[t]; };
    context.on_step = [&](int64_t t, const exec::StepLoss& s) {
      expected.push_back({t, s.loss, s.correct, s.samples});
    };
    EXPECT_EQ(reference.run_segment(0, 11, context).end_step, 11);

    PipelineTrainer stepped(user_lenet5(3), options);
    const int lag = stepped.info().lag;
    EXPECT_EQ(lag, 3);  // the emulator's order asks for 2K-2 inputs before the first loss
    std::vector<StepLoss> got;
    for (int64_t t = 0; t < 11; ++t) {
      const auto loss = stepped.feed(batches[t].x, batches[t].target);
      ASSERT_EQ(loss.has_value(), t >= lag) << executor << " step " << t;
      if (loss) {
        EXPECT_EQ(loss->step, t - lag);
        got.push_back(*loss);
      }
    }
    EXPECT_EQ(stepped.in_flight(), lag);
    for (const auto& l : stepped.flush()) got.push_back(l);
    ASSERT_EQ(got.size(), expected.size());
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].step, expected[i].step);
      EXPECT_EQ(got[i].loss, expected[i].loss) << executor << " step " << i;
    }
    expect_same(stepped.parameters(), reference.parameters());
  }
}

TEST(PipelineTrainer, FlushMidwayDrainsLikeTwoSegments) {
  const auto batches = synthetic_batches(9);
  const auto options = Flat().ppv({2}).executor("threads").threads_per_worker(1);
  PipelineTrainer reference(user_lenet5(4), options);
  exec::SegmentContext context;
  context.input = [&](int64_t t) { return batches[t]; };
  reference.run_segment(0, 4, context);
  reference.run_segment(4, 9, context);
  PipelineTrainer stepped(user_lenet5(4), options);
  for (int64_t t = 0; t < 9; ++t) {
    stepped.feed(batches[t].x, batches[t].target);
    if (t == 3) EXPECT_EQ(stepped.flush().size(), 1u);  // lag 1 for K = 2
  }
  EXPECT_EQ(stepped.finish().size(), 1u);
  expect_same(stepped.parameters(), reference.parameters());
}

// A pause (SIGTSTP in the CLI: FitHooks::suspended_ns) is not training time. The pause here
// is a 0.5 s sleep in the step hook, which four LeNet-5 steps of 8 samples do not approach.
TEST(PipelineTrainer, TimeSuspendedIsNotTrainingTime) {
  // Training itself must take well under the pause: not so in a sanitizer's build.
  if (test::kSanitizer) GTEST_SKIP() << "a timing test: under TSan 4 mini-batches took longer than the 0.5 s pause";
  std::vector<torch::data::Example<>> batches;
  for (const auto& b : synthetic_batches(4)) batches.push_back({b.x, b.target});
  constexpr int64_t kPauseNs = 500'000'000;
  auto training_seconds = [&](bool counted) {
    std::atomic<int64_t> suspended{0};
    FitHooks hooks;
    hooks.suspended_ns = &suspended;
    hooks.on_step = [&](const StepLoss& s) {
      if (s.step != 1) return;
      std::this_thread::sleep_for(std::chrono::nanoseconds(kPauseNs));
      if (counted) suspended += kPauseNs;
    };
    PipelineTrainer trainer(user_lenet5(5), Flat().ppv({2}).executor("threads").threads_per_worker(1));
    return trainer.fit(batches, 1, hooks).back().wall_seconds;
  };
  EXPECT_GE(training_seconds(false), 0.5);
  const double counted = training_seconds(true);
  EXPECT_LT(counted, 0.5);
  EXPECT_GT(counted, 0.0);
}

// A pass that ran without graphs (a partial last batch) reaches FitHooks::on_warning once per
// partition, not once per pass. The graphs are the CPU test double (exec::GraphMode), as
// --cuda-graphs needs CUDA partitions.
TEST(PipelineTrainer, PassesWithoutGraphsAreNotedOncePerPartition) {
  std::vector<torch::data::Example<>> batches;
  for (const auto& b : synthetic_batches(4)) batches.push_back({b.x, b.target});
  batches.push_back({batches[0].data.narrow(0, 0, 3), batches[0].target.narrow(0, 0, 3)});
  PipelineTrainer trainer(user_lenet5(4), Flat().ppv({2}).threads_per_worker(1));
  exec::GraphSettings graphs;
  graphs.mode = exec::GraphMode::kReplayForTests;
  graphs.option = field_name(Field::cuda_graphs);
  graphs.batch_size = batches[0].data.size(0);
  for (auto* stage : trainer.pipeline().stages()) stage->use_graphs(graphs);
  std::vector<std::string> warnings;
  FitHooks hooks;
  hooks.on_warning = [&](const std::string& line) { warnings.push_back(line); };
  trainer.fit(batches, 3, hooks);
  ASSERT_EQ(warnings.size(), 2u);
  for (int k = 0; k < 2; ++k) {
    EXPECT_NE(warnings[k].find("PipelineOptions::cuda_graphs: partition " + std::to_string(k + 1) + ", mini-batch 4 has input [3, "),
              std::string::npos) << warnings[k];
  }
  EXPECT_GT(trainer.pipeline().stage(0).graphed_passes(), 0);
}

TEST(PipelineTrainer, SaveAndLoadRestoreWeightsAndStep) {
  test::TempDir dir;
  const auto batches = synthetic_batches(5);
  PipelineTrainer a(user_lenet5(6), Flat().ppv({2}).threads_per_worker(1));
  for (const auto& b : batches) a.feed(b.x, b.target);
  EXPECT_NE(error_of<UsageError>([&] { a.save(dir.path()); }).find("call flush() first"), std::string::npos);
  a.flush();
  a.save(dir.path());
  PipelineTrainer b(user_lenet5(7), Flat().ppv({2}).threads_per_worker(1));
  b.load(dir.path());
  EXPECT_EQ(b.step(), 5);
  expect_same(b.parameters(), a.parameters());
  // Momentum buffers came along: one more identical step keeps them equal.
  a.feed(batches[0].x, batches[0].target);
  b.feed(batches[0].x, batches[0].target);
  a.flush();
  b.flush();
  expect_same(b.parameters(), a.parameters());
}

TEST(PipelineTrainer, MisuseGivesClearErrors) {
  // A register where the model allows none.
  EXPECT_NE(error_of<UsageError>([] { PipelineTrainer(user_lenet5(1, /*conv2_cut=*/false), Flat().ppv({2})); })
                .find("PipelineOptions::ppv 2: model user-lenet5: no register may follow layer 2 "
                      "(unit 2 (conv2) does not allow a register after it); a register may follow "
                      "layer 1, 3, 4"),
            std::string::npos);
  EXPECT_NE(error_of<UsageError>([] { PipelineTrainer(user_lenet5(1), Flat().ppv({5})); })
                .find("has 5 weight layers; a register may follow layer 1, 2, 3, 4"),
            std::string::npos);
  // A unit whose input does not fit the previous unit's output.
  EXPECT_NE(error_of<UsageError>([] {
              models::ModelBuilder("bad", {1, 32, 32, 10})
                  .add("conv1", nn::Sequential(nn::Conv2d(nn::Conv2dOptions(1, 6, 5)), nn::MaxPool2d(2)))
                  .add("conv2", nn::Sequential(nn::Conv2d(nn::Conv2dOptions(6, 16, 5)), nn::MaxPool2d(2)))
                  .add("fc1", nn::Sequential(nn::Flatten(), nn::Linear(256, 10)))
                  .build();
            }).find("model bad: unit 3 (fc1) cannot take the output of unit 2 (conv2), [2, 16, 5, 5]: "),
            std::string::npos);
  EXPECT_NE(error_of<UsageError>([] {
              models::ModelBuilder("bad", {3, 32, 32, 10}).add("conv1", nn::Conv2d(1, 6, 5)).build();
            }).find("unit 1 (conv1) cannot take the model input [2, 3, 32, 32]"),
            std::string::npos);
  EXPECT_NE(error_of<UsageError>([] {
              models::ModelBuilder("bad", {1, 4, 4, 10}).add("fc", nn::Sequential(nn::Flatten(), nn::Linear(16, 3))).build();
            }).find("the last unit (fc) produces [2, 3]"),
            std::string::npos);
  EXPECT_NE(error_of<UsageError>([] { models::ModelBuilder().add("a.b", nn::Linear(1, 1)); }).find("without '.'"),
            std::string::npos);
  // A step fed after shutdown.
  PipelineTrainer trainer(user_lenet5(1), Flat().ppv({2}).threads_per_worker(1));
  const auto b = synthetic_batches(1)[0];
  trainer.feed(b.x, b.target);
  std::vector<torch::data::Example<>> test_set{{b.x, b.target}};
  EXPECT_NE(error_of<UsageError>([&] { trainer.evaluate(test_set); })
                .find("evaluate: 1 mini-batch(es) are in the pipeline; call flush() first"),
            std::string::npos);
  EXPECT_EQ(trainer.finish().size(), 1u);
  EXPECT_NE(error_of<UsageError>([&] { trainer.feed(b.x, b.target); }).find("feed: the trainer was finished"),
            std::string::npos);
  // An executor asked for an absent device.
  EXPECT_NE(error_of<UsageError>([] {
              PipelineTrainer(user_lenet5(1), Flat().ppv({2}).devices({torch::kCPU, torch::Device("cuda:99")}));
            }).find("PipelineOptions::devices: cuda:99 is not present; this machine has "),
            std::string::npos);
  EXPECT_NE(error_of<UsageError>([] { PipelineTrainer(user_lenet5(1), Flat().ppv({2}).devices({torch::kCPU})); })
                .find("names 1 device(s) but the pipeline has 2 partitions"),
            std::string::npos);
  EXPECT_NE(error_of<UsageError>([] { PipelineTrainer(user_lenet5(1), Flat().schedule("hybrid")); })
                .find("hybrid needs hybrid_switch"),
            std::string::npos);
  EXPECT_NE(error_of<UsageError>([] { PipelineTrainer(user_lenet5(1), Flat().executor("gpu")); })
                .find("PipelineOptions::executor 'gpu'"),
            std::string::npos);
}

TEST(PipelineTrainer, OtherSchedulesAndMitigationsThroughTheApi) {
  const auto stash = PipelineTrainer(user_lenet5(1), Flat().ppv({1, 3}).schedule("1f1b-stash")).info();
  EXPECT_EQ(stash.staleness, (std::vector<int>{2, 1, 0}));
  EXPECT_EQ(stash.weight_versions, (std::vector<int>{3, 2, 1}));
  const auto gpipe = PipelineTrainer(user_lenet5(1), Flat().ppv({1, 3}).schedule("gpipe").micro_batches(4)).info();
  EXPECT_EQ(gpipe.staleness, (std::vector<int>{0, 0, 0}));
  EXPECT_EQ(gpipe.lag, 0);
  PipelineTrainer mitigated(user_lenet5(1), Flat().ppv({1, 3}).weight_prediction(true).spike_compensation(true)
                                                .delay_aware_lr(true));
  EXPECT_TRUE(mitigated.pipeline().stage(0).optimizer().options().weight_prediction());
  EXPECT_NE(error_of<UsageError>([] { PipelineTrainer(user_lenet5(1), Flat().ppv({2}).micro_batches(2)); })
                .find("PipelineOptions::micro_batches 2 applies to schedule gpipe only"),
            std::string::npos);
  EXPECT_NE(error_of<UsageError>([] { PipelineTrainer(user_lenet5(1), Flat().schedule("pipedream")); })
                .find("PipelineOptions::schedule 'pipedream': expected stale, sequential, hybrid, gpipe or 1f1b-stash"),
            std::string::npos);
}

TEST(PipelineTrainer, WorkerFailureReachesFeedWithoutHanging) {
  auto calls = std::make_shared<int>(0);  // the last worker alone calls the loss
  auto failing = [calls](const torch::Tensor& out, const torch::Tensor& y) {
    if (++*calls == 4) throw std::runtime_error("loss exploded");
    return exec::cross_entropy_loss(out, y);
  };
  PipelineTrainer trainer(user_lenet5(2),
                          Flat().ppv({1, 3}).executor("threads").threads_per_worker(1).loss(failing));
  const auto batches = synthetic_batches(12);
  std::string error;
  try {
    for (const auto& b : batches) trainer.feed(b.x, b.target);
  } catch (const RuntimeError& e) {
    error = e.what();
  }
  EXPECT_NE(error.find("partition 3, mini-batch 3: loss exploded"), std::string::npos) << error;
  // The failure is sticky: every use but load() names it (a save would count mini-batches
  // that were never trained).
  for (const auto& use : std::vector<std::function<void()>>{
           [&] { trainer.feed(batches[0].x, batches[0].target); },
           [&] { trainer.save(test::TempDir().path()); },
           [&] { trainer.predict(batches[0].x); }}) {
    try {
      use();
      ADD_FAILURE() << "no error after the failure";
    } catch (const RuntimeError& e) {
      EXPECT_NE(std::string(e.what()).find("failed earlier (partition 3, mini-batch 3: loss exploded)"),
                std::string::npos) << e.what();
    }
  }
}

TEST(PipelineTrainer, BalancedPartitionsAndHybridSwitch) {
  // Balanced by parameters (fc1 holds 48k of 62k).
  PipelineTrainer balanced(user_lenet5(1), Flat().partitions(3).balance(Balance::kParams));
  EXPECT_EQ(balanced.plan().num_partitions(), 3);
  EXPECT_EQ(balanced.plan().ppv, (std::vector<int>{2, 3}));
  // Hybrid: stale for steps [0, 4), sequential after; equals the two segments run by hand.
  const auto batches = synthetic_batches(8);
  const auto options = Flat().ppv({2}).schedule("hybrid").hybrid_switch_step(4).threads_per_worker(1);
  PipelineTrainer reference(user_lenet5(8), options);
  exec::SegmentContext context;
  context.input = [&](int64_t t) { return batches[t]; };
  EXPECT_NE(error_of<UsageError>([&] { reference.run_segment(2, 6, context); })
            .find("straddles the hybrid switch at step 4"),
            std::string::npos);
  reference.run_segment(0, 4, context);
  reference.run_segment(4, 8, context);
  PipelineTrainer stepped(user_lenet5(8), options);
  for (const auto& b : batches) stepped.feed(b.x, b.target);
  stepped.finish();
  expect_same(stepped.parameters(), reference.parameters());
}

// A unit that notes the intra-op thread count of each forward it runs, in order.
struct ThreadProbeImpl : nn::Module {
  nn::Linear fc{nullptr};
  std::vector<int>* seen;
  ThreadProbeImpl(int64_t in, int64_t out, std::vector<int>* seen_by) : seen(seen_by) {
    fc = register_module("fc", nn::Linear(in, out));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    seen->push_back(at::get_num_threads());  // one partition's forwards run on one thread
    return fc(x.flatten(1));
  }
};
TORCH_MODULE(ThreadProbe);

// Pipelined, each of the 2 workers has half the threads; after the hybrid switch one
// partition works at a time, with all of them. Emulated runs the same counts.
TEST(PipelineTrainer, TheSequentialPhaseGivesEachPartitionEveryThread) {
  for (const char* executor : {"threads", "emulated"}) {
    std::vector<int> first, last;
    auto model = models::ModelBuilder("probes", {1, 32, 32, 10})
                     .add("first", ThreadProbe(1024, 16, &first), models::UnitOptions().cut_after(true))
                     .add("last", ThreadProbe(16, 10, &last))
                     .build();
    PipelineTrainer trainer(model, Flat().ppv({1}).threads(2).executor(executor).schedule("hybrid")
                                       .hybrid_switch_step(3));
    first.clear();  // the shape checks of building it
    last.clear();
    for (const auto& b : synthetic_batches(6)) trainer.feed(b.x, b.target);
    trainer.finish();
    const std::vector<int> expected = {1, 1, 1, 2, 2, 2};
    EXPECT_EQ(first, expected) << executor;
    EXPECT_EQ(last, expected) << executor;
  }
}

// With hybrid_norm_reset the conv weights (each feeds a batch norm) start the sequential phase
// at their initial norms. The phase's learning rate is 0, so the weights after it are the
// reset ones.
TEST(PipelineTrainer, HybridNormResetRestoresConvNormsAtTheSwitch) {
  const auto batches = synthetic_batches(6);
  auto conv_norms = [](const std::vector<torch::Tensor>& params) {
    std::vector<double> norms;
    for (const auto& p : params) {
      if (p.dim() == 4) norms.push_back(p.norm().item<double>());
    }
    return norms;
  };
  auto train = [&](bool reset) {
    torch::manual_seed(3);
    PipelineTrainer trainer(models::make_model("resnet20", models::InputShape{}),
                            Flat().ppv({7}).schedule("hybrid").hybrid_switch_step(5)
                                .hybrid_norm_reset(reset).threads_per_worker(1)
                                .lr_at([](int64_t t) { return t < 5 ? 0.5 : 0.0; }));
    const auto initial = conv_norms(trainer.parameters());
    exec::SegmentContext context;
    context.input = [&](int64_t t) { return batches[t]; };
    trainer.run_segment(0, 5, context);
    const auto stale = conv_norms(trainer.parameters());
    trainer.run_segment(5, 6, context);
    return std::make_tuple(initial, stale, conv_norms(trainer.parameters()));
  };
  const auto [initial, stale, after] = train(true);
  ASSERT_EQ(initial.size(), 19u);
  for (size_t i = 0; i < initial.size(); ++i) EXPECT_NEAR(after[i], initial[i], 1e-4 * initial[i]) << i;
  EXPECT_GT(std::abs(stale[0] - initial[0]), 1e-3);  // the stale phase moved them
  const auto [initial_plain, stale_plain, after_plain] = train(false);
  EXPECT_NEAR(after_plain[0], stale_plain[0], 1e-6);  // without the flag, nothing restores them
  EXPECT_NE(error_of<UsageError>([] { PipelineTrainer(models::make_model("resnet20", models::InputShape{}),
                                                Flat().ppv({7}).hybrid_norm_reset(true)); })
                .find("PipelineOptions::hybrid_norm_reset needs schedule hybrid"),
            std::string::npos);
}

}  // namespace
}  // namespace stalepipe
