#include "model_file.h"

#include <filesystem>
#include <vector>

#include "common/json_file_impl.h"
#include "stalepipe/common/crc32.h"
#include "stalepipe/common/error.h"
#include "stalepipe/common/files.h"

namespace stalepipe::train {
namespace fs = std::filesystem;
namespace {

const char kPathKey[] = "model_file_path";
const char kDigestKey[] = "model_file_digest";

uint32_t crc_of_digest(const std::string& digest) {
  return digest.empty() ? 0 : static_cast<uint32_t>(std::stoul(digest.substr(digest.find(':') + 1), nullptr, 16));
}

}  // namespace

ModelFile model_file_now(const std::string& path) {
  ModelFile file{fs::absolute(path).lexically_normal().string(), ""};
  // A file that cannot be read gets no digest: loading it reports why.
  if (fs::is_regular_file(file.path)) file.digest = "crc32:" + crc32_hex(crc32_of(read_file(file.path)));
  return file;
}

void add_model_file(nlohmann::json& config, const ModelFile& file) {
  config[kPathKey] = file.path;
  config[kDigestKey] = file.digest;
}

std::optional<std::pair<std::string, std::string>> recorded_pair(const std::string& run_dir, const char* path_key,
                                                                 const char* content_key) {
  const std::string config_path = (fs::path(run_dir) / "config.json").string();
  const nlohmann::json config = read_json_file(config_path);
  if (!config.contains(path_key)) return std::nullopt;
  SP_CHECK(config.at(path_key).is_string() && config.value(content_key, nlohmann::json()).is_string(), config_path,
           ": ", path_key, " and ", content_key, " must be strings");
  return std::make_pair(config.at(path_key).get<std::string>(), config.at(content_key).get<std::string>());
}

std::optional<ModelFile> recorded_model_file(const std::string& run_dir) {
  const auto recorded = recorded_pair(run_dir, kPathKey, kDigestKey);
  if (!recorded) return std::nullopt;
  return ModelFile{recorded->first, recorded->second};
}

void check_unchanged(const ModelFile& recorded) {
  const ModelFile now = model_file_now(recorded.path);
  if (now.digest.empty()) return;  // missing: loading it says so
  SP_CHECK_ARG(now.digest == recorded.digest, "model file ", recorded.path, " has changed since the run started: ",
               "its content digest is ", now.digest, ", config.json records ", recorded.digest,
               "; put the original file back or start a new run");
}

void check_same_on_every_rank(exec::Group& group, const ModelFile& file) {
  const std::vector<int64_t> crcs = group.gather_processes(crc_of_digest(file.digest));
  for (size_t r = 1; r < crcs.size(); ++r) {
    auto digest = [&](size_t i) { return "crc32:" + crc32_hex(static_cast<uint32_t>(crcs[i])); };
    SP_CHECK_ARG(crcs[r] == crcs[0], "model file ", file.path, ": rank ", r, " loaded content with digest ",
                 digest(r), ", rank 0 ", digest(0), "; give every rank the same file");
  }
}

}  // namespace stalepipe::train
