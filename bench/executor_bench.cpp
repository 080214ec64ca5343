// One training step of each executor on LeNet-5 (batch 128, 1x32x32 synthetic inputs).
//
// Run:    build/bench/bench_executors [--benchmark_filter=threads]
// Prints: one line per (executor, partitions): wall time per iteration, a segment of 16
//         steps (fill and drain included, 1 of ~17 slots for K=2), and items_per_second =
//         images/s.
//           Step/emulated/1   non-pipelined (K=1), one thread
//           Step/emulated/2   stale pipeline cut after conv2, one op at a time, one thread
//           Step/threads/2    the same pipeline on two worker threads, one intra-op thread each
//         For whole-model numbers with the speed targets use `stalepipe bench`.
// Checks, before timing: the threads executor ends a 16-step segment with weights
// bit-identical to the emulated executor's (the reference), from the same seed and inputs.
#include <cstdio>
#include <cstdlib>
#include <memory>

#include <ATen/Parallel.h>
#include <benchmark/benchmark.h>

#include "stalepipe/exec/executor.h"
#include "stalepipe/exec/pipeline.h"
#include "stalepipe/models/zoo.h"
#include "stalepipe/partition/plan.h"
#include "stalepipe/schedule/schedule.h"

namespace {

using namespace stalepipe;

constexpr int64_t kBatch = 128;
constexpr int64_t kSteps = 16;

// A seeded LeNet-5 cut by `ppv`, its executor and fixed inputs.
struct Rig {
  Rig(const std::string& executor_name, const std::vector<int>& ppv) {
    torch::manual_seed(1);
    model = models::make_model("lenet5", models::InputShape{});
    const auto plan = partition::make_plan(model, ppv);
    K = plan.num_partitions();
    pipeline = std::make_unique<exec::Pipeline>(model, plan, std::vector<torch::Device>(K, torch::kCPU),
                                                optim::UpdateOptions().momentum(0.9));
    executor = exec::make_executor(exec::executor_from_name(executor_name));
    for (int i = 0; i < 4; ++i) {
      inputs.push_back({torch::randn({kBatch, 1, 32, 32}), torch::randint(0, 10, {kBatch}, torch::kLong)});
    }
    context.input = [this](int64_t t) { return inputs[t % inputs.size()]; };
    context.lr = [](int64_t) { return 0.01; };
    context.threads_per_worker.assign(K, 1);
  }
  void run_segment() {
    executor->run(schedule::make_schedule(K == 1 ? schedule::ScheduleKind::kSequential
                                                 : schedule::ScheduleKind::kStale,
                                          K, next, next + kSteps),
                  pipeline->stages(), context);
    next += kSteps;
  }
  models::Model model;
  int K = 1;
  std::unique_ptr<exec::Pipeline> pipeline;
  std::unique_ptr<exec::Executor> executor;
  std::vector<exec::Input> inputs;
  exec::SegmentContext context;
  int64_t next = 0;
};

void check_correctness() {
  Rig reference("emulated", {2}), threads("threads", {2});
  reference.run_segment();
  threads.run_segment();
  const auto a = reference.pipeline->parameters(), b = threads.pipeline->parameters();
  bool same = a.size() == b.size();
  for (size_t i = 0; same && i < a.size(); ++i) same = torch::equal(a[i], b[i]);
  if (!same) {
    std::fprintf(stderr, "bench_executors: threads executor differs from the emulated one\n");
    std::exit(1);
  }
}

void BM_Step(benchmark::State& state, const char* executor, std::vector<int> ppv) {
  Rig rig(executor, ppv);
  rig.run_segment();  // warm-up
  for (auto _ : state) rig.run_segment();
  state.SetItemsProcessed(state.iterations() * kSteps * kBatch);  // items/s = images/s
}
BENCHMARK_CAPTURE(BM_Step, emulated/1, "emulated", std::vector<int>{})->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Step, emulated/2, "emulated", std::vector<int>{2})->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Step, threads/2, "threads", std::vector<int>{2})->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace

int main(int argc, char** argv) {
  at::set_num_threads(1);
  check_correctness();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
