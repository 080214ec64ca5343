// Trains a model from TrainOptions: data -> model -> partitions -> schedule -> executor ->
// metrics, with evaluation each epoch, a run directory and checkpoints.
//
// Segments: the pipeline is drained at every epoch end, at every checkpoint_every steps, at
// the hybrid switch and when stopped; between these points mini-batches stream without a
// flush. Checkpoints are taken only at drain points, so a resumed run replays exactly what
// an uninterrupted one does (docs/design.md, "Checkpoints").
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <torch/types.h>

#include "stalepipe/exec/processes.h"
#include "stalepipe/common/error.h"
#include "stalepipe/train/options.h"

namespace stalepipe::train {

// Thrown by train() and resume() when the run diverges (common/error.h); the message names
// the mini-batch, the partition, its staleness and learning rate, and the remedies.
using stalepipe::DivergedError;

struct EpochMetrics {
  int64_t epoch = 0;  // 1-based
  int64_t step = 0;   // global steps done at the end of the epoch
  double lr = 0;      // learning rate of the epoch's last step
  double train_loss = 0;
  double train_accuracy = 0;
  double test_loss = 0;
  double test_accuracy = 0;
  double images_per_second = 0;  // training images / training time of this epoch
  double wall_seconds = 0;       // training time since the run began (evaluation excluded)
};

struct PartitionReport {
  std::vector<int64_t> parameters;
  std::vector<int> staleness;      // d_k derived from the stale (or sequential) schedule
  std::vector<int> max_in_flight;  // activations held at once (in mini-batches)
  std::vector<int> weight_versions;  // weight copies held at once (> 1 with weight stashing)
  std::vector<std::string> units;  // "units 0-3 (conv1..fc1)"
  double stale_weight_percent = 0;
};

struct TrainResult {
  std::vector<EpochMetrics> epochs;
  PartitionReport partitions;
  int64_t steps = 0;
  double test_accuracy = 0;
  double test_loss = 0;
  double train_loss = 0;
  double images_per_second = 0;
  double wall_seconds = 0;
  bool interrupted = false;   // stopped by the stop flag; a checkpoint was written
  std::vector<torch::Tensor> parameters;  // final parameters of all partitions, in order
};

struct TrainHooks {
  // Set to true (e.g. from a SIGINT handler) to drain, checkpoint and return.
  const std::atomic<bool>* stop = nullptr;
  std::function<void(const std::string&)> log;  // one human-readable line; default: stderr
  // Called after each checkpoint is safely on disk, with the step it resumes at.
  std::function<void(int64_t step)> on_checkpoint;
  // With --executor processes: this process's rank and the rendezvous (unset fields come from
  // RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT). Rank r trains partition r+1; WORLD_SIZE must
  // equal the number of partitions. Rank 0 writes config.json, metrics.jsonl, summary.json and
  // the checkpoint manifest and logs; every rank writes its own checkpoint shard; the metrics
  // (computed on the last rank) reach every rank, so every rank returns the same TrainResult
  // except `parameters`, of which only the rank's own partition is trained.
  exec::ProcessGroupOptions process_group;
};

// Runs (or, with resume_dir non-empty, continues) a training run. Throws UsageError for bad
// options and RuntimeError for failures. With options.out set, writes config.json,
// metrics.jsonl, summary.json and checkpoints there.
TrainResult train(const TrainOptions& options, const TrainHooks& hooks = {});

// Continues the run in run_dir from its last checkpoint with the settings of its config.json.
TrainResult resume(const std::string& run_dir, const TrainHooks& hooks = {});

// Evaluates the last checkpoint of run_dir on its test set. Returns {loss, accuracy}.
std::pair<double, double> evaluate_run(const std::string& run_dir, int threads = 0);

}  // namespace stalepipe::train
