// Failures, stops and odd sizes: the pipeline always ends, consistent, with the cause named.
#include <atomic>
#include <cmath>
#include <future>
#include <random>

#include <gtest/gtest.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/linear.h>

#include "stalepipe/common/error.h"
#include "stalepipe/exec/executor.h"

namespace stalepipe::exec {
namespace {

// Throws on its n-th forward call (counting from 0); n < 0 never throws.
struct FailingImpl : torch::nn::Module {
  explicit FailingImpl(int fail_at) : fail_at(fail_at) {}
  torch::Tensor forward(torch::Tensor x) {
    if (calls++ == fail_at) throw std::runtime_error("injected failure");
    return x;
  }
  int fail_at;
  int calls = 0;
};

struct TinyPipeline {
  std::vector<std::unique_ptr<Stage>> stages;
  std::vector<Stage*> ptrs;
};

// K stages of Linear(4,4)+tanh, the last ending in 3 classes; `failing` stage throws at `fail_at`.
TinyPipeline tiny(int K, int failing = -1, int fail_at = -1) {
  torch::manual_seed(0);
  TinyPipeline p;
  for (int k = 0; k < K; ++k) {
    torch::nn::Sequential seq;
    seq->push_back(torch::nn::Linear(4, k == K - 1 ? 3 : 4));
    if (k != K - 1) seq->push_back(torch::nn::Tanh());
    if (k == failing) seq->push_back(std::make_shared<FailingImpl>(fail_at));
    p.stages.push_back(std::make_unique<Stage>(seq, StageOptions(k, K)));
    p.ptrs.push_back(p.stages.back().get());
  }
  return p;
}

SegmentContext tiny_context(int64_t batch, std::atomic<int>* updates = nullptr) {
  SegmentContext c;
  c.input = [batch](int64_t t) {
    return Input{torch::ones({batch, 4}) * static_cast<double>(t % 5), torch::arange(batch) % 3};
  };
  c.lr = [updates](int64_t) {
    if (updates) ++*updates;
    return 0.01;
  };
  return c;
}

TEST(Robustness, WorkerFailureNamesPartitionAndMiniBatch) {
  for (const std::string executor : {"emulated", "threads"}) {
    auto p = tiny(3, /*failing=*/1, /*fail_at=*/4);
    const auto s = schedule::make_stale(3, 0, 10);
    try {
      make_executor(executor_from_name(executor))->run(s, p.ptrs, tiny_context(2));
      FAIL() << executor << ": no exception";
    } catch (const RuntimeError& e) {
      EXPECT_NE(std::string(e.what()).find("partition 2, mini-batch 4: injected failure"), std::string::npos)
          << executor << ": " << e.what();
    }
    for (auto* stage : p.ptrs) EXPECT_EQ(stage->in_flight(), 0u);
  }
}

// The divergence guard with losses read every `every` steps: every step before the NaN is
// reported, in order and `every` at a time, and the error names the NaN's own step.
TEST(Robustness, ANonFiniteLossIsCaughtWithinReadLossesEverySteps) {
  for (const std::string executor : {"emulated", "threads"}) {
    for (const int64_t every : {1, 4}) {
      auto p = tiny(2);
      auto context = tiny_context(2);
      std::atomic<int64_t> inputs{0};
      context.input = [&inputs](int64_t t) {
        ++inputs;
        const double value = t == 5 ? std::nan("") : static_cast<double>(t % 5);
        return Input{torch::full({2, 4}, value), torch::arange(2) % 3};
      };
      std::vector<int64_t> reported, inputs_then;
      context.on_step = [&](int64_t t, const StepLoss& loss) {
        EXPECT_TRUE(std::isfinite(loss.loss)) << t;
        reported.push_back(t);
        inputs_then.push_back(inputs);
      };
      context.read_losses_every = every;
      const auto where = executor + ", every " + std::to_string(every);
      try {
        make_executor(executor_from_name(executor))->run(schedule::make_stale(2, 0, 12), p.ptrs, context);
        FAIL() << where << ": no exception";
      } catch (const DivergedError& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find("partition 2, mini-batch 5: training loss is "), std::string::npos) << where << ": " << what;
        EXPECT_NE(what.find("nan"), std::string::npos) << where << ": " << what;
      }
      EXPECT_EQ(reported, (std::vector<int64_t>{0, 1, 2, 3, 4})) << where;
      if (executor == "emulated" && every == 4 && reported.size() == 5) {
        // Steps 0-3 were read together (one thread: nothing ran between their reports), after
        // step 3's forward and before step 8 entered.
        EXPECT_EQ(inputs_then[0], inputs_then[3]) << where;
        EXPECT_LT(inputs_then[3], 9) << where;
      }
      for (auto* stage : p.ptrs) EXPECT_EQ(stage->in_flight(), 0u) << where;
    }
  }
}

TEST(Robustness, LossesAreReadEveryStepOnTheCpuAndEvery32OnAGpu) {
  EXPECT_EQ(default_read_losses_every(torch::kCPU), 1);
  EXPECT_EQ(default_read_losses_every(torch::Device("cuda:0")), 32);
}

TEST(Robustness, FailureInDataFeedIsReported) {
  auto p = tiny(2);
  auto context = tiny_context(2);
  context.input = [](int64_t t) -> Input {
    if (t == 3) throw RuntimeError("train-images: truncated");
    return Input{torch::ones({2, 4}), torch::zeros({2}, torch::kLong)};
  };
  EXPECT_THROW(make_executor(exec::executor_from_name("threads"))->run(schedule::make_stale(2, 0, 8), p.ptrs, context), RuntimeError);
}

TEST(Robustness, StopDrainsWhatStartedAndNothingElse) {
  for (const std::string executor : {"emulated", "threads"}) {
    for (int64_t stop_after : {0, 3, 7}) {
      auto p = tiny(4);
      std::atomic<bool> stop{stop_after == 0};
      std::atomic<int> updates{0};
      auto context = tiny_context(2, &updates);
      context.stop = &stop;
      context.on_step = [&](int64_t t, const StepLoss&) {
        if (t + 1 >= stop_after) stop = true;
      };
      const auto result = make_executor(executor_from_name(executor))->run(schedule::make_stale(4, 0, 30), p.ptrs, context);
      EXPECT_TRUE(result.stopped);
      EXPECT_GE(result.end_step, stop_after);
      EXPECT_LT(result.end_step, 30);
      // Every started mini-batch was trained by every partition; nothing is left in flight.
      EXPECT_EQ(updates.load(), 4 * result.end_step) << executor;
      for (auto* stage : p.ptrs) EXPECT_EQ(stage->in_flight(), 0u);
    }
  }
}

TEST(Robustness, NoDeadlockAcrossRandomGrid) {
  std::mt19937 rng(12345);
  for (int trial = 0; trial < 40; ++trial) {
    const int K = 1 + static_cast<int>(rng() % 8);
    const int64_t steps = static_cast<int64_t>(rng() % 12);
    const int64_t batch = 1 + static_cast<int64_t>(rng() % 5);
    const auto kind = rng() % 2 ? schedule::ScheduleKind::kStale : schedule::ScheduleKind::kSequential;
    auto p = tiny(K);
    auto run = std::async(std::launch::async, [&] {
      return make_executor(executor_from_name("threads"))->run(schedule::make_schedule(kind, K, 0, steps), p.ptrs,
                                           tiny_context(batch));
    });
    ASSERT_EQ(run.wait_for(std::chrono::seconds(60)), std::future_status::ready)
        << "deadlock: K=" << K << " steps=" << steps << " batch=" << batch;
    EXPECT_EQ(run.get().end_step, steps);
  }
}

TEST(Robustness, UnknownExecutorIsAUsageError) {
  EXPECT_THROW(make_executor(exec::executor_from_name("mpi")), UsageError);
}

}  // namespace
}  // namespace stalepipe::exec
