// Checkpoints of a partitioned model: one shard per partition plus a manifest; the last two
// checkpoints are kept, so a damaged newest one can be skipped.
//
// Layout under DIR/checkpoint/:
//   manifest.json          the newest checkpoint: {"format": 2, "step", "epoch", "partitions",
//                          "ppv", "shards": [...], "shard_bytes": [...], "shard_crc32": [...]}
//   previous.json          the checkpoint before it (same form), once there is one
//   step-<S>/part-<k>.pt   partition k's parameters, buffers (batch-norm statistics) and
//                          optimizer state after step S-1
// Saving writes the shards, copies manifest.json to previous.json, replaces manifest.json
// (each write atomic: temporary file, fsync, rename, fsync the folder), and only then removes
// the shard folders neither manifest names; a crash at any moment leaves two whole manifests,
// or one, and the shards they name.
//
// Every shard's size and CRC-32 are in its manifest and are checked before the shard is
// deserialized, so a truncated or bit-flipped file is reported as such instead of reaching
// LibTorch's unpickler. Manifests of format 1 (before checksums) still load, unchecked.
// Each shard also records the step and partition it belongs to ("stalepipe.step",
// "stalepipe.partition", "stalepipe.partitions"), so loading rejects a manifest whose shards
// disagree with it or with each other.
//
// With `--executor processes` every rank writes its own shard (save_checkpoint_shard returns
// its size and checksum); the ranks hand those to rank 0 through the process group, and rank 0
// writes the manifest. Nothing is read back from the shared directory, so this is also correct
// when each host has its own directory (docs/reliability.md).
//
// Checkpoints are taken only when the pipeline is drained (no mini-batch in flight), so
// weights, optimizer state and data position are all a resumed run needs (docs/design.md).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "stalepipe/common/crc32.h"
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
  int64_t epoch_scored = 0;  // samples the metric scored (0.2 manifests: all of them)
  double epoch_seconds = 0;
};

// What the manifest records of one written shard.
struct ShardDigest {
  int64_t bytes = 0;
  uint32_t crc32 = 0;
};

// One checkpoint's manifest as read from disk.
struct CheckpointManifest {
  std::string path;                 // the manifest file
  int format = 2;                   // 1: written before checksums existed
  CheckpointInfo info;
  std::vector<std::string> shards;  // relative to DIR/checkpoint/, one per partition
  std::vector<ShardDigest> digests; // one per shard; empty for format 1
};

// CRC-32 of `bytes` (common/crc32.h), as the manifests record it.
using stalepipe::crc32_of;

// Throws RuntimeError on I/O failure.
void save_checkpoint(const std::string& run_dir, const std::vector<Stage*>& stages,
                     const CheckpointInfo& info);

// One partition's shard of the checkpoint at info.step (partition: 0-based, of `partitions`).
// Writes DIR/checkpoint/step-<S>/part-<partition+1>.pt atomically and returns its size and
// checksum for the manifest. Throws RuntimeError on I/O failure or when the stage still has
// mini-batches in flight.
ShardDigest save_checkpoint_shard(const std::string& run_dir, Stage& stage, int partition,
                                  int partitions, const CheckpointInfo& info);

// Makes info.step the newest checkpoint: keeps the current manifest as previous.json, writes
// the manifest naming the shards of info.step with `digests` (one per partition, in order),
// then removes the shard folders that neither manifest names. Call it once every shard of
// info.step is written. Throws RuntimeError on I/O failure.
void write_checkpoint_manifest(const std::string& run_dir, const CheckpointInfo& info,
                               const std::vector<ShardDigest>& digests);

// A stage's weights, buffers and optimizer state as bytes, and back: how the replicas of a
// partition take replica 0's state (load_stage_state throws RuntimeError for bytes that are
// not such a state).
std::string stage_state(Stage& stage);
void load_stage_state(Stage& stage, const std::string& bytes);
// Whether run_dir holds a checkpoint manifest (good or not).
bool has_checkpoint(const std::string& run_dir);

// The manifests of run_dir that exist, newest first (manifest.json, previous.json).
std::vector<std::string> checkpoint_manifests(const std::string& run_dir);

// Parses one manifest. Throws RuntimeError "PATH: corrupt checkpoint manifest: WHAT" when it
// is not JSON, lacks a field, or its shard lists disagree in length.
CheckpointManifest read_checkpoint_manifest(const std::string& path);

// The info of the newest manifest that parses (shards are not read). Throws RuntimeError
// naming each manifest and its fault when none does, or when there is none.
CheckpointInfo read_checkpoint_info(const std::string& run_dir);

// Loads partition `partition` (0-based) of a checkpoint of `partitions` partitions into
// `stage`; the other shards are not read. Throws RuntimeError naming the shard file if it is
// missing, has another size or checksum than the manifest records (checked before it is
// deserialized), cannot be deserialized, or disagrees with the manifest or the stage
// (tensor names or shapes).
CheckpointInfo load_checkpoint_shard(const CheckpointManifest& manifest, Stage& stage,
                                     int partition, int partitions);

// Loads the newest checkpoint of run_dir into `stages` (every partition in this process),
// strictly: no fallback to the previous one (PipelineTrainer::load has it). Throws
// RuntimeError as read_checkpoint_manifest and load_checkpoint_shard.
CheckpointInfo load_checkpoint(const std::string& run_dir, const std::vector<Stage*>& stages);

}  // namespace stalepipe::exec
