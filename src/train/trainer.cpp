#include "stalepipe/train/trainer.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>

#include "model_file.h"
#include "stalepipe/train/run_data.h"
#include "run_files.h"
#include "run_lock.h"
#include "common/json_file_impl.h"
#include "stalepipe/api/loader_source.h"
#include "stalepipe/api/options_json.h"
#include "stalepipe/common/clock.h"
#include "stalepipe/data/loader.h"
#include "stalepipe/data/registry.h"
#include "stalepipe/exec/checkpoint.h"
#include "stalepipe/models/torchscript.h"
#include "stalepipe/models/zoo.h"
#include "stalepipe/sim/trace.h"
#include "stalepipe/train/progress.h"

namespace stalepipe::train {
namespace fs = std::filesystem;
namespace {

// " acc 0.91" in the progress lines, nothing where there is no accuracy.
std::string accuracy_text(const std::optional<double>& accuracy) {
  return accuracy ? c10::str(" acc ", *accuracy) : std::string();
}

// The zoo model RunOptions::model names, or the TorchScript file RunOptions::model_file (at
// the absolute path `file` records).
models::Model make_run_model(const RunOptions& r, const models::InputShape& input,
                             const std::optional<ModelFile>& file) {
  return file ? models::load_torchscript(file->path, input)
              : models::make_model(r.model(), input, models::ZooOptions().dropout(r.dropout()));
}

// What the logs and summary.json call the model.
std::string model_label(const RunOptions& r) { return r.model_file().empty() ? r.model() : r.model_file(); }

// Everything a run builds from its options, in the data path's order.
struct Run {
  Options options;
  // The file RunOptions::model_file names: as it is now for a fresh run, as config.json
  // records it for a resumed one (nullopt there for a run written before it recorded it).
  std::optional<ModelFile> model_file;
  // The image folder config.json records, for a resumed run (nullopt for a fresh one).
  std::optional<DataFolder> recorded_folder;
  CallerData* caller = nullptr;  // the caller's batches, read instead of a data set
  RunData data;                  // the data set's loaders (none with the caller's batches)
  std::unique_ptr<LoaderSource> train_loader, test_loader;  // their batches, read ahead
  BatchSource* train = nullptr;  // what the loop reads: the loaders' batches or the caller's
  BatchSource* test = nullptr;   // null: no evaluation
  std::unique_ptr<PipelineTrainer> trainer;
};

// Where training batches are copied ahead: a GPU first partition with one replica (replicas in
// one process split the batch on the host), else nowhere (the CPU).
torch::Device input_device(const Options& o) {
  const auto& devices = o.pipeline().devices();
  const bool copy_ahead = !devices.empty() && devices[0].is_cuda() && o.pipeline().replicas() == 1;
  return copy_ahead ? devices[0] : torch::Device(torch::kCPU);
}

// The data set DataOptions::dataset names, as loaders read ahead; returns one sample's shape.
models::InputShape load_data_set(Run& run) {
  Options& o = run.options;
  const DataOptions& d = o.data();
  const bool cuda_input = !o.pipeline().devices().empty() && o.pipeline().devices()[0].is_cuda();
  run.data = load_run_data(o.data(), o.optimizer().loss(), o.run().seed(), resolved_data_threads(o), cuda_input,
                           run.recorded_folder);
  const int64_t last_batch = run.data.sources.train->size() % d.batch_size();
  const int M = o.pipeline().micro_batches(), R = o.pipeline().replicas();
  SP_CHECK_ARG(d.drop_last() || last_batch == 0 || last_batch >= M * R,
               field_name(R > 1 ? Field::replicas : Field::micro_batches), " ", R > 1 ? R : M,
               R > 1 && M > 1 ? c10::str(" x ", M, " micro-batches") : "", ": the last mini-batch of each epoch has only ",
               last_batch, " samples; set DataOptions::drop_last or another DataOptions::batch_size");
  const bool sharded = o.pipeline().executor() == ExecutorKind::kProcesses && R > 1;
  const bool raw_pixels = input_device(o).is_cuda();
  if (sharded || raw_pixels) {
    // Each replica's first rank reads only its slice of every mini-batch; a GPU that takes the
    // batches ahead normalises their pixels itself (a quarter of the bytes to copy).
    const data::Loader& whole = *run.data.train_loader;
    data::LoaderOptions train(whole.options());
    if (sharded) train.shard_index(own_replica(o.pipeline())).shard_count(R);
    run.data.train_loader = std::make_unique<data::Loader>(whole.shared_source(), train.raw_pixels(raw_pixels));
  }
  run.train_loader = std::make_unique<LoaderSource>(*run.data.train_loader, input_device(o));
  run.test_loader = std::make_unique<LoaderSource>(*run.data.test_loader);
  run.train = run.train_loader.get();
  run.test = run.test_loader.get();

  const auto shape = run.data.train_loader->output_shape();
  models::InputShape input;
  input.channels = shape[0];
  input.height = shape[1];
  input.width = shape[2];
  // The network's output width: the classes, or the regression target's width.
  const data::SampleSource& train = *run.data.sources.train;
  input.num_classes = train.num_classes() > 0 ? train.num_classes() : train.targets().size(1);
  return input;
}

// The caller's batches (CallerData); returns one sample's shape.
models::InputShape take_caller_data(Run& run) {
  const CallerData& c = *run.caller;
  SP_CHECK_ARG(c.train, "the data held by the caller (", c.name, ") has no training batches");
  SP_CHECK_ARG(run.options.pipeline().executor() != ExecutorKind::kProcesses,
               "PipelineOptions::executor processes: its ranks read a data set each of them can open; the data held "
               "by the caller (", c.name, ") trains with the threads or emulated executor");
  run.train = c.train.get();
  run.test = c.test.get();
  return c.input;
}

void build(Run& run) {
  Options& o = run.options;
  check_options(o);  // cheap checks before the data is loaded
  const models::InputShape input = run.caller ? take_caller_data(run) : load_data_set(run);
  if (run.model_file) check_unchanged(*run.model_file);
  if (!o.run().model_file().empty() && !run.model_file) run.model_file = model_file_now(o.run().model_file());
  torch::manual_seed(o.run().seed());
  auto model = make_run_model(o.run(), input, run.model_file);
  run.trainer = std::make_unique<PipelineTrainer>(std::move(model), o, std::max<int64_t>(0, run.train->batches_per_epoch()));
  if (run.model_file && o.pipeline().executor() == ExecutorKind::kProcesses) {
    check_same_on_every_rank(run.trainer->group(), *run.model_file);
  }
  // config.json records the cut and the layout chosen, so that a resumed run keeps them.
  o.pipeline().ppv(run.trainer->plan().ppv).layout(run.trainer->options().pipeline().layout());
}

// "fashion-mnist (60000 train / 10000 test, 1x32x32, N unreadable images left out)" for the
// start-up line.
std::string data_text(const Run& run) {
  const auto count = [](int64_t n) { return n >= 0 ? std::to_string(n) : std::string("?"); };
  if (run.caller) {
    const models::InputShape& in = run.caller->input;
    return c10::str(run.caller->name, " (", count(run.caller->train_samples), " train / ",
                    run.test ? count(run.caller->test_samples) : "no", " test, ", in.channels, "x", in.height, "x",
                    in.width, ")");
  }
  const auto shape = run.data.train_loader->output_shape();
  const auto& scanned = run.data.sources.scanned;
  return c10::str(run.options.data().dataset(), " (", run.data.sources.train->size(), " train / ",
                  run.data.sources.test->size(), " test, ", shape[0], "x", shape[1], "x", shape[2],
                  scanned && !scanned->skipped.empty() ? c10::str(", ", scanned->skipped.size(), " unreadable images left out")
                                                       : std::string(), ")");
}

// Epochs the run trains (the last may be partial when max_steps cuts it).
int64_t planned_epochs(const Run& run) {
  const int64_t spe = run.train->batches_per_epoch();
  if (spe <= 0 || run.trainer->total_steps() < 0) return run.options.run().epochs();
  return (run.trainer->total_steps() + spe - 1) / spe;
}

std::string schedule_name(const PipelineTrainer& t) {
  return t.plan().num_partitions() == 1 ? "sequential" : schedule::to_string(t.options().pipeline().schedule());
}

// Where the replicas run: R x K workers here, or which ranks run which replica.
void log_replicas(const Run& run, const std::function<void(const std::string&)>& log) {
  const PipelineInfo& info = run.trainer->info();
  const int R = info.replicas, K = static_cast<int>(info.units.size());
  log(c10::str("  replicas ", R, ": each trains on its 1/", R, " of every mini-batch of ", run.options.data().batch_size(),
               " and sums its gradients with the others' before each update"));
  if (run.options.pipeline().executor() != ExecutorKind::kProcesses) {
    log(c10::str("    ", R * K, " workers in this process"));
    return;
  }
  for (int r = 0; r < R; ++r) {
    log(c10::str("    replica ", r + 1, ": rank", K > 1 ? c10::str("s ", r * K, "-", r * K + K - 1) : c10::str(" ", r),
                 K > 1 ? c10::str(" (partitions 1-", K, ")") : std::string()));
  }
}

// The start-up lines: data, model, each partition, the pipeline.
void log_setup(Run& run, const std::function<void(const std::string&)>& log) {
  const PipelineTrainer& t = *run.trainer;
  const Options& o = run.options;
  const PipelineInfo& info = t.info();
  const int64_t steps_per_epoch = run.train->batches_per_epoch();
  log(c10::str("model ", model_label(o.run()), " (", t.model().num_parameters(), " parameters), data ", data_text(run),
               ", ", steps_per_epoch > 0 ? std::to_string(steps_per_epoch) : std::string("?"), " steps/epoch, executor ",
               exec::to_string(o.pipeline().executor())));
  for (size_t k = 0; k < info.units.size(); ++k) {
    log(c10::str("  partition ", k + 1, ": units ", info.units[k], ", ", info.parameters[k],
                 " parameters, staleness d=", info.staleness[k], ", activations in flight ",
                 info.max_in_flight[k],
                 info.weight_versions[k] > 1 ? c10::str(", weight versions ", info.weight_versions[k]) : "",
                 ", ", info.threads_per_worker[k], " thread(s), ", info.devices[k].str()));
  }
  log(c10::str("  pipeline ", partition::format_ppv(info.ppv), ": ", info.units.size(), " partitions, schedule ",
               schedule_name(t), ", stale weights ", info.stale_weight_percent, "%",
               info.hybrid_switch_step >= 0 ? c10::str(", switch to sequential at step ", info.hybrid_switch_step) : ""));
  if (info.replicas > 1) log_replicas(run, log);
}

// Per partition, the passes that ran as CUDA graphs and those that ran eagerly while graphs
// were on (exec::Stage::graphed_passes); null for a partition this process did not run
// (another rank's).
nlohmann::json graph_passes_json(exec::Pipeline& pipeline) {
  nlohmann::json graphed = nlohmann::json::array(), eager = nlohmann::json::array();
  for (const exec::Stage* stage : pipeline.stages()) {
    const bool ran = stage->graphed_passes() + stage->eager_passes() > 0;
    graphed.push_back(ran ? nlohmann::json(stage->graphed_passes()) : nlohmann::json());
    eager.push_back(ran ? nlohmann::json(stage->eager_passes()) : nlohmann::json());
  }
  return {{"graphed_passes", graphed}, {"eager_passes", eager}};
}

// The log line of the same: "cuda graphs: partition 1 120 graphed, 9 eager passes; ...".
std::string graph_passes_line(exec::Pipeline& pipeline) {
  std::string line = "cuda graphs:";
  for (const exec::Stage* stage : pipeline.stages()) {
    if (stage->graphed_passes() + stage->eager_passes() == 0) continue;
    line += c10::str(line.back() == ':' ? " " : "; ", "partition ", stage->index() + 1, " ",
                     stage->graphed_passes(), " graphed, ", stage->eager_passes(), " eager passes");
  }
  return line;
}

nlohmann::json summary_json(Run& run, const TrainResult& r) {
  const PipelineTrainer& t = *run.trainer;
  const Options& o = run.options;
  nlohmann::json s = {{"model", model_label(o.run())}, {"dataset", o.data().dataset()},
                      {"epochs", planned_epochs(run)},
                      {"steps", r.steps}, {"seed", o.run().seed()},
                      {"test_loss", r.test_loss},
                      {"train_loss", r.train_loss}, {"images_per_second", r.images_per_second},
                      {"wall_seconds", r.wall_seconds}, {"peak_rss_mb", peak_rss_mb()},
                      {"ppv", partition::format_ppv(r.info.ppv)}, {"partitions", r.info.units.size()},
                      {"schedule", schedule_name(t)}, {"hybrid_switch_step", r.info.hybrid_switch_step},
                      {"executor", exec::to_string(o.pipeline().executor())},
                      {"threads_per_worker", r.info.threads_per_worker},
                      {"activations_in_flight", r.info.max_in_flight},
                      {"weight_versions", r.info.weight_versions},
                      {"micro_batches", o.pipeline().micro_batches()},
                      {"partition_parameters", r.info.parameters},
                      {"stale_weight_percent", r.info.stale_weight_percent},
                      {"machines", r.machines}, {"config_hash", config_hash(o)}};
  s.update(staleness_json(r.info));
  if (r.test_accuracy) s["test_accuracy"] = *r.test_accuracy;
  s["evaluations"] = r.evaluations.size();
  s["eval_every"] = o.run().eval_every();
  s["time_to_target"] = time_to_target_json(r.time_to_target);
  if (o.pipeline().cuda_graphs()) s.update(graph_passes_json(run.trainer->pipeline()));
  return s;
}

// --trace FILE: every op of the run; with processes each rank records its own worker.
void write_trace(Run& run, sim::TraceRecorder& trace) {
  const Options& o = run.options;
  if (o.run().trace().empty()) return;
  const bool ranks = o.pipeline().executor() == ExecutorKind::kProcesses;
  const PipelineTrainer& t = *run.trainer;
  trace.write(ranks ? c10::str(o.run().trace(), ".rank", o.pipeline().group().resolved().rank()) : o.run().trace(),
              c10::str(model_label(o.run()), ", PPV ", partition::format_ppv(t.info().ppv), ", ",
                       schedule_name(t), ", ", run.trainer->executor().name()));
}

TrainResult conclude(Run& run, TrainResult result, const FitResult& fitted, const TrainHooks& hooks,
                     const std::function<void(const std::string&)>& log);

// What the loop reports, recorded in `result` and the run directory, logged, and handed on
// to the caller's hooks.
struct Recorder {
  Run& run;
  const TrainHooks& hooks;
  const std::function<void(const std::string&)>& log;
  Progress& progress;
  TrainResult& result;
  int64_t checkpoint_step = -1;  // of the last checkpoint on disk (-1: none)

  FitHooks fit_hooks(sim::TraceRecorder& trace) {
    PipelineTrainer& t = *run.trainer;
    const std::string& out = run.options.run().out();
    const bool leader = t.group().leader();
    FitHooks fit;
    fit.stop = hooks.stop;
    fit.suspended_ns = hooks.suspended_ns;
    fit.on_warning = hooks.on_warning ? hooks.on_warning : log;
    const auto started = SteadyClock::now();
    auto samples = std::make_shared<int64_t>(0);
    fit.on_step = [this, started, samples, &t](const StepLoss& l) {
      *samples += l.samples;
      const double seconds = seconds_since(started);
      progress.step(t.epochs_done() + 1, l.step, l.loss, seconds > 0 ? static_cast<double>(*samples) / seconds : 0);
      if (hooks.on_step) hooks.on_step(l);
    };
    if (!run.options.run().trace().empty()) fit.on_op = trace.callback();
    fit.on_epoch = [this, out, leader, epochs = planned_epochs(run)](const EpochSummary& m) {
      result.epochs.push_back(m);
      if (!out.empty() && leader) append_metrics(out, m);
      const double loader = run.train_loader ? run.train_loader->loader_images_per_second() : 0;
      log(c10::str("epoch ", m.epoch, "/", epochs, "  step ", m.end_step, "  lr ", m.lr,
                   "  train loss ", m.train_loss, accuracy_text(m.train_accuracy),
                   run.test ? c10::str("  test loss ", m.test_loss, accuracy_text(m.test_accuracy)) : std::string(),
                   "  ", static_cast<int64_t>(m.images_per_second), " img/s",
                   run.train_loader ? c10::str(" (loader ", static_cast<int64_t>(loader), ")") : std::string()));
      if (hooks.on_epoch) hooks.on_epoch(m);
    };
    fit.on_eval = [this, out, leader](const EvalPoint& p) {
      result.evaluations.push_back(p);
      if (!p.epoch_end) {  // the epoch's line records the others
        if (!out.empty() && leader) append_metrics(out, p);
        log(c10::str("eval at step ", p.step, " (epoch ", p.epoch, ")  test loss ", p.result.loss,
                     accuracy_text(p.result.accuracy), "  after ", p.wall_seconds, " s training"));
      }
      if (hooks.on_eval) hooks.on_eval(p);
    };
    fit.on_checkpoint = [this, out, &t](int64_t step) {
      if (out.empty()) return;
      t.save(out);
      checkpoint_step = step;
      if (hooks.on_checkpoint) hooks.on_checkpoint(step);
    };
    return fit;
  }
};

// The run directory's files as a sitting begins: config.json and the rest for a fresh run,
// the metrics so far for a resumed one (into `result`).
void start_run_files(Run& run, bool resumed, TrainResult& result) {
  const PipelineTrainer& t = *run.trainer;
  const std::string& out = run.options.run().out();
  fs::create_directories(out);
  if (!resumed) write_config(out, run.options, run.model_file, run.data.folder, run.caller != nullptr);
  if (!resumed) write_skipped_images(out, run.data);
  result.machines = record_sitting(out, resumed ? t.step() : 0, !resumed);
  if (resumed) {
    MetricsHistory history = reload_metrics(out, t.epochs_done(), t.step());
    result.epochs = std::move(history.epochs);
    result.evaluations = std::move(history.evaluations);
  } else {
    start_metrics(out);
  }
}

TrainResult run_training(Run& run, bool resumed, const TrainHooks& hooks) {
  PipelineTrainer& t = *run.trainer;
  const Options& o = run.options;
  const bool leader = t.group().leader();  // rank 0 speaks and writes for the group
  Progress progress(o.run().progress(), std::max<int64_t>(1, t.total_steps()));
  const std::function<void(const std::string&)> log = [&](const std::string& line) {
    if (!leader) return;
    progress.clear();
    if (hooks.log) hooks.log(line); else std::fprintf(stderr, "%s\n", line.c_str());
  };
  reset_peak_rss();
  TrainResult result;
  if (!o.run().out().empty() && leader) start_run_files(run, resumed, result);
  log_setup(run, log);
  if (resumed) log(c10::str("resuming at step ", t.step(), " (epoch ", t.epochs_done() + 1, ")"));

  Recorder recorder{run, hooks, log, progress, result, resumed ? t.step() : -1};
  sim::TraceRecorder trace;
  const FitHooks fit = recorder.fit_hooks(trace);
  FitResult fitted;
  try {
    fitted = t.fit(*run.train, fit, run.test);
  } catch (const DivergedError& e) {
    write_trace(run, trace);
    const int64_t saved = recorder.checkpoint_step;
    throw DivergedError(c10::str(e.what(), saved >= 0 ? c10::str(". The checkpoint of step ", saved, " is intact")
                                                       : std::string(". No checkpoint was written")));
  }
  write_trace(run, trace);
  return conclude(run, std::move(result), fitted, hooks, log);
}

// The result of a fit that ended; summary.json and the last line when it was not stopped.
TrainResult conclude(Run& run, TrainResult result, const FitResult& fitted, const TrainHooks& hooks,
                     const std::function<void(const std::string&)>& log) {
  PipelineTrainer& t = *run.trainer;
  const std::string& out = run.options.run().out();
  result.info = t.info();
  result.steps = fitted.steps;
  result.interrupted = fitted.stopped;
  result.wall_seconds = fitted.wall_seconds;
  result.images_per_second = fitted.images_per_second;
  if (fitted.stopped) {
    log(c10::str("stopped at step ", t.step(), "; pipeline drained",
                 out.empty() ? "" : c10::str(", checkpoint saved in ", out, "; resume it to continue")));
    return result;
  }
  if (!result.epochs.empty()) {
    result.test_accuracy = result.epochs.back().test_accuracy;
    result.test_loss = result.epochs.back().test_loss;
    result.train_loss = result.epochs.back().train_loss;
  }
  result.parameters = t.parameters();
  result.time_to_target = time_to_targets(result.evaluations, run.options.run().targets());
  if (!out.empty() && t.group().leader()) write_summary(out, summary_json(run, result));
  log(c10::str("done: test", result.test_accuracy ? c10::str(" accuracy ", *result.test_accuracy) : c10::str(" loss ", result.test_loss),
               ", ", static_cast<int64_t>(result.images_per_second),
               " img/s, ", result.wall_seconds, " s training", out.empty() ? "" : ", results in " + out));
  if (run.options.pipeline().cuda_graphs()) log(graph_passes_line(t.pipeline()));
  for (const TargetTime& target : result.time_to_target) {
    log(target.reached ? c10::str("target ", target.target, "%: reached at step ", target.reached->step, " (epoch ",
                                  target.reached->epoch, ") after ", target.reached->wall_seconds, " s training")
                       : c10::str("target ", target.target, "%: not reached"));
  }
  if (hooks.on_trained) hooks.on_trained(t);
  return result;
}

// The lock of this process's part of the run directory (run_lock.h): with processes each
// rank writes its own shard, so each rank locks its own file.
std::optional<RunLock> lock_run(const Options& o) {
  if (o.run().out().empty()) return std::nullopt;
  const bool ranks = o.pipeline().executor() == ExecutorKind::kProcesses;
  const int rank = ranks ? o.pipeline().group().resolved().rank() : 0;
  return std::make_optional<RunLock>(o.run().out(), lock_name(rank));
}


// A run trained on CallerData continues only with data given again, and only such a run does.
void check_caller_data(const std::string& run_dir, const Options& recorded, const CallerData* data, const char* what) {
  const bool held = data_from_caller(run_dir);
  SP_CHECK_ARG(!held || data, run_dir, ": trained on data held by the program that trained it (",
               recorded.data().dataset(), "); ", what, " it from a program that gives the same data");
  SP_CHECK_ARG(held || !data, run_dir, ": trained on the data set ", recorded.data().dataset(),
               ", which it reads itself; ", what, " it without data from the caller");
}

}  // namespace

TrainResult train(const Options& options, const TrainHooks& hooks, CallerData* data) {
  const std::string& out = options.run().out();
  check_options(options);  // a mistake in the options leaves no directory behind
  // Locked before the checkpoint check, so two runs started together cannot both pass it.
  const auto lock = lock_run(options);
  SP_CHECK_ARG(out.empty() || !exec::has_checkpoint(out), "RunOptions::out ", out,
               ": already holds a run with a checkpoint; resume it or choose another directory");
  Run run;
  run.options = options;
  run.caller = data;
  if (data) run.options.data().dataset(data->name);
  build(run);
  return run_training(run, false, hooks);
}

Options read_run_config(const std::string& run_dir) {
  const std::string config_path = (fs::path(run_dir) / "config.json").string();
  SP_CHECK(fs::exists(config_path), run_dir, ": no config.json there; not a stalepipe run directory");
  Options o = options_from_json(read_json_file(config_path), config_path);
  o.run().out(run_dir);
  return o;
}

TrainResult resume(const std::string& run_dir, const TrainHooks& hooks, const exec::ProcessGroupOptions& group,
                   CallerData* data) {
  Run run;
  run.options = read_run_config(run_dir);
  check_caller_data(run_dir, run.options, data, "resume");
  run.caller = data;
  run.model_file = recorded_model_file(run_dir);
  run.recorded_folder = recorded_data_folder(run_dir);
  run.options.pipeline().group(group);
  const auto lock = lock_run(run.options);  // read_run_config has checked that run_dir is a run
  const auto info = exec::read_checkpoint_info(run_dir);
  SP_CHECK(info.config_hash == config_hash(run.options) || info.config_hash == legacy_config_hash(run.options),
           run_dir, ": the checkpoint was written with different settings than config.json");
  build(run);
  run.trainer->load(run_dir, hooks.log);  // a damaged newest checkpoint: warns, takes the previous
  return run_training(run, true, hooks);
}

EvalResult evaluate_run(const std::string& run_dir, int threads) {
  Run run;
  run.options = read_run_config(run_dir);
  check_caller_data(run_dir, run.options, nullptr, "evaluate");
  run.model_file = recorded_model_file(run_dir);
  run.recorded_folder = recorded_data_folder(run_dir);
  run.options.pipeline().executor(ExecutorKind::kEmulated);  // every partition here
  if (threads > 0) run.options.pipeline().threads(threads);
  build(run);
  run.trainer->load(run_dir);
  return run.trainer->evaluate(*run.test);
}

}  // namespace stalepipe::train
