// Train your own model as a pipeline with stale weights: the library's entry point.
//
//   auto model = stalepipe::models::ModelBuilder("mycnn", {1, 28, 28, 10}).add(...).build();
//   stalepipe::PipelineTrainer trainer(model, stalepipe::PipelineOptions().partitions(3));
//   trainer.fit(*torch_data_loader, /*epochs=*/2);          // or, step by step:
//   if (auto loss = trainer.feed(x, y)) use(*loss);          //   loss of an earlier batch
//   for (const auto& loss : trainer.flush()) use(loss);      //   drain, the rest
//
// The CLI (`stalepipe train`) builds its pipeline and runs its segments through this class.
//
// Semantics (docs/design.md): the model's units are cut into K partitions; partition k's
// forward of mini-batch t uses its weights as they are then (stale schedule: missing the
// updates of the d_k = 2(K-k)-1 mini-batches before t), its backward uses the weights current
// at backward time with the activations saved by the forward, and its update is applied at
// once. Mini-batches stream without a flush until flush()/finish(), the end of a fit() epoch,
// the hybrid switch, or every options.segment_steps mini-batches; there the pipeline drains
// (every update of every fed mini-batch is applied).
//
// Shapes: x is float [B, C, H, W] (model.input; any device, copied to partition 1's device),
// y is what the loss takes (int64 class indices [B] for the default cross-entropy).
//
// Threading: one thread at a time may call a PipelineTrainer. With the threads executor, K
// worker threads run the partitions while feed() returns; callbacks passed to fit() run on
// the calling thread. options.lr_at and options.loss run on worker threads.
//
// Errors: UsageError for bad options (naming the field) or misuse (feed after finish(),
// evaluate/save/load with mini-batches in the pipeline); RuntimeError for failures at run
// time ("partition k, mini-batch t: <cause>"), after which the trainer refuses further use.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <torch/types.h>

#include "stalepipe/api/pipeline_options.h"
#include "stalepipe/common/error.h"
#include "stalepipe/exec/executor.h"
#include "stalepipe/exec/pipeline.h"
#include "stalepipe/models/model.h"
#include "stalepipe/partition/plan.h"

namespace stalepipe {

// The loss of one mini-batch as the last partition computed it (with that partition's weights
// at the time; earlier partitions' weights as the schedule's staleness implies).
struct StepLoss {
  int64_t step = 0;     // global mini-batch index, counted from 0 over the trainer's life
  double loss = 0;      // the loss function's value (mean cross-entropy by default)
  int64_t correct = 0;  // top-1 hits (0 unless logits [B, classes] and int64 labels [B])
  int64_t samples = 0;  // B
};

struct EpochSummary {
  int64_t epoch = 0;          // 1-based, counted over the trainer's life
  int64_t end_step = 0;       // global steps done after this epoch
  double train_loss = 0;      // sample-weighted mean over the epoch
  double train_accuracy = 0;  // 0..1
  int64_t samples = 0;
};

struct EvalResult {
  double loss = 0;      // sample-weighted mean of the loss function
  double accuracy = 0;  // 0..1
  int64_t samples = 0;
};

struct FitCallbacks {
  std::function<void(const StepLoss&)> on_step;      // every mini-batch's loss, in step order
  std::function<void(const EpochSummary&)> on_epoch;  // after each epoch's drain (save() is allowed)
};

// What building the pipeline resolved.
struct PipelineInfo {
  std::vector<int> ppv;                      // registers after these weight layers
  std::vector<std::string> units;            // per partition: "conv1..fc1"
  std::vector<int64_t> parameters;           // trainable parameters per partition
  std::vector<int> staleness;                // d_k, derived from the schedule
  std::vector<int> max_in_flight;            // activations held at once per partition
  std::vector<int> weight_versions;          // weight copies held at once (> 1 when stashing)
  std::vector<int> threads_per_worker;
  double stale_weight_percent = 0;           // share of parameters in partitions with d_k > 0
  int lag = 0;  // feed() of step t returns the loss of step t - lag (0 without pipelining)
};

class PipelineTrainer {
 public:
  // Cuts `model` (its modules are shared, not copied, and moved to options.devices) into
  // partitions and builds one SGD optimizer per partition. Throws UsageError for a bad
  // option, a register where the model allows none (naming the unit and listing the allowed
  // layers), or a device that is not present ("cuda:1 is not present; this machine has 0
  // CUDA device(s)").
  PipelineTrainer(models::Model model, PipelineOptions options = {});
  // Drains a running pipeline (as finish(), errors swallowed).
  ~PipelineTrainer();
  PipelineTrainer(const PipelineTrainer&) = delete;
  PipelineTrainer& operator=(const PipelineTrainer&) = delete;

  // --- Step by step ---------------------------------------------------------------------
  // Puts mini-batch (x, y) into the pipeline as step step() and returns the loss of step
  // step() - info().lag once it has come out of the last partition (nullopt while the
  // pipeline fills after construction or flush()). Blocks only until that loss exists; the
  // executor keeps working on the later mini-batches. Throws UsageError after finish() or for
  // x/y with different batch sizes; RuntimeError if a partition failed (see above).
  std::optional<StepLoss> feed(torch::Tensor x, torch::Tensor y);
  // Drains the pipeline: every fed mini-batch finishes its backward and update. Returns the
  // losses feed() has not returned yet, in step order. Feeding may continue afterwards.
  std::vector<StepLoss> flush();
  // flush(), then refuses further feed() (UsageError). Idempotent.
  std::vector<StepLoss> finish();
  int64_t step() const { return next_step_; }  // global index of the next mini-batch
  int64_t in_flight() const { return next_step_ - returned_; }  // fed, loss not yet returned

  // --- Loops ----------------------------------------------------------------------------
  // `epochs` passes over `loader`: any range whose elements are batches with tensor members
  // `data` and `target` (torch::data::Example<>, e.g. a torch::data loader with the Stack<>
  // transform) or vectors of such examples (stacked here). Drains at each epoch's end.
  template <typename Loader>
  std::vector<EpochSummary> fit(Loader& loader, int64_t epochs, const FitCallbacks& callbacks = {});
  // Loss and top-1 accuracy over `loader` (same batch types as fit) with the current weights,
  // batch-norm in eval mode, no gradients. Throws UsageError with mini-batches in flight.
  template <typename Loader>
  EvalResult evaluate(Loader& loader);
  // Output of the whole model for x [B, C, H, W] (eval mode, no graph), on the last device.
  // Throws UsageError with mini-batches in flight.
  torch::Tensor predict(const torch::Tensor& x);

  // --- Persistence ----------------------------------------------------------------------
  // Writes DIR/checkpoint/ (train/checkpoint.h: one shard per partition with weights,
  // buffers and optimizer state, plus the step). load() restores them into a trainer built
  // with the same model and partitions and continues at the saved step. Both throw
  // UsageError with mini-batches in flight; load throws RuntimeError if the checkpoint is
  // missing or does not match the partitions.
  void save(const std::string& dir);
  void load(const std::string& dir);

  // --- Parts ------------------------------------------------------------------------------
  const models::Model& model() const { return model_; }
  const partition::Plan& plan() const { return plan_; }
  const PipelineInfo& info() const { return info_; }
  const PipelineOptions& options() const { return options_; }
  exec::Pipeline& pipeline() { return *pipeline_; }
  exec::Executor& executor() { return *executor_; }
  // Replaces the executor (e.g. exec::make_processes_executor). Not while feeding.
  void use_executor(std::unique_ptr<exec::Executor> executor);
  // Copies of all parameters, partition by partition, in module order.
  std::vector<torch::Tensor> parameters() const { return pipeline_->parameters(); }

  // Runs global steps [first, end) as one segment (fill, stream, drain) with the schedule the
  // options imply for `first` (hybrid: stale before the switch, sequential from it). Fills in
  // context.lr and context.threads_per_worker when they are empty. Throws UsageError if
  // the segment is empty or straddles the hybrid switch. Used by feed() and by the CLI.
  exec::SegmentResult run_segment(int64_t first, int64_t end, exec::SegmentContext context);

 private:
  struct Feeder;
  void check_drained(const char* what) const;
  void start_segment();
  void join_segment();
  StepLoss eval_batch(const torch::Tensor& x, const torch::Tensor& y);

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

  models::Model model_;
  PipelineOptions options_;
  schedule::ScheduleKind kind_ = schedule::ScheduleKind::kStale;  // before the hybrid switch
  partition::Plan plan_;
  PipelineInfo info_;
  std::unique_ptr<exec::Pipeline> pipeline_;
  std::unique_ptr<exec::Executor> executor_;
  std::unique_ptr<Feeder> feeder_;
  int64_t next_step_ = 0;   // next step to feed
  int64_t returned_ = 0;    // first step whose loss has not been returned
  int64_t epochs_done_ = 0;
  bool finished_ = false;
  std::string failure_;  // non-empty after a run-time failure
};

template <typename Loader>
std::vector<EpochSummary> PipelineTrainer::fit(Loader& loader, int64_t epochs,
                                               const FitCallbacks& callbacks) {
  SP_CHECK_ARG(epochs >= 1, "fit: epochs must be >= 1, got ", epochs);
  std::vector<EpochSummary> summaries;
  for (int64_t e = 0; e < epochs; ++e) {
    EpochSummary summary;
    double loss_sum = 0;
    int64_t correct = 0;
    auto account = [&](const StepLoss& l) {
      loss_sum += l.loss * static_cast<double>(l.samples);
      correct += l.correct;
      summary.samples += l.samples;
      if (callbacks.on_step) callbacks.on_step(l);
    };
    for (auto&& batch : loader) {
      auto [x, y] = tensors_of(batch);
      if (auto l = feed(std::move(x), std::move(y))) account(*l);
    }
    for (const StepLoss& l : flush()) account(l);
    summary.epoch = ++epochs_done_;
    summary.end_step = next_step_;
    const double n = static_cast<double>(summary.samples);
    summary.train_loss = summary.samples ? loss_sum / n : 0;
    summary.train_accuracy = summary.samples ? static_cast<double>(correct) / n : 0;
    summaries.push_back(summary);
    if (callbacks.on_epoch) callbacks.on_epoch(summary);
  }
  return summaries;
}

template <typename Loader>
EvalResult PipelineTrainer::evaluate(Loader& loader) {
  check_drained("evaluate");
  EvalResult result;
  double loss_sum = 0;
  int64_t correct = 0;
  for (auto&& batch : loader) {
    auto [x, y] = tensors_of(batch);
    const StepLoss l = eval_batch(x, y);
    loss_sum += l.loss * static_cast<double>(l.samples);
    correct += l.correct;
    result.samples += l.samples;
  }
  SP_CHECK_ARG(result.samples > 0, "evaluate: the loader gave no samples");
  result.loss = loss_sum / static_cast<double>(result.samples);
  result.accuracy = static_cast<double>(correct) / static_cast<double>(result.samples);
  return result;
}

}  // namespace stalepipe
