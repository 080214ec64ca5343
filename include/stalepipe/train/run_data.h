// A run's data: the data set DataOptions names, as sources and loaders, and for an image
// folder the folder config.json records (absolute path and fingerprint), so that a resumed
// run reads the same tree from any directory and refuses one that changed.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "stalepipe/api/options.h"
#include "stalepipe/data/loader.h"
#include "stalepipe/data/registry.h"

namespace stalepipe::train {

struct DataFolder {
  std::string path;         // absolute
  std::string fingerprint;  // data::Folder::fingerprint
};

struct RunData {
  data::SourceSplit sources;  // after the subsets
  std::optional<DataFolder> folder;
  std::unique_ptr<data::Loader> train_loader, test_loader;
};

// Loads the data set and builds the loaders. For folder:DIR, `recorded` (a resumed run's)
// gives the folder to scan, whose fingerprint must still be the recorded one (UsageError
// otherwise); `loss` must fit the targets; DataOptions::norm_mean and norm_std are set to the values measured where they
// were not given, so config.json keeps them. `pin_memory`: batches for a CUDA partition.
RunData load_run_data(DataOptions& d, const exec::Loss& loss, uint64_t seed, int data_threads, bool pin_memory,
                      const std::optional<DataFolder>& recorded);

// The sources alone (load_run_data's first step): for folder:DIR the recorded folder where
// given, checked against its fingerprint.
data::SourceSplit load_run_sources(const DataOptions& d, uint64_t seed, int data_threads,
                                   const std::optional<DataFolder>& recorded);
// The training loader's options as DataOptions give them, without the normalisation.
data::LoaderOptions train_loader_options(const DataOptions& d, uint64_t seed, int data_threads, bool pin_memory);

// DataOptions::data_threads, 0 resolved: the cores the training threads leave, at least 1.
int resolved_data_threads(const Options& options);

// config.json's keys "data_folder_path" and "data_fingerprint", and back (nullopt where
// config.json has none: not a folder, or written before they existed).
void add_data_folder(nlohmann::json& config, const DataFolder& folder);
std::optional<DataFolder> recorded_data_folder(const std::string& run_dir);

// skipped-images.txt in `run_dir`: one "path: fault" line per file the scan left out.
void write_skipped_images(const std::string& run_dir, const RunData& data);

}  // namespace stalepipe::train
