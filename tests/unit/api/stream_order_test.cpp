// The order of work between streams, checked on the CPU with support/stream_checker.h: every
// tensor that crosses from one partition's stream (or the caller's, or the batches' copy
// stream) to another is read after an event that follows its write. On a GPU a missing wait
// reads half-written memory; here the checker reports it although the work ran in order.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "exec/worker_impl.h"
#include "stalepipe/api/ahead_batches.h"
#include "stalepipe/api/loader_source.h"
#include "stalepipe/stalepipe.h"
#include "support/error_of.h"
#include "support/pipeline_runs.h"
#include "support/stream_checker.h"
#include "support/temp_dir.h"
#include "support/test_device.h"

namespace stalepipe {
namespace {

using test::StreamChecker;
using ::testing::IsEmpty;
using ::testing::SizeIs;

struct Streams {
  std::unique_ptr<exec::DeviceStream> a = exec::make_stream(torch::kCPU);
  std::unique_ptr<exec::DeviceStream> b = exec::make_stream(torch::kCPU);
};

torch::Tensor written_on(exec::DeviceStream& stream) {
  const auto on_stream = stream.enter();
  return torch::ones({4}).mul_(2);
}

void read_on(exec::DeviceStream& stream, const torch::Tensor& x) {
  const auto on_stream = stream.enter();
  (void)x.neg();
}

TEST(StreamChecker, ReportsAReadOnAnotherStreamWithNoWaitForTheWrite) {
  const StreamChecker checker;
  Streams s;
  const torch::Tensor x = written_on(*s.a);
  const auto early = s.a->record();  // before the write below
  read_on(*s.b, x);
  ASSERT_THAT(checker.races(), SizeIs(1));
  EXPECT_NE(checker.races()[0].find("aten::neg on stream 2 reads what aten::mul_ wrote on stream 1"), std::string::npos)
      << checker.races()[0];
  const torch::Tensor y = written_on(*s.a);
  s.b->wait(early.get());
  read_on(*s.b, y);
  EXPECT_THAT(checker.races(), SizeIs(1)) << "one kind of race, seen twice";
  EXPECT_NE(checker.races()[0].find("(2x)"), std::string::npos) << checker.races()[0];
}

TEST(StreamChecker, AnEventAfterTheWriteAJoinOrAHostSynchronisationOrdersIt) {
  const StreamChecker checker;
  Streams s;
  const torch::Tensor x = written_on(*s.a);
  s.b->wait(s.a->record().get());
  read_on(*s.b, x);
  const torch::Tensor y = written_on(*s.a);
  s.a->synchronize();
  (void)y.neg();  // the default stream, after the host waited
  const torch::Tensor z = torch::ones({4}).mul_(3);  // the default stream
  s.b->join_current();
  read_on(*s.b, z);
  exec::current_stream(torch::kCPU)->record()->synchronize();
  EXPECT_THAT(checker.races(), IsEmpty());
}

TEST(StreamChecker, ReportsAWriteOnAnotherStreamWithNoWaitForAnEarlierRead) {
  const StreamChecker checker;
  Streams s;
  const torch::Tensor x = written_on(*s.a);
  s.b->wait(s.a->record().get());
  read_on(*s.b, x);
  {
    const auto on_a = s.a->enter();
    x.mul_(3);  // may overwrite x while stream b still reads it
  }
  ASSERT_THAT(checker.races(), SizeIs(1));
  EXPECT_NE(checker.races()[0].find("aten::mul_ on stream 1 writes what aten::neg read on stream 2, with no wait for that read"),
            std::string::npos)
      << checker.races()[0];
  s.b->wait(s.a->record().get());
  read_on(*s.b, x);
  s.a->wait(s.b->record().get());
  {
    const auto on_a = s.a->enter();
    x.mul_(3);
  }
  EXPECT_THAT(checker.races(), SizeIs(1)) << "the read before the wait was ordered";
}

TEST(StreamChecker, ReportsMemoryAnotherStreamUsedFreedWithNoHoldThenReusedByItsOwner) {
  const StreamChecker checker;
  Streams s;
  const auto made_read_freed = [&](bool hold, bool wait) {
    torch::Tensor x = written_on(*s.a);
    s.b->wait(s.a->record().get());
    if (hold) s.b->hold(x);
    read_on(*s.b, x);
    const auto read = s.b->record();
    x = torch::Tensor();  // freed: on a GPU its memory goes back to stream a
    if (wait) s.a->wait(read.get());
    (void)written_on(*s.a);  // stream a's next allocation may get that memory
  };
  made_read_freed(/*hold=*/true, /*wait=*/false);
  made_read_freed(/*hold=*/false, /*wait=*/true);
  EXPECT_THAT(checker.races(), IsEmpty());
  made_read_freed(/*hold=*/false, /*wait=*/false);
  ASSERT_THAT(checker.races(), SizeIs(1));
  EXPECT_NE(checker.races()[0].find("memory aten::neg on stream 2 used is freed and reused on stream 1, which owns it, "
                                    "with no hold by stream 2"),
            std::string::npos)
      << checker.races()[0];
}

// The step interface: the caller writes each batch on its stream while the pipeline runs; a
// failed run's queued work ends before load() replaces the weights.
exec::LossFn nan_at(int64_t bad) {
  auto calls = std::make_shared<int64_t>(0);
  return [calls, bad](const torch::Tensor& out, const torch::Tensor& y) {
    const torch::Tensor loss = exec::cross_entropy_loss(out, y);
    return (*calls)++ == bad ? loss * std::numeric_limits<float>::quiet_NaN() : loss;
  };
}

TEST(StreamOrder, FeedAFailureAndALoadOrderTheirWorkOnEveryExecutor) {
  for (const char* executor : {"emulated", "threads"}) {
    const StreamChecker checker;
    const test::TempDir dir;
    Options o;
    o.optimizer().lr_schedule(LrScheduleKind::kConstant).loss(nan_at(5));
    o.pipeline().ppv({1, 3}).executor(exec::executor_from_name(executor)).threads_per_worker(1);
    torch::manual_seed(2);
    PipelineTrainer trainer(models::make_model("lenet5", models::InputShape{}), o);
    trainer.save(dir.path());
    auto feed = [&](int64_t i) {
      torch::Tensor x = torch::randn({8, 1, 32, 32});
      x.mul_(0.5);  // written by the caller while the pipeline runs
      return trainer.feed(x, torch::full({8}, i % 10, torch::kLong));
    };
    EXPECT_NE(test::error_of<DivergedError>([&] {
                for (int64_t i = 0; i < 10; ++i) feed(i);
                trainer.flush();
              }).find("mini-batch 5"),
              std::string::npos);
    trainer.load(dir.path());
    for (int64_t i = 0; i < 4; ++i) feed(i);
    trainer.finish();
    EXPECT_THAT(checker.races(), IsEmpty()) << executor;
  }
}

// Replicas split batches that were copied (and normalised) ahead on the copy stream, and sum
// their gradients across their streams; evaluation reads batches from the copy stream too.
TEST(StreamOrder, ReplicasAndEvaluationOrderTheirWorkOnEveryExecutor) {
  const data::Loader floats = test::synthetic_loader(64, 16, 7);
  const data::Loader pixels(floats.shared_source(), data::LoaderOptions(floats.options()).raw_pixels(true));
  for (const char* executor : {"emulated", "threads"}) {
    const StreamChecker checker;
    Options o;
    o.optimizer().lr(0.05).lr_schedule(LrScheduleKind::kConstant);
    o.pipeline().ppv({2}).replicas(2).threads_per_worker(1).executor(exec::executor_from_name(executor));
    o.data().batch_size(16);
    o.run().epochs(2).seed(7);
    torch::manual_seed(7);
    PipelineTrainer trainer(models::make_model("lenet5", models::InputShape{}), o, pixels.batches_per_epoch());
    LoaderSource train(pixels), test(pixels);
    const FitResult result = trainer.fit(train, {}, &test);
    EXPECT_GT(result.epochs.size(), 0u);
    EXPECT_THAT(checker.races(), IsEmpty()) << executor;
  }
}

// Batches made on threads of their own, as the Python package's Dataset and DataLoader sources
// make them (AheadBatches): a reader thread writes them on its current stream while the
// pipeline runs, and partition 1's stream reads them.
class MadeOnThreads final : public AheadBatches {
 public:
  MadeOnThreads() : AheadBatches(/*threads=*/2, /*ahead=*/3) {}
  ~MadeOnThreads() override { stop_reading(); }
  int64_t batches_per_epoch() const override { return 8; }
  void start_epoch(int64_t, int64_t first) override { start_reading(first); }

 private:
  exec::Input produce(int64_t index) override {
    if (index >= batches_per_epoch()) return {};
    StreamChecker::watch_this_thread();
    torch::Tensor x = torch::ones({8, 1, 32, 32});
    x.mul_(0.1 * static_cast<double>(index % 5));
    return {x, torch::full({8}, index % 10, torch::kLong)};
  }
};

TEST(StreamOrder, BatchesMadeAheadOnThreadsAreReadAfterTheirWrites) {
  for (const char* executor : {"emulated", "threads"}) {
    const StreamChecker checker;
    Options o;
    o.optimizer().lr_schedule(LrScheduleKind::kConstant);
    o.pipeline().ppv({1, 3}).executor(exec::executor_from_name(executor)).threads_per_worker(1);
    o.run().epochs(1);
    torch::manual_seed(2);
    PipelineTrainer trainer(models::make_model("lenet5", models::InputShape{}), o, 8);
    MadeOnThreads batches;
    trainer.fit(batches);
    EXPECT_THAT(checker.races(), IsEmpty()) << executor;
  }
}

// A replica whose gradient sum was cut short by a failure (the summing replica's stream may
// still have copies queued into its gradients) is cleared only after every partition's stream
// is done: here replica 2's stream writes into replica 1's gradients, as such a sum does, and
// the cleanup of the failure follows.
TEST(StreamOrder, TheCleanupAfterAFailureWaitsForEveryReplicasStreamBeforeItClearsAny) {
  const data::Loader loader = test::synthetic_loader(64, 16, 7);
  const StreamChecker checker;
  Options o;
  o.optimizer().lr(0.05).lr_schedule(LrScheduleKind::kConstant);
  o.pipeline().ppv({2}).replicas(2).threads_per_worker(1).executor(exec::ExecutorKind::kThreads);
  o.data().batch_size(16);
  o.run().epochs(1000).max_steps(6).seed(7);
  torch::manual_seed(7);
  PipelineTrainer trainer(models::make_model("lenet5", models::InputShape{}), o, loader.batches_per_epoch());
  exec::GraphSettings graphs;  // armed graphs keep the gradients and zero them in place
  graphs.mode = exec::GraphMode::kReplayForTests;
  graphs.batch_size = 8;        // a replica's slice
  std::vector<exec::Stage*> stages;
  for (exec::Pipeline* pipeline : trainer.pipelines()) {
    for (exec::Stage* stage : pipeline->stages()) stages.push_back(stage);
  }
  // Partition 1 of each replica (the last ones' loss scale is a slice's, which no graph serves).
  for (size_t i = 0; i < stages.size(); i += 2) stages[i]->use_graphs(graphs);
  LoaderSource source(loader);
  trainer.fit(source);
  ASSERT_GT(stages[0]->graphed_passes(), 0);
  exec::Stage& mine = *stages[0];
  exec::Stage& summer = *stages[2];  // replica 2's partition 1
  summer.stream().wait(mine.stream().record().get());
  {
    const auto on_stream = summer.stream().enter();
    torch::NoGradGuard no_grad;
    for (const torch::Tensor& p : mine.optimizer().params()) p.grad().add_(1);
  }
  exec::detail::clear_in_flight(stages);
  EXPECT_THAT(checker.races(), IsEmpty());
}

// The race probe: the threads executor, whose partitions overlap, trains what the emulated
// executor, which runs one operation at a time, trains, bit for bit: eagerly, with graphs,
// in bf16 and with two replicas. On the CPU, LeNet-5 for a few steps under the stream checker
// (graphs: the test double); with STALEPIPE_TEST_DEVICE=cuda:N (scripts/gpu-check.sh graphs)
// ResNet-20 on two partitions of that GPU for 60 steps with deterministic cuDNN, where a
// missing wait shows as other bits.
struct Probe {
  const char* name;
  bool graphs = false;
  exec::Precision precision = exec::Precision::kFp32;
  int replicas = 1;
};

std::vector<torch::Tensor> probe_run(const Probe& p, const char* executor, const data::Loader& loader) {
  const torch::Device device = test::test_device();
  const bool gpu = device.is_cuda();
  Options o;
  o.optimizer().lr(0.05).lr_schedule(LrScheduleKind::kConstant);
  o.pipeline()
      .ppv({gpu ? 10 : 2})
      .replicas(p.replicas)
      .precision(p.precision)
      .cuda_graphs(p.graphs && gpu)
      .threads_per_worker(1)
      .executor(exec::executor_from_name(executor))
      .devices({device, device});
  o.data().batch_size(loader.options().batch_size());
  o.run().epochs(1000).max_steps(gpu ? 60 : 6).seed(7);
  torch::manual_seed(7);
  PipelineTrainer trainer(models::make_model(gpu ? "resnet20" : "lenet5", models::InputShape{}), o,
                          loader.batches_per_epoch());
  if (p.graphs && !gpu) {
    exec::GraphSettings graphs;
    graphs.mode = exec::GraphMode::kReplayForTests;
    graphs.batch_size = loader.options().batch_size();
    for (auto* stage : trainer.pipeline().stages()) stage->use_graphs(graphs);
  }
  LoaderSource source(loader, device);
  trainer.fit(source);
  std::vector<torch::Tensor> state;
  int64_t graphed = 0;
  for (exec::Pipeline* pipeline : trainer.pipelines()) {
    for (auto* stage : pipeline->stages()) {
      graphed += stage->graphed_passes();
      for (const auto& t : stage->module()->parameters()) state.push_back(t.detach().cpu());
      for (const auto& t : stage->module()->buffers()) state.push_back(t.detach().cpu());
    }
  }
  EXPECT_EQ(graphed > 0, p.graphs) << p.name << ", " << executor;
  return state;
}

TEST(StreamOrder, RaceProbeThreadsEqualEmulatedInEveryVariant) {
  const bool gpu = test::test_device().is_cuda();
  const test::DeterministicCuDNN deterministic;
  const data::Loader loader = test::synthetic_loader(gpu ? 512 : 64, gpu ? 64 : 16, 7);
  const Probe probes[] = {{"eager"}, {"graphs", true}, {"bf16", false, exec::Precision::kBf16}, {"replicas", false, exec::Precision::kFp32, 2}};
  for (const Probe& p : probes) {
    const StreamChecker checker;
    const auto threads = probe_run(p, "threads", loader);
    const auto emulated = probe_run(p, "emulated", loader);
    EXPECT_TRUE(test::all_equal(threads, emulated)) << p.name;
    EXPECT_THAT(checker.races(), IsEmpty()) << p.name;
  }
}

}  // namespace
}  // namespace stalepipe
