#include "stalepipe/api/pipeline_trainer.h"

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <thread>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/cuda.h>

#include "stalepipe/partition/balance.h"
#include "stalepipe/partition/profile.h"
#include "stalepipe/schedule/schedule.h"
#include "stalepipe/train/checkpoint.h"

namespace stalepipe {
namespace {

std::string format_list(const std::vector<int>& values) {
  std::string text;
  for (int v : values) text += (text.empty() ? "" : ", ") + std::to_string(v);
  return "{" + text + "}";
}

// Profiling runs forwards in training mode and draws random inputs: put the model's state and
// the global RNG back so that building a pipeline never changes what training will compute.
partition::Profile profile_preserving_state(models::Model& model, int64_t batch, int threads) {
  torch::NoGradGuard no_grad;
  std::vector<std::pair<torch::Tensor, torch::Tensor>> saved;
  for (const auto& unit : model.units) {
    for (const auto& t : unit.module.ptr()->parameters()) saved.emplace_back(t, t.clone());
    for (const auto& t : unit.module.ptr()->buffers()) saved.emplace_back(t, t.clone());
  }
  auto generator = at::detail::getDefaultCPUGenerator();
  const auto rng = generator.get_state();
  partition::ProfileOptions p;
  p.batch_size = batch;
  p.threads = threads;
  p.warmup = 1;
  p.repeats = 3;
  auto profile = partition::profile_model(model, p);
  generator.set_state(rng);
  for (auto& [live, copy] : saved) live.copy_(copy);
  return profile;
}

void check_device(const torch::Device& d) {
  if (d.is_cuda()) {
    const int count = torch::cuda::is_available() ? static_cast<int>(torch::cuda::device_count()) : 0;
    SP_CHECK_ARG(d.has_index() && d.index() < count, "PipelineOptions::devices: ", d.str(),
                 " is not present; this machine has ", count, " CUDA device(s)",
                 count == 0 ? " (or LibTorch was built without CUDA)" : "",
                 d.has_index() ? "" : "; name one, e.g. cuda:0");
  } else {
    SP_CHECK_ARG(d.is_cpu(), "PipelineOptions::devices: ", d.str(),
                 " is not supported; expected cpu or cuda:N");
  }
}

// How many mini-batches beyond t the first worker asks for before the loss of t exists, in
// the schedule's global order (the emulator runs exactly that order; in any concurrent run
// the loss of t depends on no later input, so waiting for it after feeding t + lag is safe).
int schedule_lag(schedule::ScheduleKind kind, int K, int micro_batches) {
  const auto probe = schedule::make_schedule(kind, K, 0, 4 * K + 4, micro_batches);
  int64_t max_input = -1;
  int lag = 0;
  for (const auto& g : schedule::global_order(probe)) {
    if (g.op.kind != schedule::OpKind::kForward) continue;
    if (g.worker == 0) max_input = std::max(max_input, g.op.step);
    if (g.worker == K - 1) lag = std::max(lag, static_cast<int>(max_input - g.op.step));
  }
  return lag;
}

}  // namespace

// The step interface's state: inputs travel to the executor's first worker through a queue
// that its input callback blocks on; losses come back from the last worker through a map.
struct PipelineTrainer::Feeder {
  std::mutex mutex;
  std::condition_variable changed;
  std::deque<exec::Input> inputs;
  bool end_of_input = false;  // flush(): the next input request ends the segment
  bool aborted = false;       // a worker failed: release the input callback
  bool done = false;          // the segment thread has returned
  std::exception_ptr error;
  std::map<int64_t, StepLoss> losses;  // arrived, not yet returned
  int64_t segment_end = 0;
  std::thread thread;
};

PipelineTrainer::PipelineTrainer(models::Model model, PipelineOptions options)
    : model_(std::move(model)), options_(std::move(options)), feeder_(std::make_unique<Feeder>()) {
  const PipelineOptions& o = options_;
  SP_CHECK_ARG(!model_.units.empty(), "model ", model_.name, " has no units");
  // Hybrid: the stale schedule until the switch, then sequential.
  try {
    kind_ = o.schedule() == "hybrid" ? schedule::ScheduleKind::kStale
                                     : schedule::parse_schedule_kind(o.schedule());
  } catch (const UsageError&) {
    throw UsageError(c10::str("PipelineOptions::schedule '", o.schedule(),
                              "': expected stale, sequential, hybrid, gpipe or 1f1b-stash"));
  }
  SP_CHECK_ARG(o.micro_batches() >= 1, "PipelineOptions::micro_batches must be >= 1, got ",
               o.micro_batches());
  SP_CHECK_ARG(o.micro_batches() == 1 || kind_ == schedule::ScheduleKind::kGPipe,
               "PipelineOptions::micro_batches ", o.micro_batches(), " applies to schedule gpipe only, not ",
               o.schedule());
  SP_CHECK_ARG(o.schedule() == "hybrid" || !o.hybrid_norm_reset(),
               "--hybrid-norm-reset needs --schedule hybrid");
  SP_CHECK_ARG(o.schedule() != "hybrid" || o.hybrid_switch_step() >= 0,
               "PipelineOptions::schedule hybrid needs hybrid_switch_step >= 0, got ",
               o.hybrid_switch_step());
  SP_CHECK_ARG(o.executor() == "threads" || o.executor() == "emulated",
               "PipelineOptions::executor '", o.executor(), "': expected threads or emulated");
  SP_CHECK_ARG(o.partitions() >= 0, "PipelineOptions::partitions must be >= 0, got ", o.partitions());
  SP_CHECK_ARG(o.partitions() == 0 || o.ppv().empty(), "PipelineOptions: give partitions (",
               o.partitions(), ") or ppv ", format_list(o.ppv()), ", not both");
  SP_CHECK_ARG(o.lr() > 0 && std::isfinite(o.lr()), "PipelineOptions::lr must be a positive number, got ", o.lr());
  SP_CHECK_ARG(o.threads() >= 0 && o.threads_per_worker() >= 0,
               "PipelineOptions::threads and threads_per_worker must be >= 0, got ", o.threads(),
               " and ", o.threads_per_worker());
  SP_CHECK_ARG(o.segment_steps() >= 1, "PipelineOptions::segment_steps must be >= 1, got ", o.segment_steps());
  SP_CHECK_ARG(o.loss() != nullptr, "PipelineOptions::loss must be set");
  for (const auto& d : o.devices()) check_device(d);

  std::vector<int> ppv = o.ppv();
  if (o.partitions() > 0) {
    partition::Profile profile;
    if (o.balance() == "time") {
      SP_CHECK_ARG(o.profile_batch() >= 1, "PipelineOptions::profile_batch must be >= 1, got ",
                   o.profile_batch());
      profile = profile_preserving_state(model_, o.profile_batch(), std::max(1, o.threads_per_worker()));
    }
    ppv = partition::balance(model_, partition::unit_costs(model_, o.balance(), &profile),
                             o.partitions());
  }
  try {
    plan_ = partition::make_plan(model_, ppv);
  } catch (const UsageError& e) {
    // make_plan speaks of the CLI's flag; name the option instead.
    std::string text = e.what();
    const std::string flag = "--pipeline " + partition::format_ppv(ppv);
    if (text.rfind(flag, 0) == 0) text = "PipelineOptions::ppv " + format_list(ppv) + text.substr(flag.size());
    throw UsageError(text);
  }
  const int K = plan_.num_partitions();
  std::vector<torch::Device> devices = o.devices();
  if (devices.empty()) devices.assign(K, torch::kCPU);
  SP_CHECK_ARG(static_cast<int>(devices.size()) == K, "PipelineOptions::devices names ",
               devices.size(), " device(s) but the pipeline has ", K, " partitions");

  const int threads = o.threads() > 0 ? o.threads()
                                      : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  info_.threads_per_worker.assign(K, o.threads_per_worker() > 0 ? o.threads_per_worker()
                                                                : std::max(1, threads / K));
  const auto sgd = optim::SgdOptions()
                       .momentum(o.momentum())
                       .weight_decay(o.weight_decay())
                       .nesterov(o.nesterov())
                       .delay_aware_lr(o.delay_aware_lr())
                       .delay_lr_anneal_steps(o.delay_lr_anneal_steps())
                       .weight_prediction(o.weight_prediction())
                       .spike_compensation(o.spike_compensation())
                       .fixed_weight_norm(o.fixed_weight_norm());
  pipeline_ = std::make_unique<exec::Pipeline>(model_, plan_, devices, sgd, o.loss());
  if (o.fixed_weight_norm() || o.hybrid_norm_reset()) {
    int invariant = 0;
    for (auto* stage : pipeline_->stages()) invariant += stage->optimizer().scale_invariant_count();
    SP_CHECK_ARG(invariant > 0, o.fixed_weight_norm() ? "--fixed-weight-norm" : "--hybrid-norm-reset",
                 ": model ", model_.name,
                 " has no bias-free conv or linear layer followed by a batch norm");
  }
  executor_ = exec::make_executor(o.executor());

  // Staleness and memory as the schedule implies them, from a segment long enough to reach
  // the steady state.
  const auto stats =
      schedule::analyze(schedule::make_schedule(kind_, K, 0, 4 * K + 4, o.micro_batches()));
  for (const auto& w : stats.workers) {
    info_.staleness.push_back(w.staleness);
    info_.max_in_flight.push_back(w.max_in_flight);
    info_.weight_versions.push_back(w.max_weight_versions);
  }
  for (const auto& [begin, end] : plan_.unit_ranges) {
    info_.units.push_back(model_.units[begin].name + ".." + model_.units[end - 1].name);
  }
  info_.ppv = plan_.ppv;
  info_.parameters = plan_.parameters;
  info_.stale_weight_percent = partition::stale_weight_percent(plan_, info_.staleness);
  info_.lag = schedule_lag(kind_, K, o.micro_batches());
}

PipelineTrainer::~PipelineTrainer() {
  try {
    finish();
  } catch (...) {
    // A failure was already reported to the caller of feed(), or cannot be any more.
  }
}

void PipelineTrainer::use_executor(std::unique_ptr<exec::Executor> executor) {
  SP_CHECK_ARG(executor != nullptr, "use_executor: null executor");
  check_drained("use_executor");
  executor_ = std::move(executor);
}

exec::SegmentResult PipelineTrainer::run_segment(int64_t first, int64_t end,
                                                 exec::SegmentContext context) {
  SP_CHECK_ARG(0 <= first && first < end, "run_segment: empty segment [", first, ", ", end, ")");
  const int64_t switch_step = options_.hybrid_switch_step();
  const bool hybrid = options_.schedule() == "hybrid";
  SP_CHECK_ARG(!hybrid || end <= switch_step || first >= switch_step, "run_segment: [", first,
               ", ", end, ") straddles the hybrid switch at step ", switch_step, "; end it there");
  const bool sequential = kind_ == schedule::ScheduleKind::kSequential || (hybrid && first >= switch_step);
  if (!context.lr) {
    const double lr = options_.lr();
    context.lr = options_.lr_at() ? options_.lr_at() : [lr](int64_t) { return lr; };
  }
  if (context.threads_per_worker.empty()) context.threads_per_worker = info_.threads_per_worker;
  // At the start of the first sequential segment; a checkpoint at the switch step is written
  // before it, so a resumed run resets exactly where an uninterrupted one does.
  if (hybrid && first == switch_step && options_.hybrid_norm_reset()) {
    for (auto* stage : pipeline_->stages()) stage->optimizer().reset_norms();
  }
  const auto schedule =
      sequential ? schedule::make_sequential(plan_.num_partitions(), first, end)
                 : schedule::make_schedule(kind_, plan_.num_partitions(), first, end,
                                           options_.micro_batches());
  return executor_->run(schedule, pipeline_->stages(), context);
}

void PipelineTrainer::start_segment() {
  Feeder& f = *feeder_;
  int64_t end = next_step_ + options_.segment_steps();
  if (options_.schedule() == "hybrid" && next_step_ < options_.hybrid_switch_step()) {
    end = std::min(end, options_.hybrid_switch_step());
  }
  f.inputs.clear();
  f.end_of_input = f.aborted = f.done = false;
  f.error = nullptr;
  f.segment_end = end;
  exec::SegmentContext context;
  context.input = [&f](int64_t) {
    std::unique_lock<std::mutex> lock(f.mutex);
    f.changed.wait(lock, [&f] { return !f.inputs.empty() || f.end_of_input || f.aborted; });
    if (f.aborted || f.inputs.empty()) return exec::Input{};  // ends the segment here
    exec::Input in = std::move(f.inputs.front());
    f.inputs.pop_front();
    return in;
  };
  context.on_step = [&f](int64_t t, const exec::StepLoss& s) {
    std::lock_guard<std::mutex> lock(f.mutex);
    f.losses[t] = StepLoss{t, s.loss, s.correct, s.samples};
    f.changed.notify_all();
  };
  context.on_abort = [&f] {
    std::lock_guard<std::mutex> lock(f.mutex);
    f.aborted = true;
    f.changed.notify_all();
  };
  const int64_t first = next_step_;
  f.thread = std::thread([this, &f, first, end, context] {
    std::exception_ptr error;
    try {
      run_segment(first, end, context);
    } catch (...) {
      error = std::current_exception();
    }
    std::lock_guard<std::mutex> lock(f.mutex);
    f.error = error;
    f.done = true;
    f.changed.notify_all();
  });
}

void PipelineTrainer::join_segment() {
  Feeder& f = *feeder_;
  if (!f.thread.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(f.mutex);
    f.end_of_input = true;
    f.changed.notify_all();
  }
  f.thread.join();
  if (f.error) {
    try {
      std::rethrow_exception(f.error);
    } catch (const std::exception& e) {
      failure_ = e.what();
    }
    std::rethrow_exception(f.error);
  }
}

std::optional<StepLoss> PipelineTrainer::feed(torch::Tensor x, torch::Tensor y) {
  SP_CHECK_ARG(!finished_, "feed: the trainer was finished (finish() was called); no more mini-batches");
  SP_CHECK_ARG(failure_.empty(), "feed: the pipeline failed earlier and cannot continue: ", failure_);
  SP_CHECK_ARG(x.defined() && y.defined() && x.dim() >= 1 && y.dim() >= 1 && x.size(0) == y.size(0),
               "feed: x and y must be tensors with the same batch size, got ",
               x.defined() ? c10::str(x.sizes()) : "undefined", " and ",
               y.defined() ? c10::str(y.sizes()) : "undefined");
  Feeder& f = *feeder_;
  if (f.thread.joinable() && next_step_ >= f.segment_end) join_segment();  // ended by itself
  if (!f.thread.joinable()) start_segment();
  {
    std::lock_guard<std::mutex> lock(f.mutex);
    f.inputs.push_back(exec::Input{std::move(x), std::move(y)});
    f.changed.notify_all();
  }
  ++next_step_;
  if (next_step_ - returned_ <= info_.lag) return std::nullopt;
  const int64_t want = returned_;
  std::unique_lock<std::mutex> lock(f.mutex);
  f.changed.wait(lock, [&] { return f.losses.count(want) || f.done; });
  auto it = f.losses.find(want);
  if (it == f.losses.end()) {
    lock.unlock();
    join_segment();  // rethrows the worker's error
    SP_CHECK(false, "feed: the loss of mini-batch ", want, " never came out of the pipeline");
  }
  const StepLoss loss = it->second;
  f.losses.erase(it);
  ++returned_;
  return loss;
}

std::vector<StepLoss> PipelineTrainer::flush() {
  join_segment();
  Feeder& f = *feeder_;
  std::vector<StepLoss> out;
  std::lock_guard<std::mutex> lock(f.mutex);
  for (; returned_ < next_step_; ++returned_) {
    auto it = f.losses.find(returned_);
    SP_CHECK(it != f.losses.end(), "flush: the loss of mini-batch ", returned_,
             " never came out of the pipeline");
    out.push_back(it->second);
    f.losses.erase(it);
  }
  return out;
}

std::vector<StepLoss> PipelineTrainer::finish() {
  if (finished_) return {};
  finished_ = true;
  return flush();
}

void PipelineTrainer::check_drained(const char* what) const {
  SP_CHECK_ARG(!feeder_->thread.joinable(), what, ": ", next_step_ - returned_,
               " mini-batch(es) are in the pipeline; call flush() first");
}

StepLoss PipelineTrainer::eval_batch(const torch::Tensor& x, const torch::Tensor& y) {
  torch::NoGradGuard no_grad;
  const torch::Tensor out = pipeline_->predict(x);
  const torch::Tensor target = y.to(out.device());
  StepLoss l;
  l.samples = x.size(0);
  l.loss = options_.loss()(out, target).item<double>();
  if (out.dim() == 2 && target.dim() == 1 && target.scalar_type() == torch::kLong) {
    l.correct = out.argmax(1).eq(target).sum().item<int64_t>();
  }
  return l;
}

torch::Tensor PipelineTrainer::predict(const torch::Tensor& x) {
  check_drained("predict");
  return pipeline_->predict(x);
}

void PipelineTrainer::save(const std::string& dir) {
  check_drained("save");
  train::CheckpointInfo info;
  info.step = next_step_;
  info.epochs_done = epochs_done_;
  info.ppv = partition::format_ppv(plan_.ppv);
  info.config_hash = "api";
  train::save_checkpoint(dir, pipeline_->stages(), info);
}

void PipelineTrainer::load(const std::string& dir) {
  check_drained("load");
  const auto info = train::load_checkpoint(dir, pipeline_->stages());
  SP_CHECK(info.ppv == partition::format_ppv(plan_.ppv), "load ", dir, ": the checkpoint has registers after layers ",
           info.ppv, " but this pipeline after ", partition::format_ppv(plan_.ppv));
  next_step_ = returned_ = info.step;
  epochs_done_ = info.epochs_done;
}

}  // namespace stalepipe
