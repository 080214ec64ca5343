// The training loop: epochs of segments (fill, steady state, drain), evaluation, hooks.
#include <algorithm>
#include <chrono>
#include <limits>
#include <sstream>

#include "stalepipe/api/pipeline_trainer.h"
#include "stalepipe/common/clock.h"
#include "trainer_impl.h"
#include "trainer_workers_impl.h"

namespace stalepipe {
namespace {

using Clock = SteadyClock;
constexpr int64_t kNever = std::numeric_limits<int64_t>::max();

int64_t suspended_ns(const FitHooks& hooks) { return hooks.suspended_ns ? hooks.suspended_ns->load() : 0; }

// The first multiple of `every` after `step`; kNever without one.
int64_t next_multiple(int64_t step, int64_t every) { return every > 0 ? (step / every + 1) * every : kNever; }

}  // namespace

FitResult PipelineTrainer::fit(BatchSource& train, const FitHooks& hooks, BatchSource* test) {
  return run_epochs(train, test, options_.run().epochs(), hooks);
}

// Where the segment that starts at step() ends: the first boundary after it.
int64_t PipelineTrainer::segment_end(int64_t epoch_end) const {
  const RunOptions& run = options_.run();
  int64_t end = std::min(epoch_end, progress_.next_step + options_.pipeline().segment_steps());
  if (progress_.total_steps >= 0) end = std::min(end, progress_.total_steps);
  if (info().hybrid_switch_step > progress_.next_step) end = std::min(end, info().hybrid_switch_step);
  end = std::min({end, next_multiple(progress_.next_step, run.checkpoint_every()), next_multiple(progress_.next_step, run.eval_every())});
  if (run.stop_at_step() > progress_.next_step) end = std::min(end, run.stop_at_step());
  return end;
}

PipelineTrainer::Segment PipelineTrainer::run_fit_segment(BatchSource& source, int64_t end,
                                                          const FitHooks& hooks) {
  Segment seg;
  const bool known = source.batches_per_epoch() > 0;
  exec::SegmentContext context;
  context.input = [&](int64_t t) {
    exec::Input in = source.next();
    if (!in.x.defined()) {
      SP_CHECK(!known, "the data ran out at mini-batch ", t, " of an epoch of ", source.batches_per_epoch());
      seg.exhausted = true;
    }
    return in;
  };
  int64_t next_loss = progress_.next_step;  // the last worker reports steps in order
  context.on_step = [&](int64_t t, const StepLoss& s) {
    next_loss = t + 1;
    progress_.totals.loss_sum += s.loss * static_cast<double>(s.samples);
    progress_.totals.correct += s.correct;
    progress_.totals.samples += s.samples;
    progress_.totals.scored += s.scored;
    if (hooks.on_step) hooks.on_step(s);
  };
  context.stop = hooks.stop;
  context.on_op = hooks.on_op;
  if (!info().devices.empty()) context.read_losses_every = exec::default_read_losses_every(info().devices.back());
  const int64_t first = progress_.next_step;
  const int64_t suspended_before = suspended_ns(hooks);
  const auto start = Clock::now();
  exec::SegmentResult result;
  try {
    result = run_segment(first, end, context);
  } catch (const DivergedError&) {
    throw DivergedError(divergence_message(next_loss, "training loss is not finite"));
  }
  // The partitions' notes (a pass that ran without CUDA graphs), once each.
  for (auto* stage : workers_->stages()) {
    for (const std::string& note : stage->take_notes()) warn(hooks.on_warning, note);
  }
  const double suspended = 1e-9 * static_cast<double>(suspended_ns(hooks) - suspended_before);
  const double seconds = std::max(0.0, seconds_since(start) - suspended);
  progress_.totals.seconds += seconds;
  progress_.wall_seconds += seconds;
  progress_.next_step = progress_.returned = result.end_step;
  seg.end_step = result.end_step;
  seg.stopped = result.stopped && !seg.exhausted;
  return seg;
}

FitResult PipelineTrainer::run_epochs(BatchSource& train, BatchSource* test, int64_t last_epoch,
                                      const FitHooks& hooks) {
  check_usable("fit");
  check_drained("fit");
  SP_CHECK_ARG(!finished_, "fit: the trainer was finished (finish() was called)");
  const int64_t spe = train.batches_per_epoch();
  SP_CHECK_ARG(spe > 0 || options_.pipeline().executor() != ExecutorKind::kProcesses,
               "fit: the processes executor needs a BatchSource that knows its epoch length");
  SP_CHECK_ARG(progress_.steps_per_epoch <= 0 || spe <= 0 || spe == progress_.steps_per_epoch, "fit: the data has ", spe,
               " mini-batches per epoch but the trainer was built for ", progress_.steps_per_epoch);
  FitResult result;
  double trained = 0, seconds = 0;  // this call's samples and training seconds
  bool stop_after_epoch = false;
  progress_.warned = false;
  while (progress_.epochs_done < last_epoch && (progress_.total_steps < 0 || progress_.next_step < progress_.total_steps)) {
    const int64_t epoch_end = spe > 0 ? (progress_.epochs_done + 1) * spe : kNever;  // segment_end caps it at the run's end
    if (spe > 0) progress_.epoch_begin = progress_.epochs_done * spe;
    train.start_epoch(progress_.epochs_done, progress_.next_step - progress_.epoch_begin);
    for (;;) {
      const int64_t first = progress_.next_step;
      const int64_t samples_before = progress_.totals.samples;
      const double wall_before = progress_.wall_seconds;
      const Segment seg = run_fit_segment(train, segment_end(epoch_end), hooks);
      seconds += progress_.wall_seconds - wall_before;
      trained += static_cast<double>(progress_.totals.samples - samples_before);
      const bool run_end = progress_.total_steps >= 0 && progress_.next_step >= progress_.total_steps;
      const bool epoch_over = seg.exhausted || progress_.next_step >= epoch_end || run_end;
      // Only a segment that reaches the stop step in this sitting stops (a run resumed there
      // goes on).
      const int64_t stop_step = options_.run().stop_at_step();
      const bool stop_at = stop_step > first && progress_.next_step >= stop_step && !run_end;
      if (!seg.stopped && !stop_at && !epoch_over) warn_if_reduced(seg, first, hooks);
      stop_after_epoch = stop_at && epoch_over;  // the epoch is finished (evaluated, saved) first
      const int64_t eval_every = options_.run().eval_every();
      if (test && eval_every > 0 && progress_.next_step > first && progress_.next_step % eval_every == 0 && !epoch_over) {
        const EvalPoint point = evaluate_point(*test, spe);  // before a stop's checkpoint, as at an epoch end
        if (hooks.on_eval) hooks.on_eval(point);
      }
      if (seg.stopped || (stop_at && !epoch_over)) {
        result.stopped = true;
        if (hooks.on_checkpoint) hooks.on_checkpoint(progress_.next_step);
        break;
      }
      if (epoch_over) break;
      if (options_.run().checkpoint_every() > 0 && progress_.next_step % options_.run().checkpoint_every() == 0 &&
          hooks.on_checkpoint) {
        hooks.on_checkpoint(progress_.next_step);
      }
    }
    if (result.stopped) break;
    const bool losses_here = progress_.totals.samples > 0;
    result.epochs.push_back(finish_epoch(test, spe, hooks));
    if (!losses_here) trained += static_cast<double>(result.epochs.back().samples);  // processes: not the last rank
    if (hooks.on_epoch) hooks.on_epoch(result.epochs.back());
    if (hooks.on_checkpoint) hooks.on_checkpoint(progress_.next_step);
    if (stop_after_epoch) {
      result.stopped = true;
      break;
    }
  }
  result.steps = progress_.next_step;
  result.images_per_second = seconds > 0 ? trained / seconds : 0;
  result.wall_seconds = progress_.wall_seconds;
  return result;
}

EvalPoint PipelineTrainer::evaluate_point(BatchSource& test, int64_t steps_per_epoch) {
  EvalPoint point;
  point.step = progress_.next_step;
  point.epoch = steps_per_epoch > 0 ? static_cast<double>(progress_.next_step) / static_cast<double>(steps_per_epoch) : 0;
  point.wall_seconds = progress_.wall_seconds;
  point.result = evaluate(test);
  return point;
}

EpochSummary PipelineTrainer::finish_epoch(BatchSource* test, int64_t steps_per_epoch, const FitHooks& hooks) {
  std::vector<double> t{progress_.totals.loss_sum, static_cast<double>(progress_.totals.correct),
                        static_cast<double>(progress_.totals.samples), static_cast<double>(progress_.totals.scored)};
  group().share_from_last(t);  // with processes the losses arrive at the last rank only
  EpochSummary m;
  m.epoch = ++progress_.epochs_done;
  m.end_step = progress_.next_step;
  m.lr = lr_(std::max<int64_t>(progress_.epoch_begin, progress_.next_step - 1));
  m.samples = static_cast<int64_t>(t[2]);
  m.train_loss = t[2] > 0 ? t[0] / t[2] : 0;
  if (t[3] > 0) m.train_accuracy = t[1] / t[3];
  m.images_per_second = progress_.totals.seconds > 0 ? t[2] / progress_.totals.seconds : 0;
  m.wall_seconds = progress_.wall_seconds;
  if (test) {
    EvalPoint point = evaluate_point(*test, steps_per_epoch);
    point.epoch_end = true;
    point.epoch = static_cast<double>(m.epoch);
    m.evaluated = true;
    m.test_loss = point.result.loss;
    m.test_accuracy = point.result.accuracy;
    if (hooks.on_eval) hooks.on_eval(point);
  }
  progress_.totals = {};
  progress_.epoch_begin = progress_.next_step;
  return m;
}

// A segment that ended at a boundary before the pipeline reached its steady state: its early
// partitions ran with less staleness than d_k (said once per fit).
void PipelineTrainer::warn_if_reduced(const Segment& segment, int64_t first, const FitHooks& hooks) {
  if (progress_.warned || !hooks.on_warning) return;
  const bool sequential = options_.pipeline().schedule() == ScheduleKind::kHybrid && first >= info().hybrid_switch_step;
  if (sequential) return;
  std::ostringstream out;
  for (size_t k = 0; k < progress_.last_delay.size(); ++k) {
    if (progress_.last_delay[k] < info().staleness[k]) {
      out << (out.tellp() > 0 ? ", " : "") << "partition " << k + 1 << " at most d=" << progress_.last_delay[k]
          << " of d_" << k + 1 << "=" << info().staleness[k];
    }
  }
  if (out.tellp() == 0) return;
  progress_.warned = true;
  hooks.on_warning(c10::str("staleness reduced: the pipeline drains every ", segment.end_step - first,
                            " mini-batches (epoch ends, RunOptions::checkpoint_every, the hybrid switch), ",
                            "too few to reach its steady state; ", out.str()));
}

// The one-line account of a divergence at mini-batch `step`: where, the likely cause, the remedies.
std::string PipelineTrainer::divergence_message(int64_t step, const std::string& what) {
  std::ostringstream out;
  out << "mini-batch " << step;
  if (progress_.steps_per_epoch > 0) out << " (epoch " << step / progress_.steps_per_epoch + 1 << ")";
  out << ": the run diverged: " << what;
  const std::vector<int> bad = workers_->partitions_with_bad_weights();
  for (size_t i = 0; i < bad.size(); ++i) out << (i ? "," : "; non-finite weights in partition ") << bad[i];
  // The most stale partition is the likely culprit: its gradients are the oldest.
  const auto& d = info().staleness;
  const int worst = static_cast<int>(std::max_element(d.begin(), d.end()) - d.begin());
  if (d[worst] > 0) {
    out << ". Partition " << worst + 1 << " computes with weights d_" << worst + 1 << " = " << d[worst]
        << " update(s) stale at lr " << lr_(std::max<int64_t>(0, step))
        << "; try OptimizerOptions::warmup_epochs, OptimizerOptions::delay_aware_lr, "
           "OptimizerOptions::weight_prediction, OptimizerOptions::spike_compensation, "
           "PipelineOptions::schedule hybrid or a smaller OptimizerOptions::lr";
  } else {
    out << ". No partition uses stale weights; try a smaller OptimizerOptions::lr or OptimizerOptions::warmup_epochs";
  }
  return out.str();
}

}  // namespace stalepipe
