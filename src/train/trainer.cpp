#include "stalepipe/train/trainer.h"

#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <thread>

#include <ATen/Parallel.h>
#include <torch/cuda.h>
#include <torch/nn/functional/loss.h>
#include <torch/utils.h>

#include "options_json.h"
#include "resolve_pipeline.h"
#include "common/json_file_impl.h"
#include "stalepipe/api/pipeline_trainer.h"
#include "stalepipe/common/error.h"
#include "stalepipe/common/files.h"
#include "stalepipe/data/loader.h"
#include "stalepipe/data/normalize.h"
#include "stalepipe/data/registry.h"
#include "stalepipe/exec/executor.h"
#include "stalepipe/exec/pipeline.h"
#include "stalepipe/exec/processes.h"
#include "stalepipe/models/zoo.h"
#include "stalepipe/partition/plan.h"
#include "stalepipe/sim/trace.h"
#include "stalepipe/train/checkpoint.h"
#include "stalepipe/train/lr_schedule.h"
#include "stalepipe/train/progress.h"

namespace stalepipe::train {
namespace fs = std::filesystem;
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Peak resident memory of this run: a sweep trains many runs in one process, so the peak is
// reset when a run starts (Linux: clear_refs 5 resets VmHWM) and read from VmHWM. Elsewhere,
// the process's peak (getrusage). The reset can only go down to the memory still resident,
// and glibc keeps what the previous run freed; malloc_trim hands that back first (without
// it, five runs in a row of one sweep all reported the 1076 MB the run before them left).
void reset_peak_rss() {
#ifdef __GLIBC__
  malloc_trim(0);
#endif
  std::ofstream("/proc/self/clear_refs") << "5";
}

double peak_rss_mb() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;  // kB
  }
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB on Linux
}

std::vector<torch::Device> parse_devices(const std::string& text, int partitions) {
  std::vector<torch::Device> devices;
  if (text.empty()) return std::vector<torch::Device>(partitions, torch::kCPU);
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    try {
      devices.emplace_back(item);
    } catch (const c10::Error&) {
      throw UsageError("--devices " + text + ": '" + item + "' is not a device; expected cpu or cuda:N");
    }
    const auto& d = devices.back();
    if (d.is_cuda()) {
      const int count = torch::cuda::is_available() ? static_cast<int>(torch::cuda::device_count()) : 0;
      SP_CHECK_ARG(d.has_index() && d.index() < count, "--devices ", text, ": ", item,
                   " is not present; this machine has ", count, " CUDA device(s)",
                   count == 0 ? " (or LibTorch was built without CUDA)" : "");
    } else {
      SP_CHECK_ARG(d.is_cpu(), "--devices ", text, ": only cpu and cuda devices are supported");
    }
  }
  SP_CHECK_ARG(static_cast<int>(devices.size()) == partitions, "--devices ", text, ": names ",
               devices.size(), " device(s) but the pipeline has ", partitions, " partitions");
  return devices;
}

// "3" -> 3 epochs, "250s" -> 250 steps; empty -> -1 (no switch).
int64_t parse_switch_step(const std::string& text, int64_t steps_per_epoch) {
  if (text.empty()) return -1;
  const bool in_steps = text.back() == 's';
  const std::string number = in_steps ? text.substr(0, text.size() - 1) : text;
  size_t used = 0;
  int64_t value = -1;
  try {
    value = std::stoll(number, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  SP_CHECK_ARG(used == number.size() && !number.empty() && value >= 0, "--hybrid-switch ", text,
               ": expected a number of epochs (3) or of steps (250s)");
  return in_steps ? value : value * steps_per_epoch;
}

// A run's state: everything built from the options, in the data path's order.
struct Run {
  TrainOptions options;
  data::DataSplit data;
  std::unique_ptr<data::Loader> train_loader, test_loader;
  models::Model model;
  partition::Plan plan;
  std::unique_ptr<PipelineTrainer> api;  // the public pipeline API; pipeline and executor are its
  exec::Pipeline* pipeline = nullptr;
  exec::Executor* executor = nullptr;
  std::unique_ptr<LrSchedule> lr;
  int64_t steps_per_epoch = 0, total_steps = 0, switch_step = -1, epochs = 0;
  int threads = 1;
  std::vector<int> threads_per_worker;
  PartitionReport report;
  // --executor processes: this process runs partition group->rank() + 1 only.
  std::shared_ptr<exec::ProcessGroup> group;
  int rank() const { return group ? group->rank() : 0; }
  bool leader() const { return rank() == 0; }  // writes the run's files and logs
  bool feeds_data() const { return rank() == 0; }
};

void check_options(const TrainOptions& o) {
  SP_CHECK_ARG(o.batch_size() >= 1, "--batch-size must be >= 1, got ", o.batch_size());
  SP_CHECK_ARG(o.epochs() >= 1, "--epochs must be >= 1, got ", o.epochs());
  SP_CHECK_ARG(o.lr() > 0 && std::isfinite(o.lr()), "--lr must be a positive number, got ", o.lr());
  SP_CHECK_ARG(o.max_steps() >= 0, "--max-steps must be >= 0, got ", o.max_steps());
  SP_CHECK_ARG(o.train_subset() >= 0, "--train-subset must be >= 0, got ", o.train_subset());
  SP_CHECK_ARG(o.test_subset() >= 0, "--test-subset must be >= 0, got ", o.test_subset());
  SP_CHECK_ARG(o.threads() >= 0, "--threads must be >= 0, got ", o.threads());
  SP_CHECK_ARG(o.threads_per_worker() >= 0, "--threads-per-worker must be >= 0, got ",
               o.threads_per_worker());
  SP_CHECK_ARG(o.checkpoint_every() >= 0, "--checkpoint-every must be >= 0, got ",
               o.checkpoint_every());
  SP_CHECK_ARG(o.eval_batch_size() >= 1, "--eval-batch-size must be >= 1, got ",
               o.eval_batch_size());
  if (o.schedule() != "hybrid") schedule::parse_schedule_kind(o.schedule());  // throws for others
  SP_CHECK_ARG(o.micro_batches() >= 1, "--micro-batches must be >= 1, got ", o.micro_batches());
  SP_CHECK_ARG(o.micro_batches() == 1 || o.schedule() == "gpipe", "--micro-batches ",
               o.micro_batches(), " applies to --schedule gpipe only, not ", o.schedule());
  SP_CHECK_ARG(o.micro_batches() <= o.batch_size(), "--micro-batches ", o.micro_batches(),
               ": more micro-batches than the --batch-size of ", o.batch_size());
  SP_CHECK_ARG(o.delay_lr_anneal_epochs() >= 0, "--delay-lr-anneal-epochs must be >= 0, got ",
               o.delay_lr_anneal_epochs());
  SP_CHECK_ARG(o.delay_aware_lr() || o.delay_lr_anneal_epochs() == 0,
               "--delay-lr-anneal-epochs needs --delay-aware-lr");
  SP_CHECK_ARG(!o.weight_prediction() || o.momentum() > 0,
               "--weight-prediction extrapolates along the momentum; it needs --momentum > 0");
  SP_CHECK_ARG(o.schedule() == "hybrid" || o.hybrid_switch().empty(),
               "--hybrid-switch needs --schedule hybrid");
  SP_CHECK_ARG(o.schedule() != "hybrid" || !o.hybrid_switch().empty(),
               "--schedule hybrid needs --hybrid-switch (epochs, or steps with an s suffix)");
}

// group: where this process sits when the run uses --executor processes; null to run every
// partition here (evaluate_run).
void build(Run& run, const exec::ProcessGroupOptions* group = nullptr) {
  const TrainOptions& o = run.options;
  check_options(o);
  // Fail on cheap checks before loading data.
  const bool processes = o.executor() == "processes";
  if (!processes) exec::make_executor(o.executor());
  const exec::ProcessGroupOptions where =
      processes && group ? group->resolved() : exec::ProcessGroupOptions();
  run.data = data::load_dataset(o.data());
  if (o.train_subset() > 0) run.data.train = run.data.train.subset(o.train_subset());
  if (o.test_subset() > 0) run.data.test = run.data.test.subset(o.test_subset());

  const auto normalization = data::compute_normalization(run.data.train);
  auto loader_options = data::LoaderOptions()
                            .batch_size(o.batch_size())
                            .shuffle(true)
                            .drop_last(o.drop_last())
                            .seed(o.seed())
                            .augment(o.augment())
                            .pad_to(32)
                            .normalization(normalization);
  run.train_loader = std::make_unique<data::Loader>(run.data.train, loader_options);
  run.test_loader = std::make_unique<data::Loader>(
      run.data.test,
      loader_options.batch_size(o.eval_batch_size()).shuffle(false).drop_last(false).augment(false));

  const auto shape = run.train_loader->output_shape();
  models::InputShape input;
  input.channels = shape[0];
  input.height = shape[1];
  input.width = shape[2];
  input.num_classes = run.data.train.num_classes;
  run.options.pipeline(resolve_pipeline(o, input));  // --partitions K --balance: choose the PPV
  torch::manual_seed(o.seed());
  run.model = models::make_model(o.model(), input);
  run.plan = partition::make_plan(run.model, partition::parse_ppv(o.pipeline()));
  const int K = run.plan.num_partitions();
  SP_CHECK_ARG(!processes || !group || where.world_size() == K, "--executor processes: WORLD_SIZE ",
               where.world_size(), " but --pipeline ", o.pipeline(), " gives ", K,
               " partitions; start one rank per partition (stalepipe launch --nproc ", K, ")");

  run.steps_per_epoch = run.train_loader->batches_per_epoch();
  run.total_steps = o.epochs() * run.steps_per_epoch;
  if (o.max_steps() > 0) run.total_steps = std::min(run.total_steps, o.max_steps());
  run.epochs = (run.total_steps + run.steps_per_epoch - 1) / run.steps_per_epoch;
  const int64_t last_batch = run.data.train.size() % o.batch_size();
  SP_CHECK_ARG(o.drop_last() || last_batch == 0 || last_batch >= o.micro_batches(),
               "--micro-batches ", o.micro_batches(), ": the last mini-batch of each epoch has only ",
               last_batch, " samples; use --drop-last or another --batch-size");
  run.switch_step = parse_switch_step(o.hybrid_switch(), run.steps_per_epoch);
  SP_CHECK_ARG(run.switch_step <= run.total_steps, "--hybrid-switch ", o.hybrid_switch(),
               ": training ends after ", run.total_steps, " steps (", run.epochs,
               " epochs); the switch must come no later");

  LrScheduleOptions lr;
  lr.kind = o.lr_schedule();
  lr.base_lr = o.lr();
  lr.warmup_epochs = o.warmup_epochs();
  lr.milestones = o.lr_milestones();
  lr.gamma = o.lr_gamma();
  lr.steps_per_epoch = run.steps_per_epoch;
  lr.total_steps = run.total_steps;
  run.lr = std::make_unique<LrSchedule>(lr);

  const auto devices = parse_devices(o.devices(), K);
  run.threads = o.threads() > 0 ? o.threads()
                                : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  const LrSchedule* lr_schedule = run.lr.get();
  auto api_options = PipelineOptions()
                         .ppv(run.plan.ppv)
                         .schedule(o.schedule())
                         .hybrid_switch_step(run.switch_step)
                         .executor(processes ? "emulated" : o.executor())
                         .devices(devices)
                         .threads(run.threads)
                         .threads_per_worker(o.threads_per_worker())
                         .lr(o.lr())
                         .lr_at([lr_schedule](int64_t t) { return lr_schedule->at(t); })
                         .momentum(o.momentum())
                         .weight_decay(o.weight_decay())
                         .nesterov(o.nesterov())
                         .micro_batches(o.micro_batches())
                         .delay_aware_lr(o.delay_aware_lr())
                         .delay_lr_anneal_steps(std::llround(o.delay_lr_anneal_epochs() * run.steps_per_epoch))
                         .weight_prediction(o.weight_prediction())
                         .spike_compensation(o.spike_compensation())
                         .fixed_weight_norm(o.fixed_weight_norm())
                         .hybrid_norm_reset(o.hybrid_norm_reset());
  run.api = std::make_unique<PipelineTrainer>(run.model, api_options);
  run.pipeline = &run.api->pipeline();
  if (processes && group) {
    // Rendezvous last: every cheap check has passed on this rank.
    run.group = std::make_shared<exec::ProcessGroup>(where, config_hash(o));
    run.api->use_executor(exec::make_processes_executor(run.group));
  }
  run.executor = &run.api->executor();
  const PipelineInfo& info = run.api->info();
  run.threads_per_worker = info.threads_per_worker;
  run.report.units = info.units;
  run.report.staleness = info.staleness;
  run.report.max_in_flight = info.max_in_flight;
  run.report.weight_versions = info.weight_versions;
  run.report.parameters = info.parameters;
  run.report.stale_weight_percent = info.stale_weight_percent;
}

// --executor processes: gives every rank the last rank's values of `values` (doubles).
void share_from_last_rank(Run& run, std::vector<double*> values) {
  if (!run.group) return;
  auto t = torch::zeros({static_cast<int64_t>(values.size())}, torch::kDouble);
  for (size_t i = 0; i < values.size(); ++i) t[i] = *values[i];
  run.group->broadcast(t, run.group->size() - 1);
  for (size_t i = 0; i < values.size(); ++i) *values[i] = t[i].item<double>();
}

// What the run's schedule amounts to: with one partition every schedule is sequential.
std::string schedule_name(const Run& run) {
  return run.plan.num_partitions() == 1 ? "sequential" : run.options.schedule();
}

std::pair<double, double> evaluate(Run& run) {
  at::set_num_threads(run.threads);
  torch::NoGradGuard no_grad;
  double loss_sum = 0;
  int64_t correct = 0, samples = 0;
  const auto order = run.test_loader->epoch_order(0);
  for (int64_t b = 0; b < run.test_loader->batches_per_epoch(); ++b) {
    torch::Tensor x, y;
    if (run.group) {
      // Through the pipeline ranks; only the last one sees logits and labels.
      data::Batch batch;
      if (run.feeds_data()) batch = run.test_loader->batch(0, b, order);
      auto out = exec::predict_distributed(*run.group, run.pipeline->stage(run.rank()), batch.x,
                                           batch.y, b);
      if (!out.logits.defined()) continue;
      x = out.logits;
      y = out.labels.to(x.device());
    } else {
      const data::Batch batch = run.test_loader->batch(0, b, order);
      x = run.pipeline->predict(batch.x);
      y = batch.y.to(x.device());
    }
    loss_sum += torch::nn::functional::cross_entropy(
                    x, y, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
                    .item<double>();
    correct += x.argmax(1).eq(y).sum().item<int64_t>();
    samples += y.size(0);
  }
  double correct_d = static_cast<double>(correct), samples_d = static_cast<double>(samples);
  share_from_last_rank(run, {&loss_sum, &correct_d, &samples_d});
  return {loss_sum / samples_d, correct_d / samples_d};
}

void log_line(const TrainHooks& hooks, Progress& progress, const std::string& line) {
  progress.clear();
  if (hooks.log) {
    hooks.log(line);
  } else {
    std::fprintf(stderr, "%s\n", line.c_str());
  }
}

nlohmann::json metrics_json(const EpochMetrics& m) {
  return {{"epoch", m.epoch},          {"step", m.step},
          {"lr", m.lr},                {"train_loss", m.train_loss},
          {"train_accuracy", m.train_accuracy}, {"test_loss", m.test_loss},
          {"test_accuracy", m.test_accuracy},   {"images_per_second", m.images_per_second},
          {"wall_seconds", m.wall_seconds}};
}

// Keeps the first `epochs` lines of metrics.jsonl (a resumed run rewrites the rest).
std::vector<EpochMetrics> reload_metrics(const std::string& path, int64_t epochs) {
  std::vector<EpochMetrics> kept;
  std::string text;
  if (fs::exists(path)) {
    std::ifstream in(path);
    std::string line;
    while (static_cast<int64_t>(kept.size()) < epochs && std::getline(in, line)) {
      const auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      SP_CHECK(!j.is_discarded(), path, ": line ", kept.size() + 1, " is not JSON");
      EpochMetrics m;
      m.epoch = j.value("epoch", int64_t{0});
      m.step = j.value("step", int64_t{0});
      m.lr = j.value("lr", 0.0);
      m.train_loss = j.value("train_loss", 0.0);
      m.train_accuracy = j.value("train_accuracy", 0.0);
      m.test_loss = j.value("test_loss", 0.0);
      m.test_accuracy = j.value("test_accuracy", 0.0);
      m.images_per_second = j.value("images_per_second", 0.0);
      m.wall_seconds = j.value("wall_seconds", 0.0);
      kept.push_back(m);
      text += line + "\n";
    }
  }
  SP_CHECK(static_cast<int64_t>(kept.size()) == epochs, path, ": has ", kept.size(),
           " epoch lines but the checkpoint is after epoch ", epochs);
  write_file_atomic(path, text);
  return kept;
}

// 1-based numbers of this process's partitions whose weights hold a NaN or an infinity.
std::vector<int> partitions_with_bad_weights(Run& run) {
  std::vector<int> bad;
  for (int k = 0; k < run.pipeline->num_stages(); ++k) {
    if (run.group && k != run.rank()) continue;  // another process trains it
    for (const auto& p : run.pipeline->stage(k).module()->parameters()) {
      if (!torch::isfinite(p).all().item<bool>()) {
        bad.push_back(k + 1);
        break;
      }
    }
  }
  return bad;
}

// The one-line account of a divergence at mini-batch `step`: where, the likely cause, the
// remedies, and the checkpoint that survives.
std::string divergence_message(Run& run, int64_t step, const std::string& what,
                               int64_t checkpoint_step) {
  const auto bad = partitions_with_bad_weights(run);
  std::ostringstream out;
  out << "mini-batch " << step << " (epoch " << step / run.steps_per_epoch + 1
      << "): the run diverged: " << what;
  if (!bad.empty()) {
    out << "; non-finite weights in partition";
    for (size_t i = 0; i < bad.size(); ++i) out << (i ? "," : " ") << bad[i];
  }
  // The most stale partition is the likely culprit: its gradients are the oldest.
  const auto& d = run.report.staleness;
  const int worst = static_cast<int>(std::max_element(d.begin(), d.end()) - d.begin());
  if (d[worst] > 0) {
    out << ". Partition " << worst + 1 << " computes with weights d_" << worst + 1 << " = "
        << d[worst] << " update(s) stale at lr " << run.lr->at(step)
        << "; try --warmup-epochs, --delay-aware-lr, --weight-prediction, --spike-compensation,"
           " --schedule hybrid or a smaller --lr";
  } else {
    out << ". No partition uses stale weights; try a smaller --lr or --warmup-epochs";
  }
  out << (checkpoint_step >= 0 ? c10::str(". The checkpoint of step ", checkpoint_step, " is intact")
                               : std::string(". No checkpoint was written"));
  return out.str();
}

TrainResult run_training(Run& run, const CheckpointInfo* from, const TrainHooks& all_hooks) {
  const TrainOptions& o = run.options;
  const std::string out = o.out();
  TrainHooks hooks = all_hooks;
  if (!run.leader()) hooks.log = [](const std::string&) {};  // rank 0 speaks for the group
  const int K = run.plan.num_partitions();
  const std::string hash = config_hash(o);
  TrainResult result;
  result.partitions = run.report;
  Progress progress(o.progress(), run.total_steps);
  reset_peak_rss();

  if (!out.empty()) {
    fs::create_directories(out);
    if (!from && run.leader()) write_file_atomic((fs::path(out) / "config.json").string(), to_json(o).dump(2) + "\n");
  }
  const std::string metrics_path =
      out.empty() || !run.leader() ? "" : (fs::path(out) / "metrics.jsonl").string();
  sim::TraceRecorder trace;  // --trace FILE: every op of every segment, written at the end
  auto write_trace = [&] {
    if (!o.trace().empty()) {
      // Each rank records only its own worker.
      trace.write(run.group ? c10::str(o.trace(), ".rank", run.rank()) : o.trace(), c10::str(o.model(), " --pipeline ", partition::format_ppv(run.plan.ppv),
                                      ", ", o.schedule(), ", ", run.executor->name()));
    }
  };

  int64_t step = 0, first_epoch = 0;
  double wall_before = 0;
  if (from) {
    step = from->step;
    first_epoch = from->epochs_done;
    wall_before = from->wall_seconds;
    if (!metrics_path.empty()) result.epochs = reload_metrics(metrics_path, from->epochs_done);
  } else if (!metrics_path.empty()) {
    write_file_atomic(metrics_path, "");
  }

  {
    std::ostringstream head;
    head << "model " << o.model() << " (" << run.model.num_parameters() << " parameters), data "
         << o.data() << " (" << run.data.train.size() << " train / " << run.data.test.size()
         << " test), " << run.steps_per_epoch << " steps/epoch, executor " << run.executor->name();
    log_line(hooks, progress, head.str());
    for (int k = 0; k < K; ++k) {
      log_line(hooks, progress,
               c10::str("  partition ", k + 1, ": units ", run.report.units[k], ", ",
                        run.report.parameters[k], " parameters, staleness d=",
                        run.report.staleness[k], ", activations in flight ",
                        run.report.max_in_flight[k],
                        run.report.weight_versions[k] > 1
                            ? c10::str(", weight versions ", run.report.weight_versions[k])
                            : "",
                        ", ", run.threads_per_worker[k],
                        " thread(s), ", run.pipeline->stage(k).device().str()));
    }
    log_line(hooks, progress,
             c10::str("  pipeline ", partition::format_ppv(run.plan.ppv), ": ", K,
                      " partitions, schedule ", schedule_name(run), ", stale weights ",
                      run.report.stale_weight_percent, "%",
                      run.switch_step >= 0 ? c10::str(", switch to sequential at step ", run.switch_step) : ""));
    if (from) log_line(hooks, progress, c10::str("resuming at step ", step, " (epoch ", first_epoch + 1, ")"));
  }

  double wall = wall_before;
  double session_samples = 0, session_seconds = 0;  // this process only, for images/s
  // Running totals of the epoch in progress (restored from a mid-epoch checkpoint).
  double loss_sum = 0, epoch_seconds = 0;
  int64_t correct = 0, samples = 0;
  if (from) {
    loss_sum = from->epoch_loss_sum;
    correct = from->epoch_correct;
    samples = from->epoch_samples;
    epoch_seconds = from->epoch_seconds;
  }
  // With processes, the losses arrive at the last rank only: every rank takes its totals.
  auto sync_epoch_totals = [&] {
    if (!run.group) return;
    double correct_d = static_cast<double>(correct), samples_d = static_cast<double>(samples);
    const double before = samples_d;
    share_from_last_rank(run, {&loss_sum, &correct_d, &samples_d});
    correct = static_cast<int64_t>(correct_d);
    samples = static_cast<int64_t>(samples_d);
    session_samples += samples_d - before;
  };
  int64_t checkpoint_step = from ? from->step : -1;
  auto save = [&](int64_t at_step, int64_t epochs_done) {
    if (out.empty()) return;
    // Never overwrite the last good checkpoint with weights that are no longer numbers.
    if (!partitions_with_bad_weights(run).empty()) {
      throw DivergedError(divergence_message(run, at_step - 1, "the weights are not finite", checkpoint_step));
    }
    CheckpointInfo info;
    info.step = at_step;
    info.epochs_done = epochs_done;
    info.ppv = partition::format_ppv(run.plan.ppv);
    info.config_hash = hash;
    info.wall_seconds = wall;
    if (epochs_done * run.steps_per_epoch < at_step) {  // mid-epoch
      sync_epoch_totals();
      info.epoch_loss_sum = loss_sum;
      info.epoch_correct = correct;
      info.epoch_samples = samples;
      info.epoch_seconds = epoch_seconds;
    }
    if (!run.group) {
      save_checkpoint(out, run.pipeline->stages(), info);
    } else {
      save_checkpoint_shard(out, run.pipeline->stage(run.rank()), run.rank(), K, info);
      run.group->barrier();  // every shard of this step is written
      if (run.leader()) write_checkpoint_manifest(out, K, info);
    }
    checkpoint_step = at_step;
    if (hooks.on_checkpoint) hooks.on_checkpoint(at_step);
  };

  for (int64_t epoch = first_epoch; epoch < run.epochs; ++epoch) {
    const int64_t epoch_begin = epoch * run.steps_per_epoch;
    const int64_t epoch_end = std::min(epoch_begin + run.steps_per_epoch, run.total_steps);
    double last_lr = run.lr->at(std::max(step, epoch_begin));
    while (step < epoch_end) {
      int64_t segment_end = epoch_end;
      if (run.switch_step > step) segment_end = std::min(segment_end, run.switch_step);
      if (o.checkpoint_every() > 0) {
        segment_end = std::min(segment_end, (step / o.checkpoint_every() + 1) * o.checkpoint_every());
      }
      std::optional<data::Prefetcher> prefetch;  // only the rank that feeds partition 1 reads
      if (run.feeds_data()) {
        prefetch.emplace(*run.train_loader, epoch, step - epoch_begin, segment_end - epoch_begin);
      }
      exec::SegmentContext context;
      context.input = [&](int64_t t) {
        auto batch = prefetch->next();
        SP_CHECK(batch && batch->index == t - epoch_begin, "data loader out of step at mini-batch ", t);
        return exec::Input{batch->x, batch->y};
      };
      context.lr = [&](int64_t t) { return run.lr->at(t); };
      const auto segment_start = Clock::now();
      int64_t next_loss_step = step;  // the last worker reports steps in order
      context.on_step = [&](int64_t t, const exec::StepLoss& s) {
        next_loss_step = t + 1;
        loss_sum += s.loss * static_cast<double>(s.samples);
        session_samples += static_cast<double>(s.samples);
        correct += s.correct;
        samples += s.samples;
        const double elapsed = epoch_seconds + seconds_since(segment_start);
        progress.step(epoch + 1, t, s.loss, elapsed > 0 ? samples / elapsed : 0);
      };
      context.stop = hooks.stop;
      context.threads_per_worker = run.threads_per_worker;
      if (!o.trace().empty()) context.on_op = trace.callback();

      exec::SegmentResult segment;
      try {
        segment = run.api->run_segment(step, segment_end, context);
      } catch (const DivergedError&) {
        write_trace();
        throw DivergedError(divergence_message(run, next_loss_step, "training loss is not finite",
                                               checkpoint_step));
      }
      const double seconds = seconds_since(segment_start);
      epoch_seconds += seconds;
      wall += seconds;
      session_seconds += seconds;
      last_lr = run.lr->at(std::max<int64_t>(step, segment.end_step - 1));
      step = segment.end_step;
      if (segment.stopped) {
        save(step, epoch);
        log_line(hooks, progress,
                 c10::str("stopped at step ", step, "; pipeline drained",
                          out.empty() ? "" : c10::str(", checkpoint saved; continue with --resume ", out)));
        result.interrupted = true;
        result.steps = step;
        write_trace();
        return result;
      }
      if (o.checkpoint_every() > 0 && step % o.checkpoint_every() == 0 && step < epoch_end) {
        save(step, epoch);
      }
    }

    sync_epoch_totals();
    EpochMetrics m;
    m.epoch = epoch + 1;
    m.step = step;
    m.lr = last_lr;
    m.train_loss = samples ? loss_sum / static_cast<double>(samples) : 0;
    m.train_accuracy = samples ? static_cast<double>(correct) / static_cast<double>(samples) : 0;
    std::tie(m.test_loss, m.test_accuracy) = evaluate(run);
    m.images_per_second = epoch_seconds > 0 ? static_cast<double>(samples) / epoch_seconds : 0;
    m.wall_seconds = wall;
    result.epochs.push_back(m);
    if (!metrics_path.empty()) {
      std::ofstream(metrics_path, std::ios::app) << metrics_json(m).dump() << "\n";
    }
    log_line(hooks, progress,
             c10::str("epoch ", m.epoch, "/", run.epochs, "  step ", m.step, "  lr ", m.lr,
                      "  train loss ", m.train_loss, " acc ", m.train_accuracy, "  test loss ",
                      m.test_loss, " acc ", m.test_accuracy, "  ",
                      static_cast<int64_t>(m.images_per_second), " img/s"));
    save(step, epoch + 1);
    loss_sum = epoch_seconds = 0;
    correct = samples = 0;
  }

  result.steps = step;
  if (!result.epochs.empty()) {
    const auto& last = result.epochs.back();
    result.test_accuracy = last.test_accuracy;
    result.test_loss = last.test_loss;
    result.train_loss = last.train_loss;
  }
  result.wall_seconds = wall;
  result.images_per_second = session_seconds > 0 ? session_samples / session_seconds : 0;
  result.parameters = run.pipeline->parameters();
  write_trace();

  if (!out.empty() && run.leader()) {
    nlohmann::json summary = {
        {"model", o.model()},
        {"dataset", o.data()},
        {"epochs", run.epochs},
        {"steps", result.steps},
        {"seed", o.seed()},
        {"test_accuracy", result.test_accuracy},
        {"test_loss", result.test_loss},
        {"train_loss", result.train_loss},
        {"images_per_second", result.images_per_second},
        {"wall_seconds", result.wall_seconds},
        {"peak_rss_mb", peak_rss_mb()},
        {"ppv", partition::format_ppv(run.plan.ppv)},
        {"partitions", K},
        {"schedule", schedule_name(run)},
        {"hybrid_switch_step", run.switch_step},
        {"executor", run.executor->name()},
        {"threads_per_worker", run.threads_per_worker},
        {"staleness", run.report.staleness},
        {"activations_in_flight", run.report.max_in_flight},
        {"weight_versions", run.report.weight_versions},
        {"micro_batches", o.micro_batches()},
        {"partition_parameters", run.report.parameters},
        {"stale_weight_percent", run.report.stale_weight_percent},
        {"config_hash", hash}};
    write_file_atomic((fs::path(out) / "summary.json").string(), summary.dump(2) + "\n");
  }
  log_line(hooks, progress,
           c10::str("done: test accuracy ", result.test_accuracy, ", ", static_cast<int64_t>(result.images_per_second),
                    " img/s, ", result.wall_seconds, " s training", out.empty() ? "" : ", results in " + out));
  return result;
}

}  // namespace

TrainResult train(const TrainOptions& options, const TrainHooks& hooks) {
  SP_CHECK_ARG(options.out().empty() || !has_checkpoint(options.out()), "--out ", options.out(),
               ": already holds a run with a checkpoint; continue it with --resume ",
               options.out(), " or choose another directory");
  Run run;
  run.options = options;
  build(run, &hooks.process_group);
  return run_training(run, nullptr, hooks);
}

namespace {

// The settings of the run in run_dir (its config.json).
TrainOptions read_run_config(const std::string& run_dir) {
  const std::string config_path = (fs::path(run_dir) / "config.json").string();
  SP_CHECK(fs::exists(config_path), run_dir, ": no config.json there; not a stalepipe run directory");
  return options_from_json(read_json_file(config_path), config_path);
}

}  // namespace

TrainResult resume(const std::string& run_dir, const TrainHooks& hooks) {
  Run run;
  run.options = read_run_config(run_dir);
  run.options.out(run_dir);
  build(run, &hooks.process_group);
  const CheckpointInfo info =
      run.group ? load_checkpoint_shard(run_dir, run.pipeline->stage(run.rank()), run.rank(),
                                        run.pipeline->num_stages())
                : load_checkpoint(run_dir, run.pipeline->stages());
  SP_CHECK(info.config_hash == config_hash(run.options), "--resume ", run_dir,
           ": the checkpoint was written with different settings than config.json");
  return run_training(run, &info, hooks);
}

std::pair<double, double> evaluate_run(const std::string& run_dir, int threads) {
  Run run;
  run.options = read_run_config(run_dir);
  if (threads > 0) run.options.threads(threads);
  build(run);
  load_checkpoint(run_dir, run.pipeline->stages());
  return evaluate(run);
}

}  // namespace stalepipe::train
