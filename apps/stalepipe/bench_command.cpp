// `stalepipe bench --model NAME [--partitions 2 --balance time | --pipeline PPV]`: images/s of
// non-pipelined training (1 thread, all cores), the stale pipeline (threads executor), the
// emulated executor, the profile's bound and the simulator's prediction, with the speed
// targets (perf/bench.h). --processes adds `train --executor processes` on K ranks against
// the same `train` run with the threads executor, as child processes of this program.
// `stalepipe bench --seconds S ...`: instead, the steady state of the one configuration the
// flags give (its --devices, --precision, --cuda-graphs too) on a fixed batch (perf/steady.h).
//
// `stalepipe memory --model NAME --pipeline PPV`: per-partition memory predicted from the
// schedule and measured, the paper's Table 9 line, and the stale pipeline's peak beside
// its recomputing point's (perf/memory.h).
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "flags.h"
#include "stalepipe/common/error.h"
#include "stalepipe/common/files.h"
#include "stalepipe/common/median.h"
#include "stalepipe/perf/bench.h"
#include "stalepipe/perf/loader_speed.h"
#include "stalepipe/perf/memory.h"
#include "stalepipe/perf/steady.h"

extern char** environ;

namespace stalepipe::cli {
namespace {

namespace fs = std::filesystem;

std::string self_path() {
  char buffer[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", buffer, sizeof(buffer) - 1);
  SP_CHECK(n > 0, "bench: cannot read /proc/self/exe: ", std::strerror(errno));
  return std::string(buffer, static_cast<size_t>(n));
}

// Runs this program with `args`, output to `log_path`; throws RuntimeError on failure.
void run_self(const std::vector<std::string>& args, const std::string& log_path) {
  const std::string exe = self_path();
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(exe.c_str()));
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  posix_spawn_file_actions_addclose(&actions, STDIN_FILENO);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, exe.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  SP_CHECK(rc == 0, "bench: cannot start ", exe, ": ", std::strerror(rc));
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  SP_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "bench: `stalepipe ", args[0],
           "` failed (status ", WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status),
           "); its output is in ", log_path);
}

// images/s of the last epoch in DIR/metrics.jsonl (epoch 2: epoch 1 was the warm-up).
double last_epoch_images_per_second(const std::string& dir) {
  std::ifstream in(dir + "/metrics.jsonl");
  SP_CHECK(in, "bench: ", dir, "/metrics.jsonl is missing");
  std::string line, last;
  while (std::getline(in, line)) {
    if (!line.empty()) last = line;
  }
  SP_CHECK(!last.empty(), "bench: ", dir, "/metrics.jsonl is empty");
  return nlohmann::json::parse(last).at("images_per_second").get<double>();
}

// `train` over the threads executor and over the processes executor on K ranks, with the same
// options: 2 epochs of `steps` mini-batches of synthetic data; epoch 2 is measured. The two
// alternate `repeats` times and each rate is the median: a single 12-step epoch of ResNet-56
// varies by +-10% here, more than the difference being measured.
void measure_processes(perf::BenchReport& report, int repeats) {
  const auto& o = report.options;
  const Options& t = o.training();
  const fs::path dir = fs::temp_directory_path() / ("stalepipe-bench-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::vector<std::string> common = {
      "--model", t.run().model(), "--data", "synthetic:" + std::to_string(o.steps() * t.data().batch_size()),
      "--batch-size", std::to_string(t.data().batch_size()), "--epochs", "2", "--test-subset", "1",  // evaluation is not timed
      "--pipeline", report.ppv, "--threads", std::to_string(report.threads), "--lr", "0.01",
      "--progress", "none", "--seed", std::to_string(t.run().seed())};
  common.insert(common.end(), {"--layout", report.layout});
  auto train_args = [&](const std::string& executor, const std::string& out) {
    std::vector<std::string> a = {"train", "--executor", executor, "--out", out};
    a.insert(a.end(), common.begin(), common.end());
    return a;
  };
  auto& rates = report.rates;
  rates.threads_train_runs.clear();
  rates.processes_runs.clear();
  for (int i = 1; i <= repeats; ++i) {
    // On failure the folder stays: the error names the log to read.
    const std::string threads = c10::str("threads", i), processes = c10::str("processes", i);
    std::fprintf(stderr, "bench: train --executor threads (%d partitions), run %d of %d\n",
                 report.partitions, i, repeats);
    run_self(train_args("threads", (dir / threads).string()), (dir / (threads + ".log")).string());
    rates.threads_train_runs.push_back(last_epoch_images_per_second((dir / threads).string()));
    std::fprintf(stderr, "bench: launch --nproc %d -- train --executor processes, run %d of %d\n",
                 report.partitions, i, repeats);
    auto launch = train_args("processes", (dir / processes).string());
    launch.insert(launch.begin(), {"launch", "--nproc", std::to_string(report.partitions), "--"});
    run_self(launch, (dir / (processes + ".log")).string());
    rates.processes_runs.push_back(last_epoch_images_per_second((dir / processes).string()));
  }
  rates.threads_train = median(rates.threads_train_runs);
  rates.processes = median(rates.processes_runs);
  fs::remove_all(dir);
}

// The input pipeline alone beside training's rate: below 1, training would wait for data.
void print_loader_rate(const Options& training, double pipeline_images_per_second) {
  const perf::LoaderSpeed s = perf::measure_loader(training, 20);
  std::printf("input pipeline (--data %s, %lldx%lldx%lld, %d decode thread(s)): %.0f img/s alone, %.2fx the "
              "pipeline's %.0f img/s\n", training.data().dataset().c_str(), static_cast<long long>(s.shape[0]),
              static_cast<long long>(s.shape[1]), static_cast<long long>(s.shape[2]), s.threads,
              s.images_per_second, s.images_per_second / pipeline_images_per_second, pipeline_images_per_second);
}

struct BenchArgs {
  perf::BenchOptions options;
  TrainFlags text;
  std::string json;
  bool processes = false;
  int processes_repeats = 3;
  CLI::Option* pipeline = nullptr;
};

// `bench --seconds`: one configuration's steady state instead of the configuration set.
int run_steady(const BenchArgs& a, bool data_given) {
  SP_CHECK_ARG(!a.processes && !data_given, a.processes ? "--processes" : "--data",
               ": not with --seconds, which times one configuration on a fixed batch");
  const auto report = perf::run_steady(a.options, [](const std::string& line) {
    std::fprintf(stderr, "bench: %s\n", line.c_str());
  });
  std::fputs(perf::format_steady_report(report).c_str(), stdout);
  if (!a.json.empty()) write_file_atomic(a.json, perf::to_json(report));
  return 0;
}

}  // namespace

Command add_bench(CLI::App& app) {
  using Args = BenchArgs;
  auto a = std::make_shared<Args>();
  auto& o = a->options;
  auto field = [&](Field f, const std::string& help = "") { return add_field_flag(app, o.training(), a->text, f, help); };
  field(Field::model, zoo_model_choices());
  field(Field::batch_size);
  app.add_option("--channels", o.channels(), "input channels (1: Fashion-MNIST, 3: CIFAR-10)")->capture_default_str();
  a->pipeline = field(Field::ppv, "PPV, e.g. 19 (the paper's 2n+1 for ResNet-56)");
  a->pipeline->excludes(field(Field::partitions, "K partitions, PPV chosen by --balance"));
  field(Field::balance, "with --partitions: time | params | flops");
  app.add_option("--warmup-steps", o.warmup_steps(), "unmeasured mini-batches per configuration")->capture_default_str();
  app.add_option("--steps", o.steps(), "measured mini-batches per configuration (>= 4K+2)")->capture_default_str();
  field(Field::threads, "cores to use in all (0: all)");
  app.add_option("--rounds", o.rounds(), "alternated runs of every configuration; medians are reported")->capture_default_str();
  field(Field::seed, "model and data seed");
  field(Field::layout, "every configuration in nchw | channels-last | auto (the model's default)");
  field(Field::recompute, "pipelined configurations recompute activations through weight layer L (0: none)");
  field(Field::replicas, "also time R copies of the stale pipeline (R x K workers), with the simulator's prediction");
  app.add_option("--seconds", o.seconds(), "> 0: instead, time this one configuration's whole steps for this long "
                 "after --warmup-steps, on a fixed batch on its first device (bench/gpu_peer.py's measurement)")
      ->capture_default_str();
  for (Field f : {Field::devices, Field::precision, Field::cuda_graphs, Field::schedule, Field::executor}) {
    field(f, "with --seconds: " + option_field(f).help);
  }
  auto* data = field(Field::dataset, "also time the input pipeline alone on this data set, as train reads it, "
                                     "beside the pipeline's rate");
  for (Field f : {Field::image_size, Field::resized_crop, Field::data_threads}) field(f);
  app.add_option("--json", a->json, "also write the report as JSON to this file");
  app.add_flag("--processes", a->processes,
               "also time train --executor processes on K ranks against --executor threads (slower)");
  app.add_option("--processes-repeats", a->processes_repeats,
                 "with --processes: alternated runs of each executor; the median is reported")
      ->check(CLI::Range(1, 99))
      ->capture_default_str();
  return [a, data]() {
    apply(a->text, a->options.training());
    if (a->options.seconds() != 0) return run_steady(*a, data->count() > 0);
    const std::string& ppv = a->text.text.at(Field::ppv);
    SP_CHECK_ARG(a->pipeline->count() == 0 || !a->options.training().pipeline().ppv().empty(), "--pipeline ", ppv,
                 ": bench measures a pipeline; give at least one register");
    auto report = perf::run_bench(a->options, [](const std::string& line) {
      std::fprintf(stderr, "bench: %s\n", line.c_str());
    });
    if (a->processes) {
      measure_processes(report, a->processes_repeats);
      perf::finish_report(report);
    }
    std::fputs(perf::format_bench_report(report).c_str(), stdout);
    if (data->count() > 0) print_loader_rate(a->options.training(), report.rates.pipeline);
    if (!a->json.empty()) write_file_atomic(a->json, perf::to_json(report));
    SP_CHECK(report.executors_agree, "bench: the threads and emulated executors ended with different "
             "weights; the timings above are of a broken pipeline");
    return 0;
  };
}

Command add_memory(CLI::App& app) {
  auto o = std::make_shared<perf::MemoryOptions>();
  auto text = std::make_shared<TrainFlags>();
  auto json = std::make_shared<std::string>();
  auto field = [&](Field f, const std::string& help = "") { return add_field_flag(app, o->training, *text, f, help); };
  field(Field::model, zoo_model_choices());
  field(Field::ppv, "PPV, e.g. 2 (at least one register)")->required();
  field(Field::batch_size);
  app.add_option("--channels", o->channels, "input channels (1: MNIST-like, 3: CIFAR-10)")->capture_default_str();
  field(Field::seed, "model seed");
  field(Field::layout, "nchw | channels-last | auto (the model's default)");
  field(Field::recompute, "the partitions recompute activations through weight layer L (0: none, and the recomputing point shown beside recomputes all of partition 1); the non-pipelined peak does not");
  app.add_option("--json", *json, "also write the report as JSON to this file");
  return [o, text, json]() {
    apply(*text, o->training);
    const auto report = perf::memory_report(*o);
    std::fputs(perf::format_memory_report(report).c_str(), stdout);
    if (!json->empty()) write_file_atomic(*json, perf::to_json(report));
    return 0;
  };
}

}  // namespace stalepipe::cli
