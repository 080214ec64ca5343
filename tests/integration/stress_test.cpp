// Stress: the threads executor against the emulated one over random configurations (model,
// K up to 8, PPV, batch and data sizes, schedule, mitigations) while spinning threads load the
// scheduler, so that the workers are preempted at arbitrary points. Every run must equal the
// emulated run bit for bit and end: a watchdog ends the process naming the configuration if
// one hangs. STALEPIPE_STRESS_RUNS sets the number of configurations (default 12 here;
// docs/reliability.md quotes a run of 200) and STALEPIPE_STRESS_SEED the random draw (default 1).
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "stalepipe/models/zoo.h"
#include "support/pipeline_runs.h"

namespace stalepipe::test {
namespace {
using schedule::ScheduleKind;

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : fallback;
}

// One random configuration; `text` says what it is.
struct Drawn {
  RunSpec spec;
  std::string text;
};

Drawn draw(std::mt19937& rng) {
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  auto coin = [&] { return uniform(0, 1) == 1; };
  Drawn d;
  RunSpec& s = d.spec;
  s.model = coin() ? "lenet5" : "resnet14";  // resnet14: 7 places for a register, so K up to 8
  models::InputShape input;
  input.channels = 1;
  std::vector<int> cuts = models::make_model(s.model, input).cut_layers();
  const int k = uniform(2, std::min<int>(8, static_cast<int>(cuts.size()) + 1));
  std::shuffle(cuts.begin(), cuts.end(), rng);
  s.ppv.assign(cuts.begin(), cuts.begin() + (k - 1));
  std::sort(s.ppv.begin(), s.ppv.end());
  const int schedule = uniform(0, 3);
  s.kind = schedule == 1 ? ScheduleKind::kGPipe : schedule == 2 ? ScheduleKind::kOneFOneB : ScheduleKind::kStale;
  s.micro_batches = s.kind == ScheduleKind::kGPipe ? uniform(2, 4) : 1;
  s.batch_size = s.micro_batches * uniform(1, 4);
  // A partial last batch, of whole micro-batches (GPipe splits every batch into them).
  s.train_size = uniform(2, 8) * s.batch_size + s.micro_batches * uniform(0, static_cast<int>(s.batch_size / s.micro_batches) - 1);
  s.steps = uniform(k, 3 * k + 4);
  s.switch_step = schedule == 3 ? uniform(1, static_cast<int>(s.steps) - 1) : -1;  // hybrid
  s.seed = static_cast<uint64_t>(uniform(1, 1000));
  s.lr = 0.01;
  s.weight_prediction = coin();
  s.spike_compensation = coin();
  s.delay_aware_lr = coin();
  std::ostringstream text;
  text << s.model << " PPV";
  for (int p : s.ppv) text << " " << p;
  text << ", " << (schedule == 0 ? "stale" : schedule == 1 ? "gpipe" : schedule == 2 ? "1f1b-stash" : "hybrid")
       << " (micro " << s.micro_batches << ", switch " << s.switch_step << "), batch " << s.batch_size << ", data "
       << s.train_size << ", steps " << s.steps << ", seed " << s.seed
       << (s.weight_prediction ? ", prediction" : "") << (s.spike_compensation ? ", compensation" : "")
       << (s.delay_aware_lr ? ", delay-aware lr" : "");
  d.text = text.str();
  return d;
}

// Threads that spin until destroyed, twice as many as there are cores.
class SchedulerLoad {
 public:
  SchedulerLoad() {
    for (unsigned i = 0; i < 2 * std::max(1u, std::thread::hardware_concurrency()); ++i) {
      spinners_.emplace_back([this] {
        volatile uint64_t x = 0;
        while (!stop_) x = x + 1;
      });
    }
  }
  ~SchedulerLoad() {
    stop_ = true;
    for (auto& t : spinners_) t.join();
  }

 private:
  std::atomic<bool> stop_{false};
  std::vector<std::thread> spinners_;
};

// Ends the process, naming the configuration, if a run takes longer than `seconds`.
class Watchdog {
 public:
  explicit Watchdog(double seconds) : seconds_(seconds), thread_([this] { watch(); }) {}
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      done_ = true;
    }
    changed_.notify_all();
    thread_.join();
  }
  void start(const std::string& what) {
    std::lock_guard<std::mutex> lock(mutex_);
    what_ = what;
    ++generation_;
    changed_.notify_all();
  }

 private:
  void watch() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!done_) {
      const uint64_t generation = generation_;
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds_);
      if (!changed_.wait_until(lock, deadline, [&] { return done_ || generation_ != generation; }) && !what_.empty()) {
        std::fprintf(stderr, "stress: no end after %.0f s (deadlock?): %s\n", seconds_, what_.c_str());
        std::_Exit(1);
      }
    }
  }
  double seconds_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::string what_;
  uint64_t generation_ = 0;
  bool done_ = false;
  std::thread thread_;
};

TEST(Stress, ThreadsEqualEmulatedOverRandomConfigurationsUnderLoad) {
  const int runs = env_int("STALEPIPE_STRESS_RUNS", 12);
  std::mt19937 rng(static_cast<uint32_t>(env_int("STALEPIPE_STRESS_SEED", 1)));
  SchedulerLoad load;
  Watchdog watchdog(120);
  for (int i = 0; i < runs; ++i) {
    Drawn d = draw(rng);
    SCOPED_TRACE("configuration " + std::to_string(i + 1) + ": " + d.text);
    watchdog.start(d.text);
    d.spec.executor = "emulated";
    const auto emulated = run_pipeline(d.spec);
    d.spec.executor = "threads";
    const auto threads = run_pipeline(d.spec);
    ASSERT_TRUE(all_equal(threads, emulated));
  }
  std::printf("stress: %d configurations, threads = emulated bit for bit\n", runs);
}

}  // namespace
}  // namespace stalepipe::test
