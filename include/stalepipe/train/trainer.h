// A training run with a run directory, on top of the one training loop (PipelineTrainer):
// data -> model (the zoo) -> PipelineTrainer::fit, with config.json, metrics.jsonl,
// summary.json, checkpoints, progress, the stop flag (Ctrl-C) and the divergence message.
//
// Segments: the pipeline is drained at every epoch end, every checkpoint_every steps, the
// hybrid switch and when stopped; checkpoints are taken only at drain points, so a resumed
// run replays exactly what an uninterrupted one does (docs/design.md, "Checkpoints").
// With the processes executor every rank calls train() (or resume()) with the same options;
// rank 0 writes the run's files and logs, every rank its own checkpoint shard.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <torch/types.h>

#include "stalepipe/api/options.h"
#include "stalepipe/api/pipeline_trainer.h"
#include "stalepipe/common/error.h"
#include "stalepipe/models/model.h"
#include "stalepipe/train/time_to_target.h"

namespace stalepipe::train {

// Thrown by train() and resume() when the run diverges (common/error.h); the message names
// the mini-batch, the partition, its staleness and learning rate, the remedies and the
// checkpoint that survives.
using stalepipe::DivergedError;

struct TrainResult {
  std::vector<EpochSummary> epochs;  // every epoch of the run (a resumed run: all sittings)
  std::vector<EvalPoint> evaluations;  // every test evaluation (epoch ends, RunOptions::eval_every), all sittings
  std::vector<TargetTime> time_to_target;  // per RunOptions::targets, from `evaluations`
  PipelineInfo info;                 // the cut, its schedule's staleness and, in info.ran, the measured one
  int64_t steps = 0;
  std::optional<double> test_accuracy;  // none where the metric scores no sample
  double test_loss = 0;
  double train_loss = 0;
  double images_per_second = 0;  // this sitting's
  double wall_seconds = 0;       // training time over all sittings
  // The machines its sittings trained on (common/machine.h), distinct, in order; empty
  // without RunOptions::out and on ranks other than the leader. Training times compare only
  // between runs of one machine.
  std::vector<std::string> machines;
  bool interrupted = false;      // stopped (stop flag or stop_at_step); a checkpoint was written
  std::vector<torch::Tensor> parameters;  // final parameters of all partitions, in order
};

struct TrainHooks {
  // Set to true (e.g. from a SIGINT handler) to drain, checkpoint and return.
  const std::atomic<bool>* stop = nullptr;
  // Time suspended so far, not training time (api::FitHooks::suspended_ns).
  const std::atomic<int64_t>* suspended_ns = nullptr;
  std::function<void(const std::string&)> log;  // one human-readable line; default: stderr
  // A note for the user (the loop's FitHooks::on_warning), instead of a `log` line.
  std::function<void(const std::string&)> on_warning;
  // Called after each checkpoint is safely on disk, with the step it resumes at.
  std::function<void(int64_t step)> on_checkpoint;
  // Called once training has ended without being stopped, after summary.json, on every rank,
  // with the trained pipeline (e.g. to export its model: models/torchscript.h).
  std::function<void(const PipelineTrainer& trainer)> on_trained;
  // The loop's own (FitHooks), called after the run has recorded what they report: on_step on
  // the workers' threads, the others on the calling thread.
  std::function<void(const StepLoss&)> on_step;
  std::function<void(const EvalPoint&)> on_eval;
  std::function<void(const EpochSummary&)> on_epoch;
};

// Data a calling program holds itself, instead of the data set DataOptions::dataset names (the
// Python front end's Dataset or DataLoader): batches to train on and, optionally, to evaluate
// on. The run records `name` as its DataOptions::dataset, and in config.json that the caller
// held the data, so that it resumes only with data given again.
struct CallerData {
  std::string name;                    // the logs' and summary.json's data set: "python:TensorDataset"
  std::unique_ptr<BatchSource> train;  // its batches_per_epoch() is the epoch (-1: where it runs out)
  std::unique_ptr<BatchSource> test;   // null: no evaluation
  // One sample's [C, H, W], and the width of the network's output as num_classes.
  models::InputShape input;
  int64_t train_samples = -1, test_samples = -1;  // for the start-up line; -1: not known
};

// Runs a training run. Throws UsageError for bad options (naming the field) and RuntimeError
// for failures. With options.run().out set, writes config.json, metrics.jsonl, summary.json
// and checkpoints there, and refuses a directory that already holds a run. While it runs it
// holds a flock on out/lock (rank R > 0 of processes: out/lock.rank-R); a second train() or
// resume() into the directory throws UsageError at once, naming the pid that holds it.
// With `data`, trains on the caller's batches (CallerData) instead; the data options that
// shape a loader's batches do not apply then, and the processes executor is refused.
TrainResult train(const Options& options, const TrainHooks& hooks = {}, CallerData* data = nullptr);

// Continues the run in run_dir from its last whole checkpoint with the settings of its
// config.json (a damaged newest one: a warning line to hooks.log, then the previous one; see
// PipelineTrainer::load); locks run_dir as train() does. `group` says where this process
// sits when the run uses the processes executor. A run that trained on CallerData resumes
// only with `data` given (the same data, for the run to continue as it would have), and one
// that did not, only without.
TrainResult resume(const std::string& run_dir, const TrainHooks& hooks = {},
                   const exec::ProcessGroupOptions& group = {}, CallerData* data = nullptr);

// The settings of the run in run_dir (its config.json), out set to run_dir.
Options read_run_config(const std::string& run_dir);

// Evaluates the last checkpoint of run_dir on its test set.
EvalResult evaluate_run(const std::string& run_dir, int threads = 0);

}  // namespace stalepipe::train
