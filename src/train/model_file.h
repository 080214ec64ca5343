// The TorchScript file a run trains (RunOptions::model_file) as config.json records it beside
// the path given: absolute, so that a run resumes from any directory, and with a digest of
// its content, so that a file replaced under the same path is noticed, as is a rank of a
// processes run that loaded another file than rank 0.
#pragma once

#include <optional>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "stalepipe/exec/group.h"

namespace stalepipe::train {

struct ModelFile {
  std::string path;    // absolute
  std::string digest;  // of the content: "crc32:1a2b3c4d"; empty where the file cannot be read
};

// The file at `path` (relative to the working directory) as it is now.
ModelFile model_file_now(const std::string& path);
// config.json's keys "model_file_path" and "model_file_digest".
void add_model_file(nlohmann::json& config, const ModelFile& file);
// The values of two string keys that config.json in `run_dir` records together (a file's
// path and what identifies its content); nullopt where it has no `path_key`. Throws
// RuntimeError naming config.json where either is not a string.
std::optional<std::pair<std::string, std::string>> recorded_pair(const std::string& run_dir, const char* path_key,
                                                                 const char* content_key);

// The model file config.json in `run_dir` records; nullopt for a zoo model or a run written
// before these keys existed.
std::optional<ModelFile> recorded_model_file(const std::string& run_dir);
// Throws UsageError naming the file and both digests if its content is not the recorded one.
void check_unchanged(const ModelFile& recorded);
// A collective call of every process of `group`: throws UsageError on each, naming the file
// and both digests, if a process loaded a file with another content than the first one's.
void check_same_on_every_rank(exec::Group& group, const ModelFile& file);

}  // namespace stalepipe::train
