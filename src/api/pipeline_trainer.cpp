#include "stalepipe/api/pipeline_trainer.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <optional>
#include <thread>

#include <ATen/Parallel.h>

#include "stalepipe/api/assemble.h"
#include "stalepipe/api/options_json.h"
#include "stalepipe/exec/processes.h"
#include "stalepipe/optim/lr_schedule.h"
#include "trainer_impl.h"
#include "trainer_workers_impl.h"

namespace stalepipe {
namespace {

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

// Runs `work` on a thread of its own and returns its result (or rethrows what it threw).
// OpenMP keeps a pool of workers for each thread that ran a parallel region, for as long as
// that thread lives; with more such workers than cores, libgomp cuts their spinning short, and
// a partition's many small parallel regions then wait on futexes: on 2 cores mixnet_s trained
// at about 0.6x its first epoch's rate once an evaluation had run on the caller's thread. A
// thread that ends takes its pool with it.
template <typename Work>
auto on_own_thread(Work&& work) -> decltype(work()) {
  std::optional<decltype(work())> result;
  std::exception_ptr error;
  std::thread([&] {
    try {
      result.emplace(work());
    } catch (...) {
      error = std::current_exception();
    }
  }).join();
  if (error) std::rethrow_exception(error);
  return std::move(*result);
}

}  // namespace

PipelineTrainer::PipelineTrainer(models::Model model, Options options, int64_t steps_per_epoch)
    : options_(std::move(options)), feeder_(std::make_unique<Feeder>()) {
  check_options(options_);
  // Decided by the network given; options() then tells the layout that runs.
  options_.pipeline().layout(resolved_layout(options_.pipeline().layout(), model.script ? "" : model.name));
  SP_CHECK_ARG(steps_per_epoch >= 0, "PipelineTrainer: steps_per_epoch must be >= 0, got ", steps_per_epoch);
  const int64_t switch_step = build_lr(steps_per_epoch);
  workers_ = std::make_unique<detail::TrainerWorkers>(std::move(model), options_, steps_per_epoch, switch_step);
}

int64_t PipelineTrainer::build_lr(int64_t steps_per_epoch) {
  const OptimizerOptions& o = options_.optimizer();
  const RunOptions& run = options_.run();
  Progress& p = progress_;
  p.steps_per_epoch = steps_per_epoch;
  if (steps_per_epoch > 0) p.total_steps = run.epochs() * steps_per_epoch;
  if (run.max_steps() > 0) p.total_steps = p.total_steps < 0 ? run.max_steps() : std::min(p.total_steps, run.max_steps());
  const TrainingPoint& sw = options_.pipeline().hybrid_switch();
  const char* needs_epochs = epoch_valued_field(options_);
  SP_CHECK_ARG(!needs_epochs || steps_per_epoch > 0, needs_epochs,
               " is given in epochs or spans the run: pass PipelineTrainer the epoch length "
               "(steps_per_epoch), or use steps, a constant lr_schedule or lr_at");
  const int64_t switch_step = sw.set() ? sw.step(steps_per_epoch) : -1;
  SP_CHECK_ARG(switch_step < 0 || p.total_steps < 0 || switch_step <= p.total_steps, "PipelineOptions::hybrid_switch ",
               to_text(sw), ": training ends after ", p.total_steps, " steps; the switch must come no later");
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
    s.total_steps = std::max<int64_t>(1, p.total_steps);
    auto schedule = std::make_shared<optim::LrSchedule>(s);
    lr_ = [schedule](int64_t t) { return schedule->at(t); };
  }
  return switch_step;
}

const models::Model& PipelineTrainer::model() const { return workers_->model(); }
const partition::Plan& PipelineTrainer::plan() const { return workers_->plan(); }
const PipelineInfo& PipelineTrainer::info() const { return workers_->info(); }
exec::Pipeline& PipelineTrainer::pipeline() { return workers_->pipeline(); }
std::vector<exec::Pipeline*> PipelineTrainer::pipelines() { return workers_->pipelines(); }
exec::Executor& PipelineTrainer::executor() { return workers_->executor(); }
exec::Group& PipelineTrainer::group() { return workers_->group(); }
std::vector<torch::Tensor> PipelineTrainer::parameters() const { return workers_->pipeline().parameters(); }

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
  SP_CHECK_ARG(!feeder_->thread.joinable(), what, ": ", in_flight(),
               " mini-batch(es) are in the pipeline; call flush() first");
}

exec::SegmentResult PipelineTrainer::run_segment(int64_t first, int64_t end, exec::SegmentContext context) {
  check_segment(first, end);
  detail::SegmentRun run;
  try {
    run = workers_->execute(first, end, std::move(context), options_, lr_);
  } catch (...) {
    fail(std::current_exception());
  }
  return record_segment(run);
}

void PipelineTrainer::check_segment(int64_t first, int64_t end) const {
  SP_CHECK_ARG(0 <= first && first < end, "run_segment: empty segment [", first, ", ", end, ")");
  const int64_t switch_step = info().hybrid_switch_step;
  const bool hybrid = options_.pipeline().schedule() == ScheduleKind::kHybrid;
  SP_CHECK_ARG(!hybrid || end <= switch_step || first >= switch_step, "run_segment: [", first,
               ", ", end, ") straddles the hybrid switch at step ", switch_step, "; end it there");
}

exec::SegmentResult PipelineTrainer::record_segment(const detail::SegmentRun& run) {
  progress_.last_delay = workers_->tally(run);
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

EvalResult PipelineTrainer::evaluate(BatchSource& test) {
  check_usable("evaluate");
  check_drained("evaluate");
  return on_own_thread([&] { return evaluate_here(test); });
}

EvalResult PipelineTrainer::evaluate_here(BatchSource& test) {
  torch::NoGradGuard no_grad;
  at::set_num_threads(resolved_threads(options_.pipeline()));
  double sums[4] = {0, 0, 0, 0};  // loss x samples, correct, samples, scored
  test.start_epoch(0, 0);
  // Replica 0 evaluates: the replicas' weights and statistics are equal.
  exec::Group& group = workers_->group();
  for (int64_t b = 0; group.replica() == 0; ++b) {
    // Only the rank that runs partition 1 reads data; the others follow its batch count.
    exec::Input in = group.owns(0) ? test.next() : exec::Input{};
    const int64_t known = test.batches_per_epoch();
    if (group.owns(0) ? !in.x.defined() : b >= known) break;
    // The prediction runs on this thread's current stream, after the batch's copy ahead; the
    // batch's memory, the copy stream's, is not reused before the prediction is done.
    if (in.ready) {
      const auto stream = exec::current_stream(in.x.device());
      stream->wait(in.ready.get());
      stream->hold(in.x);
      stream->hold(in.target);
    }
    auto [out, target] = group.predict(workers_->pipeline(), in.x, in.target, b);
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
  group.share_from_last(shared);
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
  return on_own_thread([&] { return workers_->pipeline().predict(x); });
}

}  // namespace stalepipe
