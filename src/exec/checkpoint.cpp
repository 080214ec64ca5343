#include "stalepipe/exec/checkpoint.h"

#include <filesystem>
#include <sstream>

#include <torch/serialize.h>

#include "checkpoint_paths_impl.h"
#include "stalepipe/common/error.h"
#include "stalepipe/common/files.h"

namespace stalepipe::exec {
namespace fs = std::filesystem;
namespace {

// The shard's bytes, checked against the manifest before anything parses them.
std::string read_verified_shard(const CheckpointManifest& m, const std::string& shard, int k) {
  SP_CHECK(fs::exists(shard), shard, ": missing (partition ", k + 1, " of the checkpoint ", m.path, ")");
  SP_CHECK(fs::is_regular_file(shard), shard, ": not a file (partition ", k + 1, " of the checkpoint ", m.path, ")");
  std::string bytes = read_file(shard);
  if (m.digests.empty()) return bytes;  // format 1: no checksums to check
  const ShardDigest& expected = m.digests[k];
  SP_CHECK(static_cast<int64_t>(bytes.size()) == expected.bytes, shard, ": truncated or grown: ",
           bytes.size(), " bytes, the manifest ", m.path, " records ", expected.bytes);
  const uint32_t crc = crc32_of(bytes);
  SP_CHECK(crc == expected.crc32, shard, ": damaged: CRC-32 ", crc, ", the manifest ", m.path,
           " records ", expected.crc32);
  return bytes;
}

// Shards written before the tags existed carry none; they are trusted as named.
void check_tags(torch::serialize::InputArchive& archive, const CheckpointManifest& m,
                const std::string& shard, int k, int partitions) {
  torch::Tensor tag;
  if (!archive.try_read("stalepipe.step", tag)) return;
  const int64_t step = tag.item<int64_t>();
  SP_CHECK(step == m.info.step, m.path, " is for step ", m.info.step, " but its shard ", shard,
           " holds partition ", k + 1, " after step ", step,
           ": the shards disagree; this checkpoint cannot be resumed");
  SP_CHECK(archive.try_read("stalepipe.partition", tag) && tag.item<int64_t>() == k &&
               archive.try_read("stalepipe.partitions", tag) && tag.item<int64_t>() == partitions,
           m.path, ": shard ", shard, " is not partition ", k + 1, " of ", partitions,
           ": the shards disagree; this checkpoint cannot be resumed");
}

}  // namespace

namespace {

torch::serialize::OutputArchive stage_archive(Stage& stage) {
  torch::serialize::OutputArchive archive;
  stage.module()->save(archive);
  stage.optimizer().save(archive);
  return archive;
}

void load_stage(torch::serialize::InputArchive& archive, Stage& stage) {
  // Work still queued on the partition's stream (a run that failed) may write the memory that
  // the load frees or overwrites.
  stage.stream().synchronize();
  stage.drop_graphs();  // the load may put weights and momentum buffers elsewhere
  stage.module()->load(archive);
  stage.optimizer().load(archive);
}

}  // namespace

ShardDigest save_checkpoint_shard(const std::string& run_dir, Stage& stage, int partition,
                                  int partitions, const CheckpointInfo& info) {
  SP_CHECK(stage.in_flight() == 0, "checkpoint at step ", info.step, ": partition ",
           partition + 1, " still has mini-batches in flight");
  const fs::path path = fs::path(checkpoint_dir(run_dir)) / shard_name(info.step, partition);
  fs::create_directories(path.parent_path());
  torch::serialize::OutputArchive archive = stage_archive(stage);
  archive.write("stalepipe.step", torch::tensor(info.step, torch::kLong));
  archive.write("stalepipe.partition", torch::tensor(int64_t{partition}, torch::kLong));
  archive.write("stalepipe.partitions", torch::tensor(int64_t{partitions}, torch::kLong));
  std::ostringstream out;
  archive.save_to(out);
  const std::string bytes = out.str();
  write_file_atomic(path.string(), bytes);
  return {static_cast<int64_t>(bytes.size()), crc32_of(bytes)};
}

void save_checkpoint(const std::string& run_dir, const std::vector<Stage*>& stages,
                     const CheckpointInfo& info) {
  const int K = static_cast<int>(stages.size());
  std::vector<ShardDigest> digests;
  for (int k = 0; k < K; ++k) digests.push_back(save_checkpoint_shard(run_dir, *stages[k], k, K, info));
  write_checkpoint_manifest(run_dir, info, digests);
}

std::string stage_state(Stage& stage) {
  torch::serialize::OutputArchive archive = stage_archive(stage);
  std::ostringstream out;
  archive.save_to(out);
  return out.str();
}

void load_stage_state(Stage& stage, const std::string& bytes) {
  std::istringstream in(bytes);
  try {
    torch::serialize::InputArchive archive;
    archive.load_from(in, stage.device());
    load_stage(archive, stage);
  } catch (const c10::Error& e) {
    throw RuntimeError(c10::str("partition ", stage.index() + 1, ": cannot take another replica's state: ",
                                e.what_without_backtrace()));
  }
}

CheckpointInfo load_checkpoint_shard(const CheckpointManifest& m, Stage& stage, int k,
                                     int partitions) {
  SP_CHECK(static_cast<int>(m.shards.size()) == partitions, m.path, ": checkpoint has ",
           m.shards.size(), " partitions, this run has ", partitions);
  const std::string shard =
      (fs::path(m.path).parent_path() / m.shards[k]).string();
  std::istringstream bytes(read_verified_shard(m, shard, k));
  try {
    torch::serialize::InputArchive archive;
    archive.load_from(bytes, stage.device());
    check_tags(archive, m, shard, k, partitions);
    load_stage(archive, stage);
  } catch (const c10::Error& e) {
    throw RuntimeError(shard + ": cannot load partition " + std::to_string(k + 1) + ": " +
                       e.what_without_backtrace());
  }
  return m.info;
}

CheckpointInfo load_checkpoint(const std::string& run_dir,
                               const std::vector<Stage*>& stages) {
  const std::string path = manifest_path(run_dir);
  SP_CHECK(fs::exists(path), path, ": no checkpoint manifest (is ", run_dir, " the directory of a run that checkpointed?)");
  const CheckpointManifest m = read_checkpoint_manifest(path);
  const int K = static_cast<int>(stages.size());
  for (int k = 0; k < K; ++k) load_checkpoint_shard(m, *stages[k], k, K);
  return m.info;
}

}  // namespace stalepipe::exec
