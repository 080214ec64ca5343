// Train a model as a pipeline with stale weights: the library's entry point and the one
// training loop (the CLI's `train`, `bench`, `memory` and the sweeps are its callers).
//
//   auto model = stalepipe::models::ModelBuilder("mycnn", {1, 28, 28, 10}).add(...).build();
//   stalepipe::Options options;
//   options.pipeline().partitions(3);
//   options.optimizer().lr_schedule(stalepipe::LrScheduleKind::kConstant);
//   stalepipe::PipelineTrainer trainer(model, options);
//   trainer.fit(*torch_data_loader, /*epochs=*/2);           // or, step by step:
//   if (auto loss = trainer.feed(x, y)) use(*loss);          //   loss of an earlier batch
//   for (const auto& loss : trainer.flush()) use(loss);      //   drain, the rest
//
// Semantics (docs/design.md): the model's units are cut into K partitions; partition k's
// forward of mini-batch t uses its weights as they are then (stale schedule: missing the
// updates of the d_k = 2(K-k)-1 mini-batches before t), its backward uses the weights current
// at backward time with the activations saved by the forward, and its update is applied at
// once. Mini-batches stream without a flush between *segment boundaries*, where the pipeline
// drains (every update of every fed mini-batch is applied): the end of an epoch, every
// RunOptions::checkpoint_every and RunOptions::eval_every steps, the hybrid switch,
// RunOptions::stop_at_step, a stop request, flush()/finish(), and every
// PipelineOptions::segment_steps mini-batches.
//
// Epoch-valued options (the learning-rate schedule, warmup_epochs, delay_lr_anneal_epochs, a
// hybrid switch in epochs) need the epoch length: pass steps_per_epoch to the constructor (or
// use fit(BatchSource&) on a source that knows it), or give them in steps / as lr_at.
//
// Shapes: x is float [B, C, H, W] (model.input; any device, copied to partition 1's device),
// y is what the loss takes (int64 class indices [B] for the default cross-entropy).
//
// Threading: one thread at a time may call a PipelineTrainer. With the threads executor, K
// worker threads run the partitions while feed() returns; hooks and callbacks run on the
// calling thread, except options.optimizer().lr_at and .loss and FitHooks::on_step and
// on_op, which run on worker threads (feed(): on the segment's own thread, every executor).
//
// Processes: with PipelineOptions::executor kProcesses every rank builds the same trainer
// (options.pipeline().group says where it sits) and makes the same calls; rank r trains
// partition r+1 only, rank 0 reads the data, the losses arrive where the last partition runs
// and epoch metrics reach every rank.
//
// Errors: UsageError for bad options (naming the field) or misuse (feed after finish(),
// evaluate/save/load with mini-batches in the pipeline); RuntimeError for failures at run
// time ("partition k, mini-batch t: <cause>"); DivergedError when the loss or the weights stop
// being finite. After a failure every call but load() throws RuntimeError naming it; load() of
// a good checkpoint clears it.
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <torch/types.h>

#include "stalepipe/api/options.h"
#include "stalepipe/common/error.h"
#include "stalepipe/exec/executor.h"
#include "stalepipe/exec/group.h"
#include "stalepipe/exec/pipeline.h"
#include "stalepipe/models/model.h"
#include "stalepipe/partition/plan.h"
#include "stalepipe/schedule/schedule.h"

namespace stalepipe::exec {
struct CheckpointInfo;
}  // namespace stalepipe::exec

namespace stalepipe {

struct Assembly;
namespace detail {
class TrainerWorkers;
struct SegmentRun;
}  // namespace detail

using exec::StepLoss;

// After each epoch (its drain and, with a test source, its evaluation).
struct EpochSummary {
  int64_t epoch = 0;          // 1-based, counted over the trainer's life
  int64_t end_step = 0;       // global steps done after this epoch
  double lr = 0;              // learning rate of the epoch's last step
  double train_loss = 0;      // sample-weighted mean over the epoch
  // 0..1 over the samples the metric scored (OptimizerOptions::metric); none if it scored none
  std::optional<double> train_accuracy;
  int64_t samples = 0;
  bool evaluated = false;     // test_* hold the evaluation of this epoch's weights
  double test_loss = 0;
  std::optional<double> test_accuracy;
  double images_per_second = 0;  // training images / training seconds of this epoch
  double wall_seconds = 0;       // training seconds since the run began (evaluation excluded)
};

struct EvalResult {
  double loss = 0;                  // sample-weighted mean of the loss function
  std::optional<double> accuracy;   // 0..1 where the metric scored samples (EpochSummary)
  int64_t samples = 0;
};

// One evaluation of fit on its test source: after each epoch and every RunOptions::eval_every
// global steps; the points of test accuracy against training time.
struct EvalPoint {
  int64_t step = 0;           // global steps trained when evaluated
  double epoch = 0;           // the same in epochs (step / steps per epoch; 0 if unknown)
  double wall_seconds = 0;    // training seconds since the run began (evaluation excluded)
  bool epoch_end = false;     // the evaluation of an epoch (EpochSummary has it too); epoch is its number
  EvalResult result;
};

// What building the pipeline resolved, and the staleness the run has had so far.
struct PipelineInfo {
  std::vector<int> ppv;                      // registers after these weight layers
  std::vector<std::string> units;            // per partition: "conv1..fc1"
  std::vector<int64_t> parameters;           // trainable parameters per partition
  std::vector<int> staleness;                // d_k of the schedule's steady state
  std::vector<int> max_in_flight;            // activations held at once per partition
  std::vector<int> weight_versions;          // weight copies held at once (> 1 when stashing)
  std::vector<int> threads_per_worker;
  std::vector<torch::Device> devices;
  int replicas = 1;                          // copies of the pipeline (PipelineOptions::replicas)
  double stale_weight_percent = 0;           // share of parameters in partitions with d_k > 0
  int lag = 0;  // feed() of step t returns the loss of step t - lag (0 without pipelining)
  int64_t hybrid_switch_step = -1;           // first sequential step of a hybrid run
  // As it ran (this trainer's segments, not a resumed run's earlier ones): the largest delay
  // any forward had, the forwards counted, and those at the full d_k.
  schedule::StalenessTally ran;
};

// Mini-batches for the training loop, one epoch at a time, in order.
class BatchSource {
 public:
  virtual ~BatchSource() = default;
  // Mini-batches per epoch, or -1 if unknown (the epoch ends where next() runs out; the
  // processes executor needs it known).
  virtual int64_t batches_per_epoch() const { return -1; }
  // Begins epoch `epoch` (0-based) at its mini-batch `first` (> 0 after a mid-epoch resume).
  virtual void start_epoch(int64_t epoch, int64_t first) = 0;
  // The next mini-batch; an undefined x once the epoch is over.
  virtual exec::Input next() = 0;
};

// The training loop's hooks. on_step and on_op run on the workers' threads with the threads
// executor (while the calling thread waits for the segment); the others on the calling thread.
struct FitHooks {
  // Every mini-batch's loss, in step order (where the last partition runs, on its worker).
  std::function<void(const StepLoss&)> on_step;
  // After each evaluation on the test source (before on_epoch at an epoch end).
  std::function<void(const EvalPoint&)> on_eval;
  // After each epoch's drain and evaluation (save() is allowed).
  std::function<void(const EpochSummary&)> on_epoch;
  // Where a checkpoint belongs: every RunOptions::checkpoint_every steps within an epoch, after
  // each epoch (after on_epoch) and when stopped. The pipeline is drained; save() is allowed.
  std::function<void(int64_t step)> on_checkpoint;
  // Once per fit: a note for the user (e.g. the staleness is reduced by short segments).
  std::function<void(const std::string&)> on_warning;
  // Set to true (e.g. from a SIGINT handler) to drain, call on_checkpoint and return.
  const std::atomic<bool>* stop = nullptr;
  // Nanoseconds the process has spent suspended so far (e.g. counted by a SIGTSTP handler
  // that stops the process). What accrues during a segment is not training time: the loop
  // takes it off the segment's seconds, so a run paused while something else is timed keeps
  // its time to accuracy.
  const std::atomic<int64_t>* suspended_ns = nullptr;
  // Tracing: every op of every segment (exec::SegmentContext::on_op). Runs on the workers'
  // threads, concurrently with the threads executor: it must synchronise what it records.
  std::function<void(int worker, const schedule::Op& op, double start, double end)> on_op;
};

struct FitResult {
  std::vector<EpochSummary> epochs;  // the epochs this call finished
  int64_t steps = 0;                 // global step at the end
  bool stopped = false;              // by hooks.stop or RunOptions::stop_at_step
  double images_per_second = 0;      // this call's training images / training seconds
  double wall_seconds = 0;           // training seconds of the run (resumed runs: all sittings)
};

class PipelineTrainer {
 public:
  // Cuts `model` (its modules are shared, not copied, and moved to the devices) with
  // assemble() (api/assemble.h) and builds one SGD optimizer per partition. steps_per_epoch:
  // mini-batches per epoch where known (0: unknown). Throws UsageError for a bad option, a
  // register where the model allows none (naming the unit and listing the allowed layers), a
  // device that is not present, or an epoch-valued option without steps_per_epoch. With the
  // processes executor it also meets the other ranks (exec/processes.h).
  PipelineTrainer(models::Model model, Options options = {}, int64_t steps_per_epoch = 0);
  // Drains a running pipeline (as finish(), errors swallowed).
  ~PipelineTrainer();
  PipelineTrainer(const PipelineTrainer&) = delete;
  PipelineTrainer& operator=(const PipelineTrainer&) = delete;

  // --- The loop ---------------------------------------------------------------------------
  // Trains from step() until RunOptions::epochs epochs are done (counted over the trainer's
  // life) or RunOptions::max_steps mini-batches, or until stopped; evaluates on `test` (if
  // given) after each epoch and, mid-epoch, where a segment ends at a multiple of
  // RunOptions::eval_every (also when it is stopped there).
  FitResult fit(BatchSource& train, const FitHooks& hooks = {}, BatchSource* test = nullptr);
  // `epochs` passes over `loader`: any range whose elements are batches with tensor members
  // `data` and `target` (torch::data::Example<>, e.g. a torch::data loader with the Stack<>
  // transform) or vectors of such examples (stacked here).
  template <typename Loader, typename = std::enable_if_t<!std::is_base_of_v<BatchSource, Loader>>>
  std::vector<EpochSummary> fit(Loader& loader, int64_t epochs, const FitHooks& hooks = {});

  // --- Step by step -----------------------------------------------------------------------
  // Puts mini-batch (x, y) into the pipeline as step step() and returns the loss of step
  // step() - info().lag once it has come out of the last partition (nullopt while the
  // pipeline fills after construction or flush()). Blocks only until that loss exists; the
  // executor keeps working on the later mini-batches. Throws UsageError after finish(), with
  // the processes executor, or for x/y with different batch sizes.
  // x and y are read later, on the partitions' own threads and GPU streams, after the work the
  // caller queued on its current stream before this call (on a GPU, a non_blocking copy or a
  // normalisation): the caller must not modify them afterwards (make a new tensor per batch).
  std::optional<StepLoss> feed(torch::Tensor x, torch::Tensor y);
  // Drains the pipeline: every fed mini-batch finishes its backward and update. Returns the
  // losses feed() has not returned yet, in step order. Feeding may continue afterwards.
  std::vector<StepLoss> flush();
  // flush(), then refuses further feed() (UsageError). Idempotent.
  std::vector<StepLoss> finish();
  int64_t step() const { return progress_.next_step; }  // global index of the next mini-batch
  int64_t in_flight() const { return progress_.next_step - progress_.returned; }  // fed, loss not yet returned

  // --- Evaluation -------------------------------------------------------------------------
  // Loss (options.optimizer().loss) and accuracy (options.optimizer().metric, where it scores
  // samples) over a pass of `test` with the current weights, batch-norm in eval mode, no
  // gradients; on every rank with processes.
  EvalResult evaluate(BatchSource& test);
  template <typename Loader, typename = std::enable_if_t<!std::is_base_of_v<BatchSource, Loader>>>
  EvalResult evaluate(Loader& loader);
  // Output of the whole model for x [B, C, H, W] (eval mode, no graph), on the last device.
  // Local executors only.
  torch::Tensor predict(const torch::Tensor& x);

  // --- Persistence ------------------------------------------------------------------------
  // Writes DIR/checkpoint/ (exec/checkpoint.h: one shard per partition with weights, buffers
  // and optimizer state; the step, epochs done, training time and the running epoch totals).
  // Throws DivergedError (and writes nothing) if a weight is not finite. With processes every
  // rank writes its shard, rank 0 the manifest. load() restores them into a trainer built
  // with the same model and partitions and continues at the saved step. Both throw
  // UsageError with mini-batches in flight. load() takes the newest checkpoint whose manifest
  // and shards are whole (sizes and CRC-32s as recorded); when the newest is damaged it says
  // so in one line to `on_warning` (default: stderr) naming the file and the fault, and takes
  // the previous one. It throws RuntimeError naming every checkpoint and its fault if none is
  // good, and if the good one does not match the partitions. With processes the ranks agree
  // on the checkpoint: one damaged shard rules it out for all.
  void save(const std::string& dir);
  void load(const std::string& dir, const std::function<void(const std::string&)>& on_warning = {});

  // --- Parts ------------------------------------------------------------------------------
  const models::Model& model() const;
  const partition::Plan& plan() const;
  const PipelineInfo& info() const;
  const Options& options() const { return options_; }
  exec::Pipeline& pipeline();
  // This process's copies of the pipeline, replica 0 (or this rank's replica) first.
  std::vector<exec::Pipeline*> pipelines();
  exec::Executor& executor();
  exec::Group& group();
  // The learning rate of global step t.
  double lr_at(int64_t step) const { return lr_(step); }
  int64_t epochs_done() const { return progress_.epochs_done; }
  // Global steps the run trains (RunOptions::epochs x steps_per_epoch, capped by max_steps);
  // -1 when the epoch length is unknown and max_steps is 0.
  int64_t total_steps() const { return progress_.total_steps; }
  // Copies of all parameters, partition by partition, in module order (with processes only
  // this rank's partition is trained).
  std::vector<torch::Tensor> parameters() const;

  // The one place that runs global steps [first, end) as one segment (fill, stream, drain):
  // the schedule the options imply for `first` (hybrid: stale before the switch, sequential
  // from it), the executor, the staleness tally; a failure becomes sticky. context.lr and
  // context.threads_per_worker are the trainer's. Throws UsageError if the segment is empty or
  // straddles the hybrid switch. fit() and feed() run through it; tests call it directly.
  exec::SegmentResult run_segment(int64_t first, int64_t end, exec::SegmentContext context);

 private:
  struct Feeder;
  struct EpochTotals {
    double loss_sum = 0, seconds = 0;
    int64_t correct = 0, samples = 0, scored = 0;
  };
  // Where the run stands: its length, the steps fed and returned, the epoch in progress.
  struct Progress {
    int64_t steps_per_epoch = 0;
    int64_t total_steps = -1;
    int64_t next_step = 0;         // next step to feed
    int64_t returned = 0;          // first step whose loss has not been returned
    int64_t epochs_done = 0;
    int64_t epoch_begin = 0;       // global step at which the current epoch began
    EpochTotals totals;            // of the epoch in progress
    double wall_seconds = 0;       // training time of the run, over all sittings
    std::vector<int> last_delay;   // max delay per partition in the last segment
    bool warned = false;           // of reduced staleness, in this fit
  };
  struct Segment {
    int64_t end_step = 0;
    bool stopped = false, exhausted = false;
  };
  template <typename Range>
  friend class RangeSource;

  // The learning rate over the run and its length; returns the hybrid switch's step (-1: none).
  EvalResult evaluate_here(BatchSource& test);  // evaluate() on the calling thread
  int64_t build_lr(int64_t steps_per_epoch);
  void check_usable(const char* what) const;
  void check_drained(const char* what) const;
  void check_segment(int64_t first, int64_t end) const;
  exec::SegmentResult record_segment(const detail::SegmentRun& run);
  // Makes the failure sticky (for exceptions derived from std::exception) and rethrows it.
  [[noreturn]] void fail(const std::exception_ptr& error);
  Segment run_fit_segment(BatchSource& source, int64_t end, const FitHooks& hooks);
  int64_t segment_end(int64_t epoch_end) const;
  FitResult run_epochs(BatchSource& train, BatchSource* test, int64_t last_epoch, const FitHooks& hooks);
  EpochSummary finish_epoch(BatchSource* test, int64_t steps_per_epoch, const FitHooks& hooks);
  EvalPoint evaluate_point(BatchSource& test, int64_t steps_per_epoch);
  void warn_if_reduced(const Segment& segment, int64_t first, const FitHooks& hooks);
  std::string divergence_message(int64_t step, const std::string& what);
  std::string load_owned(const std::string& manifest, exec::CheckpointInfo& info);
  void restore(const exec::CheckpointInfo& info, const std::string& dir);
  void start_segment();
  void join_segment();

  template <typename Example>
  static std::pair<torch::Tensor, torch::Tensor> tensors_of(const Example& batch) {
    return {batch.data, batch.target};
  }
  template <typename Example>
  static std::pair<torch::Tensor, torch::Tensor> tensors_of(const std::vector<Example>& batch) {
    std::vector<torch::Tensor> xs, ys;
    for (const auto& e : batch) {
      xs.push_back(e.data);
      ys.push_back(e.target);
    }
    return {torch::stack(xs), torch::stack(ys)};
  }

  Options options_;
  std::function<double(int64_t)> lr_;
  std::unique_ptr<detail::TrainerWorkers> workers_;  // the partitions, replicas and executor
  std::unique_ptr<Feeder> feeder_;                   // feed()'s segment thread and queues
  Progress progress_;
  bool finished_ = false;
  std::string failure_;  // non-empty after a run-time failure
};

// A range of batches (see fit) as a BatchSource.
template <typename Range>
class RangeSource : public BatchSource {
 public:
  explicit RangeSource(Range& range) : range_(range) {}
  void start_epoch(int64_t, int64_t first) override {
    it_.emplace(range_.begin());
    for (int64_t i = 0; i < first && *it_ != range_.end(); ++i) ++*it_;
  }
  exec::Input next() override {
    if (*it_ == range_.end()) return {};
    auto [x, y] = PipelineTrainer::tensors_of(**it_);
    ++*it_;
    return {std::move(x), std::move(y)};
  }

 private:
  Range& range_;
  std::optional<decltype(std::declval<Range&>().begin())> it_;
};

template <typename Loader, typename>
std::vector<EpochSummary> PipelineTrainer::fit(Loader& loader, int64_t epochs, const FitHooks& hooks) {
  SP_CHECK_ARG(epochs >= 1, "fit: epochs must be >= 1, got ", epochs);
  RangeSource<Loader> source(loader);
  return run_epochs(source, nullptr, progress_.epochs_done + epochs, hooks).epochs;
}

template <typename Loader, typename>
EvalResult PipelineTrainer::evaluate(Loader& loader) {
  RangeSource<Loader> source(loader);
  return evaluate(source);
}

}  // namespace stalepipe
