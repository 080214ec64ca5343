// PipelineTrainer::save and load: the checkpoint of every partition, wherever it runs, and the
// fall-back to the previous checkpoint when the newest is damaged.
#include <algorithm>

#include "stalepipe/api/options_json.h"
#include "stalepipe/api/pipeline_trainer.h"
#include "stalepipe/exec/checkpoint.h"
#include "trainer_impl.h"
#include "trainer_workers_impl.h"

namespace stalepipe {

void PipelineTrainer::save(const std::string& dir) {
  check_usable("save");
  check_drained("save");
  // Never overwrite a good checkpoint with weights that are not numbers.
  if (!workers_->partitions_with_bad_weights().empty()) {
    throw DivergedError(divergence_message(progress_.next_step - 1, "the weights are not finite"));
  }
  const int K = plan().num_partitions();
  exec::CheckpointInfo info;
  info.step = progress_.next_step;
  info.epochs_done = progress_.epochs_done;
  info.ppv = partition::format_ppv(plan().ppv);
  info.config_hash = config_hash(options_);
  info.wall_seconds = progress_.wall_seconds;
  std::vector<double> totals{progress_.totals.loss_sum, static_cast<double>(progress_.totals.correct),
                             static_cast<double>(progress_.totals.samples), static_cast<double>(progress_.totals.scored)};
  group().share_from_last(totals);
  info.epoch_loss_sum = totals[0];
  info.epoch_correct = static_cast<int64_t>(totals[1]);
  info.epoch_samples = static_cast<int64_t>(totals[2]);
  info.epoch_scored = static_cast<int64_t>(totals[3]);
  info.epoch_seconds = progress_.totals.seconds;
  // Each process digests the shards it wrote; the gather hands every digest to rank 0 (it is
  // collective, so every shard of this step is written when it returns). Rank 0 never reads
  // another rank's shard, so hosts need not share the run directory for the manifest to hold.
  std::vector<int64_t> digests(2 * K, 0);
  for (int k = 0; k < K; ++k) {
    if (!group().owns(k) || group().replica() != 0) continue;  // one copy of the weights
    const auto d = exec::save_checkpoint_shard(dir, pipeline().stage(k), k, K, info);
    digests[2 * k] = d.bytes;
    digests[2 * k + 1] = d.crc32;
  }
  group().gather_partitions(digests);
  if (!group().leader()) return;
  std::vector<exec::ShardDigest> shards;
  for (int k = 0; k < K; ++k) shards.push_back({digests[2 * k], static_cast<uint32_t>(digests[2 * k + 1])});
  exec::write_checkpoint_manifest(dir, info, shards);
}

// Loads the partitions this process owns (in replica 0) from one checkpoint; "" or what is
// wrong with it.
std::string PipelineTrainer::load_owned(const std::string& manifest, exec::CheckpointInfo& info) {
  const int K = plan().num_partitions();
  try {
    const exec::CheckpointManifest m = exec::read_checkpoint_manifest(manifest);
    info = m.info;
    // The other replicas take replica 0's state once the ranks agree on the checkpoint.
    for (int k = 0; k < K; ++k) {
      if (group().owns(k) && group().replica() == 0) exec::load_checkpoint_shard(m, pipeline().stage(k), k, K);
    }
    return "";
  } catch (const RuntimeError& e) {
    return e.what();
  }
}

void PipelineTrainer::load(const std::string& dir, const std::function<void(const std::string&)>& on_warning) {
  check_drained("load");
  const int K = plan().num_partitions();
  const auto manifests = exec::checkpoint_manifests(dir);
  SP_CHECK(!manifests.empty(), dir, "/checkpoint/manifest.json: no checkpoint manifest (was the run "
           "started with RunOptions::out ", dir, "?)");
  std::string faults;
  for (size_t i = 0; i < manifests.size(); ++i) {
    exec::CheckpointInfo info;
    std::string fault = load_owned(manifests[i], info);
    // Every process must take the same checkpoint: one bad shard rules it out for all.
    std::vector<int64_t> bad(K, 0);
    for (int k = 0; k < K; ++k) bad[k] = group().owns(k) && !fault.empty();
    group().gather_partitions(bad);
    const auto first_bad = std::find(bad.begin(), bad.end(), 1);
    if (first_bad == bad.end()) {
      group().copy_first_replica(pipelines());
      restore(info, dir);
      return;
    }
    // A fault found by another rank: that rank's own warning names the file.
    const bool mine = !fault.empty();
    if (!mine) fault = c10::str(manifests[i], ": the shard of partition ", first_bad - bad.begin() + 1, " is damaged (its rank's warning says how)");
    faults += (faults.empty() ? "" : "; ") + fault;
    if (i + 1 < manifests.size() && (mine || group().leader())) {
      warn(on_warning, c10::str("warning: ", fault, "; falling back to the previous checkpoint ", manifests[i + 1]));
    }
  }
  throw RuntimeError(c10::str(dir, ": no usable checkpoint: ", faults,
                              " (nothing to resume from; start the run again in another directory)"));
}

void PipelineTrainer::restore(const exec::CheckpointInfo& info, const std::string& dir) {
  SP_CHECK(info.ppv == partition::format_ppv(plan().ppv), "load ", dir,
           ": the checkpoint has registers after layers ", info.ppv, " but this pipeline after ",
           partition::format_ppv(plan().ppv));
  progress_.next_step = progress_.returned = info.step;
  progress_.epochs_done = info.epochs_done;
  progress_.epoch_begin = progress_.steps_per_epoch > 0 ? progress_.epochs_done * progress_.steps_per_epoch : info.step;
  progress_.wall_seconds = info.wall_seconds;
  progress_.totals = {info.epoch_loss_sum, info.epoch_seconds, info.epoch_correct, info.epoch_samples, info.epoch_scored};
  failure_.clear();
}

}  // namespace stalepipe
