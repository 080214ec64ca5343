// Failures, stops and odd sizes: the pipeline always ends, consistent, with the cause named.
#include <atomic>
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
    p.stages.push_back(std::make_unique<Stage>(k, K, seq, torch::kCPU, optim::SgdOptions()));
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
