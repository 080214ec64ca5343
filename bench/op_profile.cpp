// Self time of each LibTorch operator over 10 steps of stalepipe's own non-pipelined training
// step (the PipelineTrainer path that train and bench run), one thread, channels-last, a
// fixed synthetic batch of 128. A global RecordFunction callback times every operator on every
// thread (the trainer's work runs on its worker thread, which a thread-local profiler misses)
// and writes a chrome trace for bench/self_times.py:
//   taskset -c 0 build/bench/op_profile resnet56 /tmp/ours.json && python3 bench/self_times.py /tmp/ours.json
// A third argument (any) runs the same steps untimed: their rate and page faults alone.
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include <ATen/record_function.h>
#include <torch/torch.h>

#include "stalepipe/common/malloc_tuning.h"
#include "stalepipe/stalepipe.h"

namespace {
// Nothing is allocated per event once warm (names interned, the list reserved): allocations
// between the training step's would change its heap and page faults (a first version that
// appended strings to a growing vector faulted 48,000 times per step against 38 without it).
struct Event { int name; int64_t start_ns, end_ns; size_t thread; };
std::mutex mutex;
std::vector<Event> events;
std::vector<std::string> names;
std::unordered_map<std::string, int> name_index;
struct Start : at::ObserverContext { int64_t ns; };
int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction&) {
  auto start = std::make_unique<Start>();
  start->ns = now_ns();
  return start;
}
void on_end(const at::RecordFunction& fn, at::ObserverContext* ctx) {
  const int64_t end = now_ns();
  std::lock_guard<std::mutex> lock(mutex);
  auto [it, added] = name_index.try_emplace(fn.name(), static_cast<int>(names.size()));
  if (added) names.push_back(fn.name());
  events.push_back({it->second, static_cast<Start*>(ctx)->ns, end, std::hash<std::thread::id>()(std::this_thread::get_id())});
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) { std::fprintf(stderr, "usage: op_profile MODEL TRACE.json\n"); return 2; }
  std::printf("malloc: %s\n", stalepipe::keep_freed_memory().c_str());  // as the CLI's main does
  stalepipe::models::InputShape in;
  in.channels = 1;
  stalepipe::Options options;
  options.pipeline().threads(1).layout(stalepipe::Layout::kChannelsLast);
  options.optimizer().lr(0.01).lr_schedule(stalepipe::LrScheduleKind::kConstant);
  stalepipe::PipelineTrainer trainer(stalepipe::models::make_model(argv[1], in), options);
  torch::manual_seed(1);
  const auto x = torch::randn({128, 1, 32, 32}), y = torch::randint(0, 10, {128});
  for (int i = 0; i < 3; ++i) trainer.feed(x, y);
  trainer.flush();
  events.reserve(2000000);
  rusage before{}, after{};
  getrusage(RUSAGE_SELF, &before);
  const int64_t start_ns = now_ns();
  const bool timed = argc < 4;  // a third argument: the same steps untimed (their page faults)
  at::CallbackHandle handle = 0;
  if (timed) handle = at::addGlobalCallback(at::RecordFunctionCallback(on_start, on_end));
  for (int i = 0; i < 10; ++i) trainer.feed(x, y);
  trainer.flush();
  if (timed) at::removeCallback(handle);
  getrusage(RUSAGE_SELF, &after);
  const double seconds = (now_ns() - start_ns) / 1e9;
  std::printf("%ld minor page faults per step\n", (after.ru_minflt - before.ru_minflt) / 10);
  std::printf("%.1f images/s over 10 steps%s\n", 10 * 128 / seconds, timed ? " (timing every operator)" : "");
  std::ofstream out(argv[2]);
  out.precision(3);
  out << std::fixed << "[\n";
  const int64_t origin = events.empty() ? 0 : events.front().start_ns;
  for (size_t i = 0; i < events.size(); ++i) {
    const auto& e = events[i];
    out << (i ? ",\n" : "") << "{\"ph\": \"X\", \"name\": \"" << names[e.name] << "\", \"ts\": " << (e.start_ns - origin) / 1000.0
        << ", \"dur\": " << (e.end_ns - e.start_ns) / 1000.0 << ", \"tid\": " << e.thread << "}";
  }
  out << "\n]\n";
  return 0;
}
