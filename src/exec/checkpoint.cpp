#include "stalepipe/exec/checkpoint.h"

#include <filesystem>
#include <sstream>

#include <nlohmann/json.hpp>
#include <torch/serialize.h>

#include "common/json_file_impl.h"
#include "stalepipe/common/error.h"
#include "stalepipe/common/files.h"

namespace stalepipe::exec {
namespace fs = std::filesystem;
namespace {

std::string checkpoint_dir(const std::string& run_dir) { return (fs::path(run_dir) / "checkpoint").string(); }
std::string manifest_path(const std::string& run_dir) {
  return (fs::path(checkpoint_dir(run_dir)) / "manifest.json").string();
}

}  // namespace

static std::string shard_name(int64_t step, int partition) {
  return "step-" + std::to_string(step) + "/part-" + std::to_string(partition + 1) + ".pt";
}

void save_checkpoint_shard(const std::string& run_dir, Stage& stage, int partition,
                           int partitions, const CheckpointInfo& info) {
  SP_CHECK(stage.in_flight() == 0, "checkpoint at step ", info.step, ": partition ",
           partition + 1, " still has mini-batches in flight");
  const fs::path path = fs::path(checkpoint_dir(run_dir)) / shard_name(info.step, partition);
  fs::create_directories(path.parent_path());
  torch::serialize::OutputArchive archive;
  stage.module()->save(archive);
  stage.optimizer().save(archive);
  archive.write("stalepipe.step", torch::tensor(info.step, torch::kLong));
  archive.write("stalepipe.partition", torch::tensor(int64_t{partition}, torch::kLong));
  archive.write("stalepipe.partitions", torch::tensor(int64_t{partitions}, torch::kLong));
  std::ostringstream bytes;
  archive.save_to(bytes);
  write_file_atomic(path.string(), bytes.str());
}

void write_checkpoint_manifest(const std::string& run_dir, int partitions,
                               const CheckpointInfo& info) {
  const std::string folder = "step-" + std::to_string(info.step);
  nlohmann::json shards = nlohmann::json::array();
  for (int k = 0; k < partitions; ++k) shards.push_back(shard_name(info.step, k));
  nlohmann::json manifest = {{"format", 1},
                             {"step", info.step},
                             {"epochs_done", info.epochs_done},
                             {"partitions", partitions},
                             {"ppv", info.ppv},
                             {"config_hash", info.config_hash},
                             {"wall_seconds", info.wall_seconds},
                             {"epoch_loss_sum", info.epoch_loss_sum},
                             {"epoch_correct", info.epoch_correct},
                             {"epoch_samples", info.epoch_samples},
                             {"epoch_scored", info.epoch_scored},
                             {"epoch_seconds", info.epoch_seconds},
                             {"shards", shards}};
  write_file_atomic(manifest_path(run_dir), manifest.dump(2) + "\n");
  // Only now are older shard folders unreferenced.
  for (const auto& entry : fs::directory_iterator(checkpoint_dir(run_dir))) {
    if (entry.is_directory() && entry.path().filename() != folder &&
        entry.path().filename().string().rfind("step-", 0) == 0) {
      std::error_code ignored;
      fs::remove_all(entry.path(), ignored);
    }
  }
}

void save_checkpoint(const std::string& run_dir, const std::vector<Stage*>& stages,
                     const CheckpointInfo& info) {
  const int K = static_cast<int>(stages.size());
  for (int k = 0; k < K; ++k) save_checkpoint_shard(run_dir, *stages[k], k, K, info);
  write_checkpoint_manifest(run_dir, K, info);
}

bool has_checkpoint(const std::string& run_dir) { return fs::exists(manifest_path(run_dir)); }

CheckpointInfo read_checkpoint_info(const std::string& run_dir) {
  const std::string path = manifest_path(run_dir);
  SP_CHECK(fs::exists(path), path, ": no checkpoint manifest (was the run started with RunOptions::out ",
           run_dir, "?)");
  const nlohmann::json manifest = read_json_file(path);
  try {
    CheckpointInfo info;
    info.step = manifest.at("step").get<int64_t>();
    info.epochs_done = manifest.at("epochs_done").get<int64_t>();
    info.ppv = manifest.at("ppv").get<std::string>();
    info.config_hash = manifest.at("config_hash").get<std::string>();
    info.wall_seconds = manifest.at("wall_seconds").get<double>();
    info.epoch_loss_sum = manifest.at("epoch_loss_sum").get<double>();
    info.epoch_correct = manifest.at("epoch_correct").get<int64_t>();
    info.epoch_samples = manifest.at("epoch_samples").get<int64_t>();
    info.epoch_scored = manifest.value("epoch_scored", info.epoch_samples);
    info.epoch_seconds = manifest.at("epoch_seconds").get<double>();
    return info;
  } catch (const nlohmann::json::exception& e) {
    throw RuntimeError(path + ": corrupt checkpoint manifest: " + e.what());
  }
}

CheckpointInfo load_checkpoint_shard(const std::string& run_dir, Stage& stage, int k,
                                     int partitions) {
  const CheckpointInfo info = read_checkpoint_info(run_dir);
  const std::string path = manifest_path(run_dir);
  const auto manifest = read_json_file(path);
  const auto& shards = manifest.at("shards");
  SP_CHECK(static_cast<int>(shards.size()) == partitions, path, ": checkpoint has ", shards.size(),
           " partitions, this run has ", partitions);
  const std::string shard =
      (fs::path(checkpoint_dir(run_dir)) / shards[k].get<std::string>()).string();
  SP_CHECK(fs::exists(shard), path, ": shard ", shard, " is missing");
  try {
    torch::serialize::InputArchive archive;
    archive.load_from(shard, stage.device());
    // Shards written before the tags existed carry none; they are trusted as named.
    torch::Tensor tag;
    if (archive.try_read("stalepipe.step", tag)) {
      const int64_t step = tag.item<int64_t>();
      SP_CHECK(step == info.step, path, " is for step ", info.step, " but its shard ", shard,
               " holds partition ", k + 1, " after step ", step,
               ": the shards disagree; this checkpoint cannot be resumed");
      SP_CHECK(archive.try_read("stalepipe.partition", tag) && tag.item<int64_t>() == k &&
                   archive.try_read("stalepipe.partitions", tag) &&
                   tag.item<int64_t>() == partitions,
               path, ": shard ", shard, " is not partition ", k + 1, " of ", partitions,
               ": the shards disagree; this checkpoint cannot be resumed");
    }
    stage.module()->load(archive);
    stage.optimizer().load(archive);
  } catch (const c10::Error& e) {
    throw RuntimeError(shard + ": cannot load partition " + std::to_string(k + 1) + ": " +
                       e.what_without_backtrace());
  }
  return info;
}

CheckpointInfo load_checkpoint(const std::string& run_dir,
                               const std::vector<Stage*>& stages) {
  const int K = static_cast<int>(stages.size());
  CheckpointInfo info;
  for (int k = 0; k < K; ++k) info = load_checkpoint_shard(run_dir, *stages[k], k, K);
  return info;
}

}  // namespace stalepipe::exec
