#include "stalepipe/perf/bench.h"

#include "bench_impl.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <limits>
#include <memory>
#include <thread>

#include <ATen/Parallel.h>
#include <nlohmann/json.hpp>

#include "stalepipe/api/assemble.h"
#include "stalepipe/common/clock.h"
#include "stalepipe/common/error.h"
#include "stalepipe/common/median.h"
#include "stalepipe/data/loader.h"
#include "stalepipe/data/normalize.h"
#include "stalepipe/data/synthetic.h"
#include "stalepipe/exec/executor.h"
#include "stalepipe/exec/pipeline.h"
#include "stalepipe/models/zoo.h"
#include "stalepipe/models/skips.h"
#include "stalepipe/partition/balance.h"
#include "stalepipe/partition/plan.h"
#include "stalepipe/partition/profile.h"
#include "stalepipe/schedule/schedule.h"
#include "stalepipe/sim/simulate.h"

namespace stalepipe::perf {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// The option tree of every configuration: the measured run's, cut into `partitions` (by
// `ppv` where given), with a constant lr.
Options bench_options(const BenchOptions& o, const std::vector<int>& ppv, int partitions) {
  Options x = o.training();
  x.pipeline().ppv(ppv).partitions(ppv.empty() ? partitions : 0).replicas(1);  // the replicas' own below
  if (ppv.empty() && partitions <= 1) x.pipeline().recompute(0);  // the baselines train plainly
  x.optimizer().lr(kBenchLr).lr_schedule(LrScheduleKind::kConstant);
  return x;
}

struct Setup {
  const BenchOptions& options;
  models::InputShape input;
  std::vector<exec::Input> batches;  // reused in turn
  std::string skip_free_ppv;         // BenchReport::skip_free_ppv
};

struct RunOutcome {
  Measurement measurement;
  std::vector<torch::Tensor> parameters;
};

// A configuration's model and pipeline, built from the seed before anything is timed.
struct Rig {
  models::Model model;  // owns the units' modules, which the pipeline shares
  std::unique_ptr<exec::Pipeline> pipeline;
};

Rig build_rig(const Setup& setup, const std::vector<int>& ppv) {
  torch::manual_seed(setup.options.training().run().seed());
  Rig rig{models::make_model(setup.options.training().run().model(), setup.input), nullptr};
  rig.pipeline = assemble(rig.model, bench_options(setup.options, ppv, 0)).pipeline;
  return rig;
}

// Warm-up segment, then the measured segment, on the calling thread; several rigs are
// replicas of one pipeline (the executor splits each mini-batch between them).
RunOutcome run_rig(const Setup& setup, std::vector<Rig>& rigs, const std::vector<int>& ppv,
                   schedule::ScheduleKind kind, const std::string& executor_name,
                   int threads_per_worker) {
  const BenchOptions& o = setup.options;
  exec::Pipeline& pipeline = *rigs.front().pipeline;
  const int K = pipeline.num_stages();
  std::vector<exec::Stage*> stages;
  for (Rig& rig : rigs) stages.insert(stages.end(), rig.pipeline->stages().begin(), rig.pipeline->stages().end());
  auto executor = exec::make_executor(exec::executor_from_name(executor_name));

  std::vector<double> completions;
  double last_loss = 0;
  exec::SegmentContext context;
  context.input = [&](int64_t t) { return setup.batches[t % setup.batches.size()]; };
  context.lr = [](int64_t) { return kBenchLr; };
  context.on_step = [&](int64_t t, const exec::StepLoss& s) {
    completions.push_back(steady_seconds());
    last_loss = s.loss;
    SP_CHECK(std::isfinite(s.loss), "bench ", o.training().run().model(), " (", executor_name, ", PPV ",
             partition::format_ppv(ppv), "): loss is not finite at mini-batch ", t);
  };
  context.threads_per_worker.assign(K, threads_per_worker);
  context.read_losses_every = exec::default_read_losses_every(pipeline.stage(K - 1).device());

  const int64_t W = o.warmup_steps();
  if (W > 0) executor->run(schedule::make_schedule(kind, K, 0, W), stages, context);
  completions.clear();
  const double start = steady_seconds();
  executor->run(schedule::make_schedule(kind, K, W, W + o.steps()), stages, context);
  const double seconds = steady_seconds() - start;

  RunOutcome out;
  Measurement& m = out.measurement;
  m.executor = executor_name;
  m.partitions = K;
  m.replicas = static_cast<int>(rigs.size());
  m.threads_per_worker = context.threads_per_worker;
  m.steps = o.steps();
  m.images_per_second = steady_images_per_second(completions, K, o.training().data().batch_size());
  m.segment_images_per_second = static_cast<double>(o.steps() * o.training().data().batch_size()) / seconds;
  m.final_loss = last_loss;
  out.parameters = pipeline.parameters();
  return out;
}

// One configuration: fresh seeded model -> Pipeline -> warm-up segment -> measured segment.
// replicas: copies of the pipeline, each from the same seed (so with the same weights).
RunOutcome measure(const Setup& setup, const std::vector<int>& ppv, schedule::ScheduleKind kind,
                   const std::string& executor_name, int threads_per_worker, int replicas = 1) {
  std::vector<Rig> rigs;
  for (int r = 0; r < replicas; ++r) rigs.push_back(build_rig(setup, ppv));
  return run_rig(setup, rigs, ppv, kind, executor_name, threads_per_worker);
}

// `workers` independent non-pipelined models trained at once, each on its own thread with
// `threads_each` intra-op threads: the pipeline's workers without the pipeline, sharing nothing
// but the hardware (caches, memory bandwidth). Their summed rate is the most any scheme of
// those workers can reach here, the stale pipeline included.
Measurement measure_side_by_side(const Setup& setup, int workers, int threads_each) {
  std::vector<std::vector<Rig>> rigs(workers);
  for (int w = 0; w < workers; ++w) rigs[w].push_back(build_rig(setup, {}));  // seeding is global
  std::vector<Measurement> each(workers);
  std::vector<std::exception_ptr> errors(workers);
  std::vector<std::thread> threads;
  for (int w = 0; w < workers; ++w) {
    threads.emplace_back([&, w] {
      try {
        each[w] = run_rig(setup, rigs[w], {}, schedule::ScheduleKind::kSequential, "emulated",
                          threads_each)
                      .measurement;
      } catch (...) {
        errors[w] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
  Measurement total = each[0];
  total.partitions = workers;
  total.threads_per_worker.assign(workers, threads_each);
  total.images_per_second = total.segment_images_per_second = 0;
  for (const auto& m : each) {
    total.images_per_second += m.images_per_second;
    total.segment_images_per_second += m.segment_images_per_second;
  }
  return total;
}

// Bench's fields that rule out the configuration set, the tree's through check_options (a given
// ppv overrides partitions), then bench's own.
void check_options(const BenchOptions& o, int K) {
  const PipelineOptions& p = o.training().pipeline();
  SP_CHECK_ARG(!p.ppv().empty() || (p.partitions() >= 1 && p.partitions() <= 64), field_name(Field::partitions),
               " must be 1..64, got ", p.partitions());
  SP_CHECK_ARG(o.seconds() == 0, "BenchOptions::seconds ", o.seconds(), ": the configuration set counts steps; "
               "run_steady (perf/steady.h) times one configuration for seconds");
  SP_CHECK_ARG(p.devices().empty() && !p.cuda_graphs() && p.precision() == exec::Precision::kFp32,
               field_name(Field::devices), ", ", field_name(Field::precision), " and ", field_name(Field::cuda_graphs),
               ": the configuration set runs on the CPU in fp32; they apply with BenchOptions::seconds");
  Options checked = bench_options(o, p.ppv(), K);
  checked.pipeline().replicas(p.replicas());
  stalepipe::check_options(checked);
  SP_CHECK_ARG(o.channels() >= 1 && o.channels() <= 64, "BenchOptions::channels must be 1..64, got ", o.channels());
  SP_CHECK_ARG(o.warmup_steps() >= 0, "BenchOptions::warmup_steps must be >= 0, got ", o.warmup_steps());
  SP_CHECK_ARG(o.rounds() >= 1 && o.rounds() <= 100, "BenchOptions::rounds must be 1..100, got ", o.rounds());
  SP_CHECK_ARG(K >= 2, "bench measures a pipeline of 2 or more partitions: give ", field_name(Field::partitions),
               " >= 2 or a ", field_name(Field::ppv), " with at least one register");
  SP_CHECK_ARG(o.steps() >= 4 * K + 2 && o.steps() <= 100000, "BenchOptions::steps ", o.steps(),
               ": a ", K, "-partition pipeline needs 4K+2 = ", 4 * K + 2,
               " to 100000 measured steps (fill and drain are cut from the steady state)");
}

// The simulator's steady rate of R replicas of the cut `plan`, from a profile of one replica's
// slice with its threads (threads / (R x K) per worker, at least 1). The simulator gives each
// worker a device of its own; where the R x K workers' threads outnumber the cores they share
// them, so each op takes that much longer.
double predict_replicas(const partition::Plan& plan, models::Model& model, const BenchOptions& o, int K) {
  Options replicated = bench_options(o, plan.ppv, K);
  const int R = o.training().pipeline().replicas();
  replicated.pipeline().replicas(R);
  const Assembly cut = plan_pipeline(model, replicated, /*want_profile=*/true);
  sim::PartitionCosts costs = sim::partition_costs(*cut.profile, cut.plan);
  const int cores = resolved_threads(o.training().pipeline());
  const double crowding = std::max(1.0, static_cast<double>(R * K * threads_per_worker(replicated.pipeline(), K)) / cores);
  for (double& t : costs.forward_seconds) t *= crowding;
  for (double& t : costs.backward_seconds) t *= crowding;
  sim::SimulateOptions so;
  so.batch_size = o.training().data().batch_size();
  so.replicas = R;
  return sim::simulate(schedule::make_schedule(schedule::ScheduleKind::kStale, K, 0, o.steps()), costs, so)
      .steady_images_per_second;
}

// Profiles the model (the same cut as train: api/assemble.h) and fills in the predictions:
// per-partition times, the bound and the simulated rate. Returns the PPV.
std::vector<int> predict(BenchReport& report, models::Model& model, const BenchOptions& o, int K) {
  const Assembly cut = plan_pipeline(model, bench_options(o, o.training().pipeline().ppv(), K), /*want_profile=*/true);
  report.ppv = partition::format_ppv(cut.plan.ppv);
  report.layout = to_string(resolved_layout(bench_options(o, o.training().pipeline().ppv(), K)));
  const auto costs = sim::partition_costs(*cut.profile, cut.plan);
  for (int k = 0; k < K; ++k) {
    report.partition_ms.push_back(1e3 * (costs.forward_seconds[k] + costs.backward_seconds[k]));
  }
  report.rates.bound = pipeline_bound(costs, o.training().data().batch_size());
  sim::SimulateOptions so;
  so.batch_size = o.training().data().batch_size();
  report.rates.simulated =
      sim::simulate(schedule::make_schedule(schedule::ScheduleKind::kStale, K, 0, o.steps()), costs, so)
          .steady_images_per_second;
  if (o.training().pipeline().replicas() > 1) report.rates.simulated_replicas = predict_replicas(cut.plan, model, o, K);
  if (model.has_skips()) {
    // The same profile's costs, with the registers that a skip would cross ruled out.
    models::Model skip_free = model;  // shares the modules; only cut_after differs
    for (size_t u = 0; u < skip_free.units.size(); ++u) {
      if (models::skip_live_after(skip_free.units, u)) skip_free.units[u].cut_after = false;
    }
    const auto unit_cost = partition::unit_costs(model, partition::Balance::kTime, &*cut.profile,
                                                 cut.plan.recompute_units);
    report.skip_free_ppv = partition::format_ppv(partition::balance(skip_free, unit_cost, K));
  }
  return cut.plan.ppv;
}

// A few batches of synthetic 28x28 samples, padded and normalised as the trainer does with
// Fashion-MNIST.
std::vector<exec::Input> synthetic_batches(const BenchOptions& o) {
  const int64_t kBatches = 4;
  const auto split = data::make_synthetic(data::SyntheticOptions()
                                              .train_size(kBatches * o.training().data().batch_size())
                                              .test_size(1)
                                              .channels(o.channels())
                                              .seed(o.training().run().seed()));
  data::Loader loader(split.train, data::LoaderOptions()
                                       .batch_size(o.training().data().batch_size())
                                       .seed(o.training().run().seed())
                                       .pad_to(32)
                                       .normalization(data::compute_normalization(split.train)));
  std::vector<exec::Input> batches;
  for (int64_t b = 0; b < kBatches; ++b) {
    auto batch = loader.batch(0, b);
    batches.push_back({batch.x, batch.y});
  }
  return batches;
}

struct Config {
  std::string key, label;
  std::function<RunOutcome()> run;
};

// The configurations, in the order each round runs them.
std::vector<Config> bench_configs(const Setup& setup, const std::vector<int>& ppv, int K, int T, int per_worker) {
  using schedule::ScheduleKind;
  std::vector<Config> configs;
  configs.push_back({"one_thread", "non-pipelined, 1 thread",
                     [&setup] { return measure(setup, {}, ScheduleKind::kSequential, "emulated", 1); }});
  if (T > 1) {
    configs.push_back({"all_threads", c10::str("non-pipelined, ", T, " threads"),
                       [&setup, T] { return measure(setup, {}, ScheduleKind::kSequential, "emulated", T); }});
  }
  configs.push_back({"pipeline", c10::str("stale pipeline, threads executor, ", K, " x ", per_worker, " thread(s)"),
                     [&setup, ppv, per_worker] { return measure(setup, ppv, ScheduleKind::kStale, "threads", per_worker); }});
  if (!setup.skip_free_ppv.empty() && setup.skip_free_ppv != partition::format_ppv(ppv)) {
    const auto other = partition::parse_ppv(setup.skip_free_ppv);
    configs.push_back({"skip_free_cut", c10::str("stale pipeline at ", setup.skip_free_ppv, " (no skip crosses), threads"),
                       [&setup, other, per_worker] { return measure(setup, other, ScheduleKind::kStale, "threads", per_worker); }});
  }
  configs.push_back({"emulated", c10::str("stale pipeline, emulated executor, ", per_worker, " thread(s)"),
                     [&setup, ppv, per_worker] { return measure(setup, ppv, ScheduleKind::kStale, "emulated", per_worker); }});
  if (const int R = setup.options.training().pipeline().replicas(); R > 1) {
    const int each = std::max(1, T / (R * K));
    configs.push_back({"replicas", c10::str(R, " replicas of it, threads executor, ", R * K, " x ", each, " thread(s)"),
                       [&setup, ppv, each, R] { return measure(setup, ppv, ScheduleKind::kStale, "threads", each, R); }});
  }
  configs.push_back({"side_by_side", c10::str(K, " non-pipelined runs at once, ", per_worker, " thread(s) each"),
                     [&setup, K, per_worker] { return RunOutcome{measure_side_by_side(setup, K, per_worker), {}}; }});
  if (per_worker != 1 && per_worker != T) {
    configs.push_back({"same_threads", c10::str("non-pipelined, ", per_worker, " threads"), [&setup, per_worker] {
                         return measure(setup, {}, ScheduleKind::kSequential, "emulated", per_worker);
                       }});
  }
  return configs;
}

// Medians over the rounds into report.measurements (index for index with configs) and
// report.rates; whether every round's pipeline ended with the emulated executor's weights.
void collect(BenchReport& report, const std::vector<Config>& configs,
             const std::vector<std::vector<RunOutcome>>& runs) {
  const auto index_of = [&](const std::string& key) {
    return static_cast<size_t>(
        std::find_if(configs.begin(), configs.end(), [&](const Config& c) { return c.key == key; }) -
        configs.begin());
  };
  const auto rate_of = [&](const std::string& key) {
    const size_t i = index_of(key);
    return i < report.measurements.size() ? report.measurements[i].images_per_second : 0.0;
  };
  for (size_t c = 0; c < configs.size(); ++c) {
    Measurement m = runs[c].back().measurement;
    m.key = configs[c].key;
    m.label = configs[c].label;
    std::vector<double> segment;
    for (const auto& run : runs[c]) {
      m.round_images_per_second.push_back(run.measurement.images_per_second);
      segment.push_back(run.measurement.segment_images_per_second);
    }
    m.images_per_second = median(m.round_images_per_second);
    m.segment_images_per_second = median(segment);
    report.measurements.push_back(m);
  }
  const int per_worker = report.threads_per_worker, T = report.threads;
  report.rates.one_thread = rate_of("one_thread");
  report.rates.all_threads = T > 1 ? rate_of("all_threads") : report.rates.one_thread;
  report.rates.pipeline = rate_of("pipeline");
  report.rates.emulated = rate_of("emulated");
  report.rates.side_by_side = rate_of("side_by_side");
  report.rates.skip_free_cut = rate_of("skip_free_cut");
  report.rates.replicas = rate_of("replicas");
  report.rates.non_pipelined_same_threads = per_worker == 1   ? report.rates.one_thread
                                            : per_worker == T ? report.rates.all_threads
                                                              : rate_of("same_threads");

  // Every round's pipeline must end with the emulated executor's weights, bit for bit.
  const auto& piped = runs[index_of("pipeline")];
  const auto& emulated = runs[index_of("emulated")];
  report.executors_agree = true;
  for (size_t r = 0; report.executors_agree && r < piped.size(); ++r) {
    const auto& a = piped[r].parameters;
    const auto& b = emulated[r].parameters;
    report.executors_agree = a.size() == b.size();
    for (size_t i = 0; report.executors_agree && i < a.size(); ++i) {
      report.executors_agree = torch::equal(a[i], b[i]);
    }
  }
}

}  // namespace

BenchRatios compute_ratios(const BenchRates& r) {
  BenchRatios q;
  q.pipeline_vs_one_thread = ratio(r.pipeline, r.one_thread);
  q.pipeline_vs_all_threads = ratio(r.pipeline, r.all_threads);
  q.pipeline_vs_bound = ratio(r.pipeline, r.bound);
  q.emulated_vs_non_pipelined = ratio(r.emulated, r.non_pipelined_same_threads);
  q.simulated_vs_measured = ratio(r.simulated, r.pipeline);
  q.processes_vs_threads = ratio(r.processes, r.threads_train);
  q.side_by_side_vs_one_thread = ratio(r.side_by_side, r.one_thread);
  q.pipeline_vs_side_by_side = ratio(r.pipeline, r.side_by_side);
  q.pipeline_vs_skip_free_cut = ratio(r.pipeline, r.skip_free_cut);
  q.replicas_vs_pipeline = ratio(r.replicas, r.pipeline);
  q.simulated_vs_measured_replicas = ratio(r.simulated_replicas, r.replicas);
  return q;
}

std::vector<TargetCheck> check_targets(const BenchRatios& q) {
  auto target = [](const char* name, double value, double low, double high) {
    TargetCheck t;
    t.name = name;
    t.value = value;
    t.low = low;
    t.high = high;
    t.measured = value > 0;
    return t;
  };
  return {
      target("pipeline / non-pipelined 1 thread", q.pipeline_vs_one_thread, 1.8, kInf),
      target("pipeline / profile bound", q.pipeline_vs_bound, 0.9, kInf),
      target("pipeline / non-pipelined all threads", q.pipeline_vs_all_threads, 1.0, kInf),
      target("emulated / non-pipelined same threads", q.emulated_vs_non_pipelined, 0.95, 1.05),
      target("simulated / measured pipeline", q.simulated_vs_measured, 0.85, 1.15),
      target("processes / threads executor (train)", q.processes_vs_threads, 0.9, kInf),
      target("simulated / measured replicas", q.simulated_vs_measured_replicas, 0.85, 1.15),
  };
}

double pipeline_bound(const sim::PartitionCosts& costs, int64_t batch_size) {
  SP_CHECK_ARG(batch_size >= 1, "pipeline bound: batch size must be >= 1, got ", batch_size);
  SP_CHECK_ARG(!costs.forward_seconds.empty() &&
                   costs.forward_seconds.size() == costs.backward_seconds.size(),
               "pipeline bound: need one forward and one backward time per partition, got ",
               costs.forward_seconds.size(), " and ", costs.backward_seconds.size());
  double slowest = 0;
  for (size_t k = 0; k < costs.forward_seconds.size(); ++k) {
    slowest = std::max(slowest, costs.forward_seconds[k] + costs.backward_seconds[k]);
  }
  SP_CHECK_ARG(slowest > 0, "pipeline bound: every partition takes 0 s; the profile is empty");
  return static_cast<double>(batch_size) / slowest;
}

double steady_images_per_second(const std::vector<double>& t, int partitions, int64_t batch_size) {
  const int64_t n = static_cast<int64_t>(t.size());
  const int64_t first = 2 * static_cast<int64_t>(partitions);
  const int64_t last = n - 1 - first;
  SP_CHECK_ARG(partitions >= 1 && n >= 4 * partitions + 2, "steady state of a ", partitions,
               "-partition pipeline needs at least ", 4 * partitions + 2, " steps, got ", n);
  const double span = t[last] - t[first];
  SP_CHECK_ARG(span > 0, "steady state: completion times do not increase (", t[first], " .. ",
               t[last], " s)");
  return static_cast<double>(batch_size * (last - first)) / span;
}

BenchOptions::BenchOptions() { training_.pipeline().partitions(2); }

BenchReport run_bench(const BenchOptions& o, const std::function<void(const std::string&)>& log) {
  auto say = [&](const std::string& line) {
    if (log) log(line);
  };
  BenchReport report;
  report.options = o;
  const PipelineOptions& p = o.training().pipeline();
  const int K = p.ppv().empty() ? p.partitions() : static_cast<int>(p.ppv().size()) + 1;
  check_options(o, K);
  const int T = resolved_threads(p);
  const int per_worker = std::max(1, T / K);
  report.partitions = K;
  report.threads = T;
  report.threads_per_worker = per_worker;

  Setup setup{o, {}, {}, {}};
  setup.input.channels = o.channels();
  // Cheap checks first: the model name and PPV, before any profile or data.
  auto model = models::make_model(o.training().run().model(), setup.input);
  if (!p.ppv().empty()) partition::make_plan(model, p.ppv(), 0, field_name(Field::ppv));
  say(c10::str("profiling ", o.training().run().model(), " at batch ", o.training().data().batch_size(), " with ", per_worker,
               " thread(s) per unit"));
  const std::vector<int> ppv = predict(report, model, o, K);
  setup.skip_free_ppv = report.skip_free_ppv;
  setup.batches = synthetic_batches(o);

  const std::vector<Config> configs = bench_configs(setup, ppv, K, T, per_worker);
  say(c10::str("measuring ", o.warmup_steps(), " warm-up + ", o.steps(), " steps per configuration",
               o.rounds() > 1 ? c10::str(", ", o.rounds(), " alternated rounds") : std::string()));
  std::vector<std::vector<RunOutcome>> runs(configs.size());
  for (int round = 1; round <= o.rounds(); ++round) {
    for (size_t c = 0; c < configs.size(); ++c) {
      RunOutcome run = configs[c].run();
      // Only the executor check below reads weights; the others would hold a model's worth each.
      if (configs[c].key != "pipeline" && configs[c].key != "emulated") run.parameters.clear();
      say(c10::str(o.rounds() > 1 ? c10::str("round ", round, ": ") : std::string(), configs[c].label,
                   ": ", static_cast<int64_t>(run.measurement.images_per_second), " images/s"));
      runs[c].push_back(std::move(run));
    }
  }
  at::set_num_threads(T);
  collect(report, configs, runs);
  finish_report(report);
  return report;
}

void finish_report(BenchReport& report) {
  report.ratios = compute_ratios(report.rates);
  report.targets = check_targets(report.ratios);
}

}  // namespace stalepipe::perf
