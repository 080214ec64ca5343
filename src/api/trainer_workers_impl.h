// PipelineTrainer's workers: the network cut into partitions, this process's copies of the
// pipeline (replicas), the executor that runs them and the group of processes they belong to.
// Built once from the options; then it runs segments and answers questions about the cut.
// Private to src/api.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "stalepipe/api/assemble.h"
#include "stalepipe/api/pipeline_trainer.h"
#include "stalepipe/exec/executor.h"
#include "stalepipe/exec/group.h"
#include "stalepipe/exec/pipeline.h"
#include "stalepipe/partition/plan.h"
#include "stalepipe/schedule/schedule.h"

namespace stalepipe::detail {

// What one segment ran, for the staleness tally.
struct SegmentRun {
  schedule::Schedule schedule;
  exec::SegmentResult result;
};

class TrainerWorkers {
 public:
  // Assembles `model` as `options` say (api/assemble.h), records in options.pipeline().ppv the
  // cut chosen and in info() the partitions, their staleness and memory as the schedule implies
  // them; with the processes executor it meets the other ranks last. hybrid_switch_step: the
  // step of the hybrid switch (-1: none).
  TrainerWorkers(models::Model model, Options& options, int64_t steps_per_epoch, int64_t hybrid_switch_step);

  const models::Model& model() const { return model_; }
  const partition::Plan& plan() const { return plan_; }
  const PipelineInfo& info() const { return info_; }
  exec::Pipeline& pipeline() { return *pipeline_; }
  // This process's copies of the pipeline, replica 0 (or this rank's replica) first.
  std::vector<exec::Pipeline*> pipelines();
  // Every replica's stages, replica after replica, as the executor runs them.
  const std::vector<exec::Stage*>& stages() const { return all_stages_; }
  exec::Executor& executor() { return *executor_; }
  exec::Group& group() { return *group_; }

  // Runs global steps [first, end) as one segment with the schedule `options` imply for
  // `first` (hybrid: stale before the switch, sequential from it); `lr` and the threads per
  // worker go into the context. May run on another thread than the caller's: it changes
  // nothing of this object but the stages' state.
  SegmentRun execute(int64_t first, int64_t end, exec::SegmentContext context, const Options& options,
                     const std::function<double(int64_t)>& lr);
  // Adds what a segment ran to info().ran; returns each partition's largest delay in it.
  std::vector<int> tally(const SegmentRun& run);
  // 1-based numbers of this process's partitions whose weights hold a NaN or an infinity.
  std::vector<int> partitions_with_bad_weights();

 private:
  void build_replicas(const Assembly& a, const Options& options, int64_t steps_per_epoch);
  void describe(int micro_batches);
  void build_executor(const Options& options);

  models::Model model_;
  schedule::ScheduleKind kind_ = schedule::ScheduleKind::kStale;  // before any hybrid switch
  partition::Plan plan_;
  PipelineInfo info_;
  std::unique_ptr<exec::Pipeline> pipeline_;  // replica 0 (with processes: this rank's replica)
  // Replicas 1..R-1 in this process (local executors) and their networks.
  std::vector<models::Model> replica_models_;
  std::vector<std::unique_ptr<exec::Pipeline>> replicas_;
  std::vector<exec::Stage*> all_stages_;
  std::unique_ptr<exec::Executor> executor_;
  std::unique_ptr<exec::Group> group_;
};

}  // namespace stalepipe::detail
