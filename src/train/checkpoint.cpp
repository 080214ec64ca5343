#include "stalepipe/train/checkpoint.h"

#include <filesystem>
#include <sstream>

#include <nlohmann/json.hpp>
#include <torch/serialize.h>

#include "stalepipe/common/error.h"
#include "stalepipe/common/files.h"

namespace stalepipe::train {
namespace fs = std::filesystem;
namespace {

std::string checkpoint_dir(const std::string& run_dir) { return (fs::path(run_dir) / "checkpoint").string(); }
std::string manifest_path(const std::string& run_dir) {
  return (fs::path(checkpoint_dir(run_dir)) / "manifest.json").string();
}

}  // namespace

void save_checkpoint(const std::string& run_dir, const std::vector<exec::Stage*>& stages,
                     const CheckpointInfo& info) {
  const std::string folder = "step-" + std::to_string(info.step);
  const fs::path dir = fs::path(checkpoint_dir(run_dir)) / folder;
  fs::create_directories(dir);
  nlohmann::json shards = nlohmann::json::array();
  for (size_t k = 0; k < stages.size(); ++k) {
    SP_CHECK(stages[k]->in_flight() == 0, "checkpoint at step ", info.step, ": partition ", k + 1,
             " still has mini-batches in flight");
    torch::serialize::OutputArchive archive;
    stages[k]->module()->save(archive);
    stages[k]->optimizer().save(archive);
    std::ostringstream bytes;
    archive.save_to(bytes);
    const std::string name = "part-" + std::to_string(k + 1) + ".pt";
    write_file_atomic((dir / name).string(), bytes.str());
    shards.push_back(folder + "/" + name);
  }
  nlohmann::json manifest = {{"format", 1},
                             {"step", info.step},
                             {"epochs_done", info.epochs_done},
                             {"partitions", stages.size()},
                             {"ppv", info.ppv},
                             {"config_hash", info.config_hash},
                             {"wall_seconds", info.wall_seconds},
                             {"epoch_loss_sum", info.epoch_loss_sum},
                             {"epoch_correct", info.epoch_correct},
                             {"epoch_samples", info.epoch_samples},
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

bool has_checkpoint(const std::string& run_dir) { return fs::exists(manifest_path(run_dir)); }

CheckpointInfo read_checkpoint_info(const std::string& run_dir) {
  const std::string path = manifest_path(run_dir);
  SP_CHECK(fs::exists(path), path, ": no checkpoint manifest (was the run started with --out ",
           run_dir, "?)");
  nlohmann::json manifest;
  try {
    manifest = nlohmann::json::parse(read_file(path));
    CheckpointInfo info;
    info.step = manifest.at("step").get<int64_t>();
    info.epochs_done = manifest.at("epochs_done").get<int64_t>();
    info.ppv = manifest.at("ppv").get<std::string>();
    info.config_hash = manifest.at("config_hash").get<std::string>();
    info.wall_seconds = manifest.at("wall_seconds").get<double>();
    info.epoch_loss_sum = manifest.at("epoch_loss_sum").get<double>();
    info.epoch_correct = manifest.at("epoch_correct").get<int64_t>();
    info.epoch_samples = manifest.at("epoch_samples").get<int64_t>();
    info.epoch_seconds = manifest.at("epoch_seconds").get<double>();
    return info;
  } catch (const nlohmann::json::exception& e) {
    throw RuntimeError(path + ": corrupt checkpoint manifest: " + e.what());
  }
}

CheckpointInfo load_checkpoint(const std::string& run_dir,
                               const std::vector<exec::Stage*>& stages) {
  const CheckpointInfo info = read_checkpoint_info(run_dir);
  const std::string path = manifest_path(run_dir);
  const auto manifest = nlohmann::json::parse(read_file(path));
  const auto& shards = manifest.at("shards");
  SP_CHECK(shards.size() == stages.size(), path, ": checkpoint has ", shards.size(),
           " partitions, this run has ", stages.size());
  for (size_t k = 0; k < stages.size(); ++k) {
    const std::string shard =
        (fs::path(checkpoint_dir(run_dir)) / shards[k].get<std::string>()).string();
    SP_CHECK(fs::exists(shard), path, ": shard ", shard, " is missing");
    try {
      torch::serialize::InputArchive archive;
      archive.load_from(shard, stages[k]->device());
      stages[k]->module()->load(archive);
      stages[k]->optimizer().load(archive);
    } catch (const c10::Error& e) {
      throw RuntimeError(shard + ": cannot load partition " + std::to_string(k + 1) + ": " +
                         e.what_without_backtrace());
    }
  }
  return info;
}

}  // namespace stalepipe::train
