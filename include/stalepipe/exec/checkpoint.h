// Checkpoints of a partitioned model: one shard per partition plus a manifest.
//
// Layout under DIR/checkpoint/:
//   manifest.json          {"step", "epoch", "partitions", "ppv", "shards": [...], ...}
//   step-<S>/part-<k>.pt   partition k's parameters, buffers (batch-norm statistics) and
//                          optimizer state after step S-1
// Saving writes the shards, then replaces manifest.json atomically, then removes older shard
// folders; a crash at any moment leaves the previous manifest and the shards it names intact.
//
// Each shard also records the step and partition it belongs to ("stalepipe.step",
// "stalepipe.partition", "stalepipe.partitions"), so loading rejects a manifest whose shards
// disagree with it or with each other. With `--executor processes` every rank writes its own
// shard (save_checkpoint_shard), and rank 0 writes the manifest after a barrier
// (write_checkpoint_manifest).
//
// Checkpoints are taken only when the pipeline is drained (no mini-batch in flight), so
// weights, optimizer state and data position are all a resumed run needs (docs/design.md).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "stalepipe/exec/stage.h"

namespace stalepipe::exec {

struct CheckpointInfo {
  int64_t step = 0;             // the next mini-batch to train (global step)
  int64_t epochs_done = 0;      // completed epochs (evaluated and logged)
  std::string ppv;              // "7,13" or "none"
  std::string config_hash;      // of the settings that determine the result
  double wall_seconds = 0;      // training time so far
  // The running totals of the epoch in progress, so a mid-epoch resume logs the same line.
  double epoch_loss_sum = 0;
  int64_t epoch_correct = 0;
  int64_t epoch_samples = 0;
  int64_t epoch_scored = 0;  // samples the metric scored (manifests before 0.4: all of them)
  double epoch_seconds = 0;
};

// Throws RuntimeError on I/O failure.
void save_checkpoint(const std::string& run_dir, const std::vector<Stage*>& stages,
                     const CheckpointInfo& info);

// One partition's shard of the checkpoint at info.step (partition: 0-based, of `partitions`).
// Writes DIR/checkpoint/step-<S>/part-<partition+1>.pt atomically. Throws RuntimeError on I/O
// failure or when the stage still has mini-batches in flight.
void save_checkpoint_shard(const std::string& run_dir, Stage& stage, int partition,
                           int partitions, const CheckpointInfo& info);

// Replaces the manifest with one naming the `partitions` shards of info.step, then removes
// older shard folders. Call it once every shard of info.step is written.
void write_checkpoint_manifest(const std::string& run_dir, int partitions,
                               const CheckpointInfo& info);

bool has_checkpoint(const std::string& run_dir);

// Loads the manifest only.
CheckpointInfo read_checkpoint_info(const std::string& run_dir);

// Loads weights, buffers and optimizer state into `stages`. Throws RuntimeError if the
// manifest is missing or corrupt, names shards that do not exist, or disagrees with the
// stages (number of partitions, tensor names or shapes).
CheckpointInfo load_checkpoint(const std::string& run_dir, const std::vector<Stage*>& stages);

// Loads only partition `partition` (0-based) of a checkpoint of `partitions` partitions into
// `stage`; the other shards are not read. Same checks as load_checkpoint for that shard.
CheckpointInfo load_checkpoint_shard(const std::string& run_dir, Stage& stage, int partition,
                                     int partitions);

}  // namespace stalepipe::exec
