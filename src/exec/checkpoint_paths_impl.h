// Where a run directory's checkpoint files lie (exec/checkpoint.h describes the layout).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

namespace stalepipe::exec {

inline std::string checkpoint_dir(const std::string& run_dir) {
  return (std::filesystem::path(run_dir) / "checkpoint").string();
}
inline std::string manifest_path(const std::string& run_dir) {
  return (std::filesystem::path(checkpoint_dir(run_dir)) / "manifest.json").string();
}
inline std::string previous_path(const std::string& run_dir) {
  return (std::filesystem::path(checkpoint_dir(run_dir)) / "previous.json").string();
}
// Relative to checkpoint_dir; partition is 0-based, the file name 1-based.
inline std::string shard_name(int64_t step, int partition) {
  return "step-" + std::to_string(step) + "/part-" + std::to_string(partition + 1) + ".pt";
}

}  // namespace stalepipe::exec
