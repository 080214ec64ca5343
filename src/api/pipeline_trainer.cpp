#include "stalepipe/api/pipeline_trainer.h"

#include <algorithm>
#include <cmath>

#include <ATen/Parallel.h>

#include "stalepipe/api/assemble.h"
#include "stalepipe/api/options_json.h"
#include "stalepipe/exec/processes.h"
#include "stalepipe/optim/lr_schedule.h"
#include "trainer_impl.h"

namespace stalepipe {
namespace {

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

// The first option that needs the epoch length to become steps (null if none): the learning
// rate schedule (unless lr_at or a constant lr without warm-up), the delay-lr anneal, a
// hybrid switch given in epochs.
const char* epoch_valued_field(const Options& options) {
  const OptimizerOptions& o = options.optimizer();
  const TrainingPoint& sw = options.pipeline().hybrid_switch();
  if (!o.lr_at() && o.lr_schedule() != LrScheduleKind::kConstant) return "OptimizerOptions::lr_schedule";
  if (!o.lr_at() && o.warmup_epochs() > 0) return "OptimizerOptions::warmup_epochs";
  if (o.delay_lr_anneal_epochs() > 0) return "OptimizerOptions::delay_lr_anneal_epochs";
  if (sw.set() && !sw.in_steps) return "PipelineOptions::hybrid_switch";
  return nullptr;
}

}  // namespace

PipelineTrainer::PipelineTrainer(models::Model model, Options options, int64_t steps_per_epoch)
    : model_(std::move(model)), options_(std::move(options)), feeder_(std::make_unique<Feeder>()) {
  check_options(options_);
  // Decided by the network given; options() then tells the layout that runs.
  options_.pipeline().layout(resolved_layout(options_.pipeline().layout(), model_.script ? "" : model_.name));
  SP_CHECK_ARG(steps_per_epoch >= 0, "PipelineTrainer: steps_per_epoch must be >= 0, got ", steps_per_epoch);
  const PipelineOptions& o = options_.pipeline();
  kind_ = o.schedule() == ScheduleKind::kHybrid ? ScheduleKind::kStale : o.schedule();
  build_lr(steps_per_epoch);
  Assembly a = assemble(model_, options_, steps_per_epoch_, false, own_replica(options_.pipeline()));
  build_replicas(a);
  plan_ = std::move(a.plan);
  pipeline_ = std::move(a.pipeline);
  all_stages_ = pipeline_->stages();
  for (auto& replica : replicas_) all_stages_.insert(all_stages_.end(), replica->stages().begin(), replica->stages().end());
  options_.pipeline().ppv(plan_.ppv);  // the cut chosen, as config.json and checkpoints record it
  info_.threads_per_worker = a.threads_per_worker;
  info_.devices = a.devices;
  info_.replicas = options_.pipeline().replicas();
  describe();
  build_executor();  // last: with processes, the rendezvous waits for the other ranks
}

void PipelineTrainer::build_lr(int64_t steps_per_epoch) {
  const OptimizerOptions& o = options_.optimizer();
  const RunOptions& run = options_.run();
  steps_per_epoch_ = steps_per_epoch;
  if (steps_per_epoch > 0) total_steps_ = run.epochs() * steps_per_epoch;
  if (run.max_steps() > 0) total_steps_ = total_steps_ < 0 ? run.max_steps() : std::min(total_steps_, run.max_steps());
  const TrainingPoint& sw = options_.pipeline().hybrid_switch();
  const char* needs_epochs = epoch_valued_field(options_);
  SP_CHECK_ARG(!needs_epochs || steps_per_epoch > 0, needs_epochs,
               " is given in epochs or spans the run: pass PipelineTrainer the epoch length "
               "(steps_per_epoch), or use steps, a constant lr_schedule or lr_at");
  if (sw.set()) {
    info_.hybrid_switch_step = sw.step(steps_per_epoch);
    SP_CHECK_ARG(total_steps_ < 0 || info_.hybrid_switch_step <= total_steps_, "PipelineOptions::hybrid_switch ",
                 to_text(sw), ": training ends after ", total_steps_, " steps; the switch must come no later");
  }
  if (o.lr_at()) {
    lr_ = o.lr_at();
  } else {
    optim::LrScheduleOptions s;
    s.kind = o.lr_schedule();
    s.base_lr = o.lr();
    s.warmup_epochs = o.warmup_epochs();
    s.milestones = o.lr_milestones();
    s.gamma = o.lr_gamma();
    s.steps_per_epoch = steps_per_epoch;
    s.total_steps = std::max<int64_t>(1, total_steps_);
    auto schedule = std::make_shared<optim::LrSchedule>(s);
    lr_ = [schedule](int64_t t) { return schedule->at(t); };
  }
}

// The other replicas of a local executor: copies of the network, which begin equal to it.
void PipelineTrainer::build_replicas(const Assembly& a) {
  const PipelineOptions& o = options_.pipeline();
  if (o.executor() == ExecutorKind::kProcesses) return;
  for (int r = 1; r < o.replicas(); ++r) {
    replica_models_.push_back(models::independent_copy(model_));
    replicas_.push_back(build_stages(replica_models_.back(), a, options_, steps_per_epoch_, r));
  }
}

std::vector<exec::Pipeline*> PipelineTrainer::pipelines() {
  std::vector<exec::Pipeline*> all{pipeline_.get()};
  for (auto& replica : replicas_) all.push_back(replica.get());
  return all;
}

void PipelineTrainer::describe() {
  const int K = plan_.num_partitions();
  const int M = options_.pipeline().micro_batches();
  // Staleness and memory as the schedule implies them, from a segment long enough to reach
  // the steady state.
  const auto stats = schedule::analyze(schedule::make_schedule(kind_, K, 0, 4 * K + 4, M));
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
  info_.lag = schedule_lag(kind_, K, M);
}

void PipelineTrainer::build_executor() {
  const PipelineOptions& o = options_.pipeline();
  if (o.executor() != ExecutorKind::kProcesses) {
    executor_ = exec::make_executor(o.executor());
    group_ = exec::make_local_group();
    return;
  }
  const auto where = o.group().resolved();
  const int K = plan_.num_partitions();
  const int R = o.replicas();
  SP_CHECK_ARG(where.world_size() == R * K, "PipelineOptions::executor processes: ProcessGroupOptions::world_size ",
               where.world_size(), " but PipelineOptions::ppv ", partition::format_ppv(plan_.ppv), " gives ", K,
               " partitions", R > 1 ? c10::str(" and ", field_name(Field::replicas), " ", R, " copies of them") : "",
               "; start one rank per partition", R > 1 ? " of each replica" : "");
  auto group = std::make_shared<exec::ProcessGroup>(where, config_hash(options_), R);
  executor_ = exec::make_processes_executor(group);
  group_ = exec::make_rank_group(group);
}

PipelineTrainer::~PipelineTrainer() {
  try {
    finish();
  } catch (...) {
    // A failure was already reported to the caller, or cannot be any more.
  }
}

void PipelineTrainer::check_usable(const char* what) const {
  if (!failure_.empty()) {
    throw RuntimeError(c10::str(what, ": the pipeline failed earlier (", failure_,
                                "); load() a checkpoint to continue"));
  }
}

void PipelineTrainer::check_drained(const char* what) const {
  SP_CHECK_ARG(!feeder_->thread.joinable(), what, ": ", next_step_ - returned_,
               " mini-batch(es) are in the pipeline; call flush() first");
}

exec::SegmentResult PipelineTrainer::run_segment(int64_t first, int64_t end, exec::SegmentContext context) {
  check_segment(first, end);
  SegmentRun run;
  try {
    run = execute_segment(first, end, std::move(context));
  } catch (...) {
    fail(std::current_exception());
  }
  return record_segment(run);
}

void PipelineTrainer::check_segment(int64_t first, int64_t end) const {
  SP_CHECK_ARG(0 <= first && first < end, "run_segment: empty segment [", first, ", ", end, ")");
  const int64_t switch_step = info_.hybrid_switch_step;
  const bool hybrid = options_.pipeline().schedule() == ScheduleKind::kHybrid;
  SP_CHECK_ARG(!hybrid || end <= switch_step || first >= switch_step, "run_segment: [", first,
               ", ", end, ") straddles the hybrid switch at step ", switch_step, "; end it there");
}

// May run on the feeder thread while the caller goes on feeding: it reads the trainer's fixed
// settings and works on the pipeline's stages, and writes nothing else of the trainer (the
// result goes back to the caller's thread, where record_segment or fail take it).
PipelineTrainer::SegmentRun PipelineTrainer::execute_segment(int64_t first, int64_t end,
                                                             exec::SegmentContext context) {
  const int64_t switch_step = info_.hybrid_switch_step;
  const bool hybrid = options_.pipeline().schedule() == ScheduleKind::kHybrid;
  const bool sequential = kind_ == ScheduleKind::kSequential || (hybrid && first >= switch_step);
  context.lr = lr_;
  context.threads_per_worker = info_.threads_per_worker;
  // One partition works at a time in a sequential segment, so each gets every thread, unless
  // threads_per_worker fixes the count. Every executor alike: thread counts can change a
  // reduction's order, and the executors must agree bit for bit.
  const PipelineOptions& o = options_.pipeline();
  if (sequential && o.threads_per_worker() == 0) {
    context.threads_per_worker.assign(context.threads_per_worker.size(), resolved_threads(o));
  }
  // At the start of the first sequential segment; a checkpoint at the switch step is written
  // before it, so a resumed run resets exactly where an uninterrupted one does.
  if (hybrid && first == switch_step && options_.pipeline().hybrid_norm_reset()) {
    for (auto* stage : all_stages_) stage->optimizer().reset_norms();
  }
  const int K = plan_.num_partitions();
  SegmentRun run;
  run.schedule = sequential ? schedule::make_sequential(K, first, end)
                            : schedule::make_schedule(kind_, K, first, end, options_.pipeline().micro_batches());
  run.result = executor_->run(run.schedule, all_stages_, context);
  return run;
}

exec::SegmentResult PipelineTrainer::record_segment(const SegmentRun& run) {
  last_delay_ = schedule::tally_staleness(run.schedule, run.result.end_step, info_.staleness, info_.ran);
  return run.result;
}

void PipelineTrainer::fail(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    failure_ = e.what();  // sticky: check_usable refuses every later call but load()
    throw;
  }
}

std::vector<int> PipelineTrainer::partitions_with_bad_weights() {
  std::vector<int> bad;
  for (int k = 0; k < pipeline_->num_stages(); ++k) {
    if (!group_->owns(k)) continue;  // another process trains it
    for (const auto& p : pipeline_->stage(k).module()->parameters()) {
      if (!torch::isfinite(p).all().item<bool>()) {
        bad.push_back(k + 1);
        break;
      }
    }
  }
  return bad;
}

EvalResult PipelineTrainer::evaluate(BatchSource& test) {
  check_usable("evaluate");
  check_drained("evaluate");
  torch::NoGradGuard no_grad;
  at::set_num_threads(resolved_threads(options_.pipeline()));
  double sums[4] = {0, 0, 0, 0};  // loss x samples, correct, samples, scored
  test.start_epoch(0, 0);
  // Replica 0 evaluates: the replicas' weights and statistics are equal.
  for (int64_t b = 0; group_->replica() == 0; ++b) {
    // Only the rank that runs partition 1 reads data; the others follow its batch count.
    exec::Input in = group_->owns(0) ? test.next() : exec::Input{};
    const int64_t known = test.batches_per_epoch();
    if (group_->owns(0) ? !in.x.defined() : b >= known) break;
    // The prediction runs on this thread's current stream, after the batch's copy ahead.
    if (in.ready) exec::current_stream(in.x.device())->wait(in.ready.get());
    auto [out, target] = group_->predict(*pipeline_, in.x, in.target, b);
    if (!out.defined()) continue;
    const double n = static_cast<double>(target.size(0));
    sums[0] += options_.optimizer().loss()(out, target).item<double>() * n;
    if (const auto& metric = options_.optimizer().metric()) {
      const exec::Score score = metric(out, target);
      sums[1] += static_cast<double>(exec::correct_of(score));
      sums[3] += static_cast<double>(score.scored);
    }
    sums[2] += n;
  }
  std::vector<double> shared(sums, sums + 4);
  group_->share_from_last(shared);
  SP_CHECK_ARG(shared[2] > 0, "evaluate: the test data gave no samples");
  EvalResult r;
  r.loss = shared[0] / shared[2];
  if (shared[3] > 0) r.accuracy = shared[1] / shared[3];
  r.samples = static_cast<int64_t>(shared[2]);
  return r;
}

torch::Tensor PipelineTrainer::predict(const torch::Tensor& x) {
  check_usable("predict");
  check_drained("predict");
  SP_CHECK_ARG(options_.pipeline().executor() != ExecutorKind::kProcesses,
               "predict: the partitions run in other processes; use evaluate()");
  return pipeline_->predict(x);
}

}  // namespace stalepipe
