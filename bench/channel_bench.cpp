// Pipeline-register channel (common/channel.h): push/pop between two threads.
//
// Run:    build/bench/bench_channel [--benchmark_filter=Capacity]
// Prints: one line per capacity (1, 2, 4, 64 items): wall time to hand 20,000 items from a
//         producer thread to a consumer thread, and items/s (1 / items/s = cost per message).
//         The stale pipeline sends one message per forward and per backward, a few to a few
//         hundred per second for real models; this shows the channel costs microseconds per
//         message, far below any op. (Debian's libbenchmark warns it was built as DEBUG: the
//         library's own code, not ours; the timed loop is ours, built Release.)
// Checks, before timing: the consumer receives every item, in order (the pipeline's
// registers rely on FIFO order), and close() wakes a blocked consumer.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include <benchmark/benchmark.h>

#include "stalepipe/common/channel.h"

namespace {

// Producer sends 0..n-1 then closes; returns false unless the consumer saw exactly 0..n-1.
bool transfer(size_t capacity, int64_t n) {
  stalepipe::Channel<int64_t> channel(capacity);
  std::thread producer([&] {
    for (int64_t i = 0; i < n; ++i) channel.push(i);
    channel.close();
  });
  int64_t expected = 0;
  bool in_order = true;
  while (auto item = channel.pop()) {
    in_order = in_order && *item == expected;
    ++expected;
  }
  producer.join();
  return in_order && expected == n;
}

void check_correctness() {
  for (size_t capacity : {1, 2, 64}) {
    if (!transfer(capacity, 10000)) {
      std::fprintf(stderr, "bench_channel: capacity %zu lost or reordered items\n", capacity);
      std::exit(1);
    }
  }
  stalepipe::Channel<int> empty(1);
  std::thread closer([&] { empty.close(); });
  const bool woke = !empty.pop().has_value();  // blocks until closed
  closer.join();
  if (!woke) {
    std::fprintf(stderr, "bench_channel: pop() on a closed empty channel returned an item\n");
    std::exit(1);
  }
}

void BM_ChannelCapacity(benchmark::State& state) {
  const auto capacity = static_cast<size_t>(state.range(0));
  const int64_t kItems = 20000;
  for (auto _ : state) {
    if (!transfer(capacity, kItems)) {
      state.SkipWithError("items lost or reordered");
      return;
    }
  }
  state.SetItemsProcessed(state.iterations() * kItems);
}
BENCHMARK(BM_ChannelCapacity)->Arg(1)->Arg(2)->Arg(4)->Arg(64)->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace

int main(int argc, char** argv) {
  check_correctness();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
