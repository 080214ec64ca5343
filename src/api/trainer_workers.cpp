#include "trainer_workers_impl.h"

#include <algorithm>

#include "stalepipe/api/assemble.h"
#include "stalepipe/api/options_json.h"
#include "stalepipe/exec/processes.h"

namespace stalepipe::detail {
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

}  // namespace

TrainerWorkers::TrainerWorkers(models::Model model, Options& options, int64_t steps_per_epoch,
                               int64_t hybrid_switch_step)
    : model_(std::move(model)) {
  const PipelineOptions& o = options.pipeline();
  kind_ = o.schedule() == ScheduleKind::kHybrid ? ScheduleKind::kStale : o.schedule();
  info_.hybrid_switch_step = hybrid_switch_step;
  Assembly a = assemble(model_, options, steps_per_epoch, false, own_replica(o));
  build_replicas(a, options, steps_per_epoch);
  plan_ = std::move(a.plan);
  pipeline_ = std::move(a.pipeline);
  all_stages_ = pipeline_->stages();
  for (auto& replica : replicas_) all_stages_.insert(all_stages_.end(), replica->stages().begin(), replica->stages().end());
  options.pipeline().ppv(plan_.ppv);  // the cut chosen, as config.json and checkpoints record it
  info_.threads_per_worker = a.threads_per_worker;
  info_.devices = a.devices;
  info_.replicas = o.replicas();
  describe(o.micro_batches());
  build_executor(options);  // last: with processes, the rendezvous waits for the other ranks
}

// The other replicas of a local executor: copies of the network, which begin equal to it.
void TrainerWorkers::build_replicas(const Assembly& a, const Options& options, int64_t steps_per_epoch) {
  const PipelineOptions& o = options.pipeline();
  if (o.executor() == ExecutorKind::kProcesses) return;
  for (int r = 1; r < o.replicas(); ++r) {
    replica_models_.push_back(models::independent_copy(model_));
    replicas_.push_back(build_stages(replica_models_.back(), a, options, steps_per_epoch, r));
  }
}

std::vector<exec::Pipeline*> TrainerWorkers::pipelines() {
  std::vector<exec::Pipeline*> all{pipeline_.get()};
  for (auto& replica : replicas_) all.push_back(replica.get());
  return all;
}

void TrainerWorkers::describe(int micro_batches) {
  const int K = plan_.num_partitions();
  // Staleness and memory as the schedule implies them, from a segment long enough to reach
  // the steady state.
  const auto stats = schedule::analyze(schedule::make_schedule(kind_, K, 0, 4 * K + 4, micro_batches));
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
  info_.lag = schedule_lag(kind_, K, micro_batches);
}

void TrainerWorkers::build_executor(const Options& options) {
  const PipelineOptions& o = options.pipeline();
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
  auto group = std::make_shared<exec::ProcessGroup>(where, config_hash(options), R);
  executor_ = exec::make_processes_executor(group);
  group_ = exec::make_rank_group(group);
}

SegmentRun TrainerWorkers::execute(int64_t first, int64_t end, exec::SegmentContext context, const Options& options,
                                   const std::function<double(int64_t)>& lr) {
  const PipelineOptions& o = options.pipeline();
  const int64_t switch_step = info_.hybrid_switch_step;
  const bool hybrid = o.schedule() == ScheduleKind::kHybrid;
  const bool sequential = kind_ == ScheduleKind::kSequential || (hybrid && first >= switch_step);
  context.lr = lr;
  context.threads_per_worker = info_.threads_per_worker;
  // One partition works at a time in a sequential segment, so each gets every thread, unless
  // threads_per_worker fixes the count. Every executor alike: thread counts can change a
  // reduction's order, and the executors must agree bit for bit.
  if (sequential && o.threads_per_worker() == 0) {
    context.threads_per_worker.assign(context.threads_per_worker.size(), resolved_threads(o));
  }
  // At the start of the first sequential segment; a checkpoint at the switch step is written
  // before it, so a resumed run resets exactly where an uninterrupted one does.
  if (hybrid && first == switch_step && o.hybrid_norm_reset()) {
    for (auto* stage : all_stages_) stage->optimizer().reset_norms();
  }
  const int K = plan_.num_partitions();
  SegmentRun run;
  run.schedule = sequential ? schedule::make_sequential(K, first, end)
                            : schedule::make_schedule(kind_, K, first, end, o.micro_batches());
  run.result = executor_->run(run.schedule, all_stages_, context);
  return run;
}

std::vector<int> TrainerWorkers::tally(const SegmentRun& run) {
  return schedule::tally_staleness(run.schedule, run.result.end_step, info_.staleness, info_.ran);
}

std::vector<int> TrainerWorkers::partitions_with_bad_weights() {
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

}  // namespace stalepipe::detail
