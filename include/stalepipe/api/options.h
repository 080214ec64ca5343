// The one option tree of a training run, shared by the library (PipelineTrainer, train::)
// and the CLI. Four parts, each with fluent setters in the style of LibTorch (torch/arg.h):
//
//   stalepipe::Options options;
//   options.pipeline().partitions(3).balance(stalepipe::Balance::kParams);
//   options.optimizer().lr(0.1).momentum(0.9);
//   options.run().epochs(4).seed(2);
//
// Every field has exactly one default, here. Setting a field checks nothing; check_options()
// (called when a PipelineTrainer or a run is built) throws UsageError naming the field, e.g.
// "OptimizerOptions::lr must be a positive number, got -1". The CLI maps field names to its
// flags (apps/stalepipe/flags.h); nothing below apps/ knows a flag.
//
// config.json (train/options_json.h) stores the tree as one flat object whose keys are the
// field names below ("dataset" is stored as "data", "ppv" as "pipeline" for the run
// directories written before this tree existed).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <torch/arg.h>
#include <torch/types.h>

#include "stalepipe/exec/executor.h"
#include "stalepipe/exec/loss.h"
#include "stalepipe/exec/processes.h"
#include "stalepipe/exec/stage.h"
#include "stalepipe/optim/lr_schedule.h"
#include "stalepipe/partition/balance.h"
#include "stalepipe/schedule/schedule.h"

namespace stalepipe {

using partition::Balance;
using exec::ExecutorKind;
using schedule::ScheduleKind;

using optim::LrScheduleKind;
enum class ProgressMode { kAuto, kBar, kLines, kNone };
// The memory layout of 4-D weights, activations and registers (models/memory_format.h).
// kAuto: the one measured fastest for the zoo network (models::prefers_channels_last), NCHW
// for a model file or a network of the caller's.
enum class Layout { kAuto, kNchw, kChannelsLast };

// A point in training: after `count` epochs, or (in_steps) after `count` mini-batches.
// count < 0: not set.
struct TrainingPoint {
  int64_t count = -1;
  bool in_steps = false;
  bool set() const { return count >= 0; }
  // The global step of the point; epochs need steps_per_epoch (> 0).
  int64_t step(int64_t steps_per_epoch) const { return in_steps ? count : count * steps_per_epoch; }
  bool operator==(const TrainingPoint& o) const { return count == o.count && in_steps == o.in_steps; }
  static TrainingPoint epochs(int64_t n) { return {n, false}; }
  static TrainingPoint steps(int64_t n) { return {n, true}; }
};

// What to train on: the data set and how it is batched (train/ builds the loaders; the
// PipelineTrainer's own loops take any loader).
struct DataOptions {
  // "fashion-mnist[:DIR]" | "mnist:DIR" | "kmnist:DIR" | "cifar10:DIR" | "synthetic[:N]"
  // (data/registry.h).
  TORCH_ARG(std::string, dataset) = "fashion-mnist";
  TORCH_ARG(int64_t, train_subset) = 0;  // first N training samples; 0 = all
  TORCH_ARG(int64_t, test_subset) = 0;   // first N test samples; 0 = all
  TORCH_ARG(bool, augment) = false;      // pad-4 random crop + horizontal flip
  TORCH_ARG(bool, drop_last) = false;    // drop the last partial batch of an epoch
  TORCH_ARG(int64_t, batch_size) = 128;
  TORCH_ARG(int64_t, eval_batch_size) = 1000;
};

// How the model is cut and run.
struct PipelineOptions {
  // Registers right after these weight layers (1-based, increasing; models/model.h); empty =
  // one partition. With partitions K > 0 and an empty ppv, the PPV with K-1 registers that
  // minimises the most expensive partition under `balance` (partition/balance.h): kTime
  // profiles the model first (profile_batch samples, the per-worker thread count; measured,
  // so it may differ between runs; the model's state and the RNG are restored afterwards).
  TORCH_ARG(std::vector<int>, ppv) = {};
  TORCH_ARG(int, partitions) = 0;
  TORCH_ARG(Balance, balance) = Balance::kTime;
  TORCH_ARG(int64_t, profile_batch) = 0;  // 0: DataOptions::batch_size
  // kStale (PPL-SGD), kSequential (no pipelining), kHybrid (stale until hybrid_switch, then
  // sequential; the pipeline drains there and the optimizer state carries over), kGPipe
  // (micro_batches slices, flushed: nothing stale), kOneFOneB (PipeDream's 1F1B with weight
  // stashing). docs/design.md has the semantics of each.
  TORCH_ARG(ScheduleKind, schedule) = ScheduleKind::kStale;
  TORCH_ARG(TrainingPoint, hybrid_switch) = {};
  // Hybrid: at the switch, every weight that feeds a batch norm gets back its initial norm.
  TORCH_ARG(bool, hybrid_norm_reset) = false;
  TORCH_ARG(int, micro_batches) = 1;  // kGPipe only
  // kThreads (one thread per partition), kEmulated (the reference: one thread, a fixed order;
  // bit-identical to the others on CPU) or kProcesses (one rank per partition over c10d Gloo;
  // `group` says where this process sits, unset fields from torchrun's environment).
  TORCH_ARG(ExecutorKind, executor) = ExecutorKind::kThreads;
  TORCH_ARG(exec::ProcessGroupOptions, group) = {};
  // One device per partition; empty = all CPU. Each must be present on this machine.
  TORCH_ARG(std::vector<torch::Device>, devices) = {};
  // Intra-op threads: `threads` in total (0 = all cores), split evenly over the partitions,
  // at least 1 each, except in sequential segments (schedule sequential, a hybrid after its
  // switch), where one partition works at a time with all of them; threads_per_worker > 0
  // sets each partition's count directly, throughout.
  TORCH_ARG(int, threads) = 0;
  TORCH_ARG(int, threads_per_worker) = 0;
  // PipelineTrainer::feed drains at least every this many mini-batches.
  TORCH_ARG(int64_t, segment_steps) = 1 << 16;
  // Weights, activations and registers in NCHW or channels-last (NHWC) layout. The layout
  // changes the order of floating-point reductions, so the weights' bits (never the
  // executors' agreement). A run directory records the layout that ran; a config.json
  // without one was written before the per-model default, in NCHW (or with the earlier key
  // "channels_last": true), and is read that way, so older runs resume as they ran.
  TORCH_ARG(Layout, layout) = Layout::kAuto;
  // Recomputation (activation checkpointing): the units through this weight layer (a position
  // a register could follow; 0 = none) keep no activations from forward to backward, which
  // recomputes them (exec/stage.h). The trained weights are the same bit for bit; a partition
  // with mini-batches in flight keeps less, and each backward costs one more forward of those
  // units (balance kTime and kFlops count it).
  TORCH_ARG(int, recompute) = 0;
};

// SGD, its learning rate over time, the staleness mitigations and the loss.
struct OptimizerOptions {
  TORCH_ARG(double, lr) = 0.05;
  TORCH_ARG(double, momentum) = 0.9;
  TORCH_ARG(double, weight_decay) = 5e-4;
  TORCH_ARG(bool, nesterov) = false;
  // The learning rate of global step t: lr_at(t) if set (a pure function: it runs on worker
  // threads), else the schedule below (train/lr_schedule.h) over the run's steps.
  TORCH_ARG(LrScheduleKind, lr_schedule) = LrScheduleKind::kCosine;
  TORCH_ARG(std::vector<int>, lr_milestones) = {};  // kStep: epochs where lr *= lr_gamma
  TORCH_ARG(double, lr_gamma) = 0.1;
  TORCH_ARG(double, warmup_epochs) = 0;  // linear ramp (may be fractional)
  TORCH_ARG(std::function<double(int64_t step)>, lr_at) = nullptr;
  // Mitigations (optim/sgd.h has the formulas; docs/design.md, "Mitigations").
  TORCH_ARG(bool, delay_aware_lr) = false;        // lr (1+D)^-p per gradient of delay D
  TORCH_ARG(double, delay_lr_anneal_epochs) = 0;  // p falls from 1 to 0 over these; 0: p = 1
  TORCH_ARG(bool, weight_prediction) = false;     // forwards extrapolate D updates ahead
  TORCH_ARG(bool, spike_compensation) = false;    // momentum spike compensation
  TORCH_ARG(bool, fixed_weight_norm) = false;     // BN-fed weights keep their initial norm
  // Training loss of the last partition: scalar from (output, target); a name (exec/loss.h:
  // "cross-entropy", "nll", "mse", ...) or any function. Default: mean cross-entropy of
  // logits [B, classes] against class indices [B].
  TORCH_ARG(exec::Loss, loss) = {};
  // What counts as correct (train and test accuracy); by default top-1 where the target is
  // class indices. Where it scores no sample, no accuracy is reported. Not stored in config.json.
  TORCH_ARG(exec::MetricFn, metric) = exec::top1_accuracy;
};

// The run around the loop: what model, how long, where its files go.
struct RunOptions {
  TORCH_ARG(std::string, model) = "lenet5";  // zoo name (train/ only; the API takes a Model)
  // Zoo networks with a dropout placement (models/zoo.h, ZooOptions): its probability; 0: none.
  TORCH_ARG(double, dropout) = 0;
  // A TorchScript file saved by PyTorch 1.13 (models/torchscript.h) to train instead of a zoo
  // model; empty = none. Its input is the data's (C x 32 x 32, classes) as for the zoo's.
  // With it, `model` must keep its default. Stored as given: a resumed run reloads the file.
  TORCH_ARG(std::string, model_file) = "";
  TORCH_ARG(int64_t, epochs) = 10;
  TORCH_ARG(int64_t, max_steps) = 0;         // end after this many mini-batches; 0 = no limit
  // Stop as if interrupted (drain, checkpoint, resumable) once this many mini-batches are
  // done; 0 = never. Unlike max_steps it does not change the learning-rate schedule, and a
  // run resumed at that step goes on.
  TORCH_ARG(int64_t, stop_at_step) = 0;
  TORCH_ARG(uint64_t, seed) = 1;             // initialisation, shuffling, augmentation
  TORCH_ARG(std::string, out) = "";          // run directory; empty = none
  TORCH_ARG(int64_t, checkpoint_every) = 0;  // also checkpoint every N steps; 0 = per epoch
  // Also evaluate on the test set every N global steps (the pipeline drains there, as at an
  // epoch end), for accuracy against training time; 0 = at epoch ends only.
  TORCH_ARG(int64_t, eval_every) = 0;
  // Test accuracies (%) whose first training time and step summary.json reports (reached or
  // not); they change nothing in training.
  TORCH_ARG(std::vector<double>, targets) = {};
  TORCH_ARG(ProgressMode, progress) = ProgressMode::kAuto;
  TORCH_ARG(std::string, trace) = "";        // Chrome trace JSON of every op (+ FILE.svg)
};

struct Options {
  TORCH_ARG(DataOptions, data) = {};
  TORCH_ARG(PipelineOptions, pipeline) = {};
  TORCH_ARG(OptimizerOptions, optimizer) = {};
  TORCH_ARG(RunOptions, run) = {};
};

// Throws UsageError naming the first field (as "PipelineOptions::micro_batches") whose value
// is impossible on its own or with the others. Needs no model and no data.
void check_options(const Options& options);

// Names of enum values as config.json and the CLI spell them ("time", "1f1b-stash", ...), and
// back; from_name throws UsageError naming `field` and listing the allowed names.
std::string to_string(ProgressMode mode);
ProgressMode progress_from_name(const std::string& name,
                                const std::string& field = "RunOptions::progress");
std::string to_string(Layout layout);  // "auto", "nchw", "channels-last"
Layout layout_from_name(const std::string& name, const std::string& field = "PipelineOptions::layout");

// `asked` with kAuto decided (never kAuto): the zoo's choice for `zoo_model`
// (models::prefers_channels_last), NCHW where it names no zoo network (empty: a model file
// or the caller's own network). PipelineTrainer decides by the name of the model it is given;
// the second form by RunOptions::model, or NCHW for RunOptions::model_file, as train/ builds it.
Layout resolved_layout(Layout asked, const std::string& zoo_model);
Layout resolved_layout(const Options& options);

// The total intra-op thread count `threads` stands for (0: all cores), and each partition's.
int resolved_threads(const PipelineOptions& options);
int threads_per_worker(const PipelineOptions& options, int partitions);

}  // namespace stalepipe
