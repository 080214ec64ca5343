// The checkpoint manifests: their JSON and which two checkpoints are kept.
#include <algorithm>
#include <filesystem>
#include <set>

#include <nlohmann/json.hpp>

#include "checkpoint_paths_impl.h"
#include "common/json_number_impl.h"
#include "stalepipe/common/error.h"
#include "stalepipe/common/files.h"
#include "stalepipe/exec/checkpoint.h"

namespace stalepipe::exec {
namespace fs = std::filesystem;
namespace {

constexpr int kManifestFormat = 2;  // 2: shard sizes and CRC-32s; 1: shard names only

nlohmann::json manifest_json(const CheckpointInfo& info, const std::vector<ShardDigest>& digests) {
  nlohmann::json shards = nlohmann::json::array(), bytes = nlohmann::json::array(),
                 crcs = nlohmann::json::array();
  for (size_t k = 0; k < digests.size(); ++k) {
    shards.push_back(shard_name(info.step, static_cast<int>(k)));
    bytes.push_back(digests[k].bytes);
    crcs.push_back(digests[k].crc32);
  }
  return {{"format", kManifestFormat},
          {"step", info.step},
          {"epochs_done", info.epochs_done},
          {"partitions", digests.size()},
          {"ppv", info.ppv},
          {"config_hash", info.config_hash},
          {"wall_seconds", info.wall_seconds},
          {"epoch_loss_sum", info.epoch_loss_sum},
          {"epoch_correct", info.epoch_correct},
          {"epoch_samples", info.epoch_samples},
          {"epoch_scored", info.epoch_scored},
          {"epoch_seconds", info.epoch_seconds},
          {"shards", shards},
          {"shard_bytes", bytes},
          {"shard_crc32", crcs}};
}

// The step folder a manifest names ("step-S"), or "" when it cannot be read.
std::string folder_of(const std::string& manifest) {
  try {
    const auto m = read_checkpoint_manifest(manifest);
    return m.shards.empty() ? "" : fs::path(m.shards[0]).parent_path().string();
  } catch (const RuntimeError&) {
    return "";
  }
}

// Shards are named step-<S>/part-<k>.pt inside the checkpoint folder: a manifest must not
// send the loader elsewhere (an absolute path, "..", a device such as /dev/zero that never
// ends, or a file that is not a shard, such as the manifest itself).
void check_shard_name(const std::string& manifest, const std::string& shard) {
  auto digits = [&](size_t from, size_t to) {
    return to > from && to - from <= 18 &&
           std::all_of(shard.begin() + from, shard.begin() + to, [](char c) { return c >= '0' && c <= '9'; });
  };
  const size_t slash = shard.find('/');
  const bool named = shard.rfind("step-", 0) == 0 && slash != std::string::npos && digits(5, slash) &&
                     shard.compare(slash, 6, "/part-") == 0 && shard.size() > slash + 9 &&
                     shard.compare(shard.size() - 3, 3, ".pt") == 0 && digits(slash + 6, shard.size() - 3);
  SP_CHECK(named, manifest, ": corrupt checkpoint manifest: shard '", shard,
           "' is not named step-<S>/part-<k>.pt");
}

}  // namespace

void write_checkpoint_manifest(const std::string& run_dir, const CheckpointInfo& info,
                               const std::vector<ShardDigest>& digests) {
  const std::string newest = manifest_path(run_dir), previous = previous_path(run_dir);
  const std::string folder = "step-" + std::to_string(info.step);
  // The current newest becomes the previous one, unless it is this step again (a second
  // save at one drain point) or unreadable (then the old previous.json is the better one).
  const std::string current = fs::exists(newest) ? folder_of(newest) : "";
  if (!current.empty() && current != folder) write_file_atomic(previous, read_file(newest));
  write_file_atomic(newest, manifest_json(info, digests).dump(2) + "\n");
  // Only now, with the new manifest durable, are the other shard folders unreferenced.
  std::set<std::string> keep = {folder};
  if (fs::exists(previous)) keep.insert(folder_of(previous));
  for (const auto& entry : fs::directory_iterator(checkpoint_dir(run_dir))) {
    const std::string name = entry.path().filename().string();
    if (entry.is_directory() && name.rfind("step-", 0) == 0 && keep.count(name) == 0) {
      std::error_code ignored;
      fs::remove_all(entry.path(), ignored);
    }
  }
}

bool has_checkpoint(const std::string& run_dir) {
  return fs::exists(manifest_path(run_dir)) || fs::exists(previous_path(run_dir));
}

std::vector<std::string> checkpoint_manifests(const std::string& run_dir) {
  std::vector<std::string> found;
  for (const auto& path : {manifest_path(run_dir), previous_path(run_dir)}) {
    if (fs::exists(path)) found.push_back(path);
  }
  return found;
}

CheckpointManifest read_checkpoint_manifest(const std::string& path) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_file(path));
  } catch (const nlohmann::json::exception& e) {
    throw RuntimeError(path + ": corrupt checkpoint manifest: not valid JSON: " + e.what());
  }
  try {
    CheckpointManifest m;
    m.path = path;
    m.format = j.contains("format") ? json_get<int>(j.at("format")) : 1;
    CheckpointInfo& info = m.info;
    info.step = json_get<int64_t>(j.at("step"));
    info.epochs_done = json_get<int64_t>(j.at("epochs_done"));
    info.ppv = j.at("ppv").get<std::string>();
    info.config_hash = j.at("config_hash").get<std::string>();
    info.wall_seconds = j.at("wall_seconds").get<double>();
    info.epoch_loss_sum = j.at("epoch_loss_sum").get<double>();
    info.epoch_correct = json_get<int64_t>(j.at("epoch_correct"));
    info.epoch_samples = json_get<int64_t>(j.at("epoch_samples"));
    info.epoch_scored = j.contains("epoch_scored") ? json_get<int64_t>(j.at("epoch_scored")) : info.epoch_samples;
    info.epoch_seconds = j.at("epoch_seconds").get<double>();
    m.shards = j.at("shards").get<std::vector<std::string>>();
    for (const auto& shard : m.shards) check_shard_name(path, shard);
    if (m.format >= 2) {
      const auto bytes = json_get<std::vector<int64_t>>(j.at("shard_bytes"));
      const auto crcs = json_get<std::vector<uint32_t>>(j.at("shard_crc32"));
      SP_CHECK(bytes.size() == m.shards.size() && crcs.size() == m.shards.size(), path,
               ": corrupt checkpoint manifest: ", m.shards.size(), " shards but ", bytes.size(),
               " sizes and ", crcs.size(), " checksums");
      for (size_t k = 0; k < bytes.size(); ++k) m.digests.push_back({bytes[k], crcs[k]});
    }
    return m;
  } catch (const nlohmann::json::exception& e) {
    throw RuntimeError(path + ": corrupt checkpoint manifest: " + e.what());
  }
}

CheckpointInfo read_checkpoint_info(const std::string& run_dir) {
  const auto manifests = checkpoint_manifests(run_dir);
  SP_CHECK(!manifests.empty(), manifest_path(run_dir),
           ": no checkpoint manifest (is ", run_dir, " the directory of a run that checkpointed?)");
  std::string faults;
  for (const auto& path : manifests) {
    try {
      return read_checkpoint_manifest(path).info;
    } catch (const RuntimeError& e) {
      faults += (faults.empty() ? "" : "; ") + std::string(e.what());
    }
  }
  throw RuntimeError(run_dir + ": no readable checkpoint manifest: " + faults);
}

}  // namespace stalepipe::exec
