// Replicas of the pipeline in this process (PipelineOptions::replicas): the executors agree
// bit for bit, every replica holds the same weights, R replicas at global batch B train what
// one pipeline at B trains (up to summation order), and a resumed run continues exactly.
#include <gtest/gtest.h>

#include "stalepipe/api/loader_source.h"
#include "stalepipe/common/slices.h"
#include "stalepipe/stalepipe.h"
#include "support/error_of.h"
#include "support/pipeline_runs.h"
#include "support/temp_dir.h"

namespace stalepipe {
namespace {

struct ReplicaRun {
  std::string model = "lenet5";
  std::vector<int> ppv = {2};
  int replicas = 2;
  std::string executor = "threads";
  std::string schedule = "stale";
  int micro_batches = 1;
  int64_t steps = 12;
  int64_t batch_size = 16;
  int64_t train_size = 96;
  double lr = 0.05;
  int64_t checkpoint_every = 0;  // also drains there
  bool weight_prediction = false;
};

Options options_of(const ReplicaRun& s) {
  Options o;
  o.optimizer().lr(s.lr).lr_schedule(LrScheduleKind::kConstant).weight_prediction(s.weight_prediction);
  o.pipeline()
      .ppv(s.ppv)
      .replicas(s.replicas)
      .threads_per_worker(1)
      .micro_batches(s.micro_batches)
      .executor(exec::executor_from_name(s.executor))
      .schedule(schedule::schedule_from_name(s.schedule));
  o.data().batch_size(s.batch_size);
  o.run().epochs(1000).max_steps(s.steps).seed(7).checkpoint_every(s.checkpoint_every);
  return o;
}

models::Model model_of(const ReplicaRun& s) {
  torch::manual_seed(7);
  return models::make_model(s.model, models::InputShape{});
}

// Every replica's parameters and buffers, replica after replica, and the losses reported.
struct Trained {
  std::vector<std::vector<torch::Tensor>> replicas;
  std::vector<StepLoss> losses;
};

std::vector<torch::Tensor> state_of(exec::Pipeline& pipeline) {
  std::vector<torch::Tensor> state = pipeline.parameters();
  for (auto* stage : pipeline.stages()) {
    for (const auto& b : stage->module()->buffers()) state.push_back(b.detach().clone());
  }
  return state;
}

Trained collect(PipelineTrainer& trainer, std::vector<StepLoss> losses) {
  Trained t;
  for (exec::Pipeline* p : trainer.pipelines()) t.replicas.push_back(state_of(*p));
  t.losses = std::move(losses);
  return t;
}

Trained train(const ReplicaRun& s) {
  const data::Loader loader = test::synthetic_loader(s.train_size, s.batch_size, 7);
  LoaderSource source(loader);
  PipelineTrainer trainer(model_of(s), options_of(s), loader.batches_per_epoch());
  std::vector<StepLoss> losses;
  FitHooks hooks;
  hooks.on_step = [&](const StepLoss& l) { losses.push_back(l); };
  trainer.fit(source, hooks);
  return collect(trainer, losses);
}

void expect_same(const Trained& a, const Trained& b) {
  ASSERT_EQ(a.replicas.size(), b.replicas.size());
  for (size_t r = 0; r < a.replicas.size(); ++r) EXPECT_TRUE(test::all_equal(a.replicas[r], b.replicas[r])) << "replica " << r;
  ASSERT_EQ(a.losses.size(), b.losses.size());
  for (size_t i = 0; i < a.losses.size(); ++i) {
    EXPECT_EQ(a.losses[i].step, b.losses[i].step);
    EXPECT_EQ(a.losses[i].loss, b.losses[i].loss) << "step " << a.losses[i].step;
    EXPECT_EQ(a.losses[i].correct, b.losses[i].correct);
    EXPECT_EQ(a.losses[i].samples, b.losses[i].samples);
  }
}

// The replicas' weights, buffers included after the drain, are one set of bits.
void expect_replicas_equal(const Trained& t) {
  for (size_t r = 1; r < t.replicas.size(); ++r) EXPECT_TRUE(test::all_equal(t.replicas[0], t.replicas[r])) << "replica " << r;
}

TEST(Replicas, ThreadsEqualEmulatedAndEveryReplicaHoldsTheSameWeights) {
  ReplicaRun s;
  const Trained threads = train(s);
  s.executor = "emulated";
  const Trained emulated = train(s);
  expect_same(threads, emulated);
  expect_replicas_equal(threads);
  ASSERT_EQ(threads.losses.size(), 12u);
  for (const StepLoss& l : threads.losses) EXPECT_EQ(l.samples, 16) << "the whole mini-batch's loss, step " << l.step;
}

TEST(Replicas, BatchNormStatisticsComeFromTheFirstReplicaAtEachDrain) {
  const test::RunSpec small = test::small_resnet20({8});
  ReplicaRun s;
  s.model = "resnet20";
  s.ppv = small.ppv;
  s.batch_size = 8;
  s.train_size = 24;
  s.steps = 6;
  const Trained threads = train(s);
  s.executor = "emulated";
  expect_same(threads, train(s));
  expect_replicas_equal(threads);
}

TEST(Replicas, FourReplicasGiveTheSameBitsRunAfterRunAndOnEitherExecutor) {
  ReplicaRun s;
  s.replicas = 4;
  s.batch_size = 18;  // slices of 5, 5, 4, 4
  const Trained a = train(s), b = train(s);
  expect_same(a, b);
  expect_replicas_equal(a);
  s.executor = "emulated";
  expect_same(a, train(s));
}

TEST(Replicas, EveryScheduleAndAMitigationRunWithReplicas) {
  ReplicaRun s;
  s.schedule = "gpipe";
  s.micro_batches = 2;
  const Trained gpipe = train(s);
  s.executor = "emulated";
  expect_same(gpipe, train(s));
  ReplicaRun stash;
  stash.schedule = "1f1b-stash";
  stash.weight_prediction = true;
  const Trained threads = train(stash);
  stash.executor = "emulated";
  expect_same(threads, train(stash));
  expect_replicas_equal(threads);
  ReplicaRun h;
  h.schedule = "hybrid";
  Options o = options_of(h);
  o.pipeline().hybrid_switch(TrainingPoint::steps(6));
  const data::Loader loader = test::synthetic_loader(h.train_size, h.batch_size, 7);
  LoaderSource source(loader);
  PipelineTrainer trainer(model_of(h), o, loader.batches_per_epoch());
  trainer.fit(source);
  const Trained hybrid = collect(trainer, {});
  expect_replicas_equal(hybrid);
}

// Without batch norm the replicas' summed gradient is the one pipeline's up to the order of
// the additions: after 200 steps the weights agree to float rounding's drift. The losses agree
// to 1e-4 of themselves, or to 1e-7 near zero: a loss is a log-sum-exp less a logit, each
// rounded at the logits' scale, so a loss of 2e-5 moves by a few of their ulps (LibTorch 2.11's
// kernels move it by 4e-9).
TEST(Replicas, TwoReplicasTrainWhatOnePipelineTrainsAtTheSameGlobalBatch) {
  ReplicaRun s;
  s.steps = 200;
  s.batch_size = 32;
  s.train_size = 4096;
  s.lr = 0.01;
  const Trained two = train(s);
  s.replicas = 1;
  const Trained one = train(s);
  EXPECT_TRUE(test::all_close(two.replicas[0], one.replicas[0], 1e-4, 1e-6));
  ASSERT_EQ(two.losses.size(), one.losses.size());
  for (size_t i = 0; i < one.losses.size(); ++i) {
    EXPECT_NEAR(two.losses[i].loss, one.losses[i].loss, 1e-4 * one.losses[i].loss + 1e-7) << "step " << i;
  }
}

TEST(Replicas, TheStalenessIsTheOnePipelines) {
  ReplicaRun s;
  s.ppv = {1, 3};
  PipelineTrainer two(model_of(s), options_of(s), 6);
  s.replicas = 1;
  PipelineTrainer one(model_of(s), options_of(s), 6);
  EXPECT_EQ(two.info().staleness, one.info().staleness);
  EXPECT_EQ(two.info().staleness, (std::vector<int>{3, 1, 0}));
  EXPECT_EQ(two.info().replicas, 2);
}

TEST(Replicas, AResumedRunEqualsAnUninterruptedOne) {
  test::TempDir dir;
  ReplicaRun s;
  s.steps = 12;
  s.checkpoint_every = 6;  // the uninterrupted run drains where the other stops
  const Trained whole = train(s);
  const data::Loader loader = test::synthetic_loader(s.train_size, s.batch_size, 7);
  {
    Options o = options_of(s);
    o.run().stop_at_step(6);
    LoaderSource source(loader);
    PipelineTrainer first(model_of(s), o, loader.batches_per_epoch());
    FitHooks hooks;
    hooks.on_checkpoint = [&](int64_t) { first.save(dir.file("run")); };
    ASSERT_TRUE(first.fit(source, hooks).stopped);
  }
  // A fresh trainer: replica 1 starts from other weights than replica 0's checkpoint until the
  // load gives it replica 0's state.
  ReplicaRun other = s;
  LoaderSource source(loader);
  torch::manual_seed(99);
  PipelineTrainer second(models::make_model(s.model, models::InputShape{}), options_of(other), loader.batches_per_epoch());
  second.load(dir.file("run"));
  second.fit(source);
  const Trained resumed = collect(second, {});
  for (size_t r = 0; r < whole.replicas.size(); ++r) EXPECT_TRUE(test::all_equal(whole.replicas[r], resumed.replicas[r])) << "replica " << r;
}

TEST(Replicas, ImpossibleSettingsAreRefusedNamingTheField) {
  ReplicaRun s;
  s.replicas = 0;
  EXPECT_NE(test::error_of<UsageError>([&] { PipelineTrainer(model_of(s), options_of(s), 6); })
                .find("PipelineOptions::replicas must be >= 1, got 0"),
            std::string::npos);
  s.replicas = 3;
  s.batch_size = 2;
  EXPECT_NE(test::error_of<UsageError>([&] { PipelineTrainer(model_of(s), options_of(s), 6); })
                .find("PipelineOptions::replicas 3 x 1 micro-batch(es): more slices than the batch size of 2"),
            std::string::npos);
}

// A unit that is not Cloneable cannot be copied for a second replica in this process.
struct Opaque : torch::nn::Module {
  Opaque() { weight = register_parameter("weight", torch::ones({1})); }
  torch::Tensor forward(torch::Tensor x) { return x * weight; }
  torch::Tensor weight;
};

TEST(Replicas, AModelThatCannotBeCopiedIsRefusedNamingTheUnit) {
  models::ModelBuilder b("opaque", models::InputShape{1, 4, 4, 2});
  b.add("flat", torch::nn::Flatten());
  b.add("scale", std::make_shared<Opaque>());
  b.add("fc", torch::nn::Linear(16, 2));
  ReplicaRun s;
  s.ppv = {};
  EXPECT_NE(test::error_of<UsageError>([&] { PipelineTrainer(b.build(), options_of(s), 6); })
                .find("unit scale cannot be copied for a second replica in this process"),
            std::string::npos);
}

TEST(ReplicaData, ALoaderShardHoldsItsSliceOfTheWholeBatch) {
  const data::Loader whole = test::synthetic_loader(50, 18, 3);
  for (int r = 0; r < 4; ++r) {
    const data::Loader shard(whole.shared_source(), data::LoaderOptions(whole.options()).shard_index(r).shard_count(4));
    for (int64_t b : {0, 2}) {  // a whole batch and the last, partial one (14 samples)
      const data::Batch all = whole.batch(1, b), mine = shard.batch(1, b);
      const auto [begin, end] = slice_range(all.x.size(0), 4, r);
      EXPECT_TRUE(torch::equal(mine.x, all.x.narrow(0, begin, end - begin))) << "shard " << r << " batch " << b;
      EXPECT_TRUE(torch::equal(mine.y, all.y.narrow(0, begin, end - begin)));
      EXPECT_EQ(mine.samples, all.x.size(0));
    }
  }
  EXPECT_EQ(slice_range(18, 4, 0), (std::pair<int64_t, int64_t>{0, 5}));
  EXPECT_EQ(slice_range(18, 4, 3), (std::pair<int64_t, int64_t>{14, 18}));
  const data::Loader tiny(whole.shared_source(), data::LoaderOptions(whole.options()).batch_size(16).shard_count(4));
  EXPECT_NE(test::error_of<UsageError>([&] { tiny.batch(0, 3); }).find("has 2 samples, fewer than the 4 shards"),
            std::string::npos);
}

}  // namespace
}  // namespace stalepipe
