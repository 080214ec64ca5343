// The option tree <-> JSON (a run directory's config.json, the runs of an experiment file) and
// the hash that identifies a run's results.
//
// config.json is one flat object keyed by field name; a few keys keep the names run
// directories had before the option tree existed ("data" for DataOptions::dataset, "pipeline"
// for PipelineOptions::ppv as "7,13" or "none"), and enums, devices and the hybrid switch are
// written as the CLI spells them ("1f1b-stash", "cpu,cpu", "3" epochs or "250s" steps).
// Functions (lr_at, loss) and where a process sits (group) are not stored.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "stalepipe/api/options.h"

namespace stalepipe {

nlohmann::json to_json(const Options& options);
// A field missing from `json` keeps its default. Throws RuntimeError naming `source` for a
// value of the wrong type, UsageError for an unknown enum name.
Options options_from_json(const nlohmann::json& json, const std::string& source);

// The hash of the settings that determine the trained weights (every field but out,
// progress, trace, executor, threads, devices, stop_at_step and fields still at a default
// added after version 0.1): FNV-1a 64 over the canonical JSON text (keys sorted, no spaces),
// as 16 hex digits. The same on every host and build; stored in checkpoints and compared
// between the ranks of a process group.
std::string config_hash(const Options& options);
// The hash versions before 0.3 wrote (std::hash, implementation-defined): accepted on resume
// on the host that wrote it, so that runs checkpointed before do not lose their work.
std::string legacy_config_hash(const Options& options);

// "3" -> 3 epochs, "250s" -> 250 steps, "" -> not set; UsageError naming `field` otherwise.
TrainingPoint training_point_from_text(const std::string& text, const std::string& field);
std::string to_text(const TrainingPoint& point);
// "cpu,cuda:0" -> devices; UsageError naming `field` for a name LibTorch does not know.
std::vector<torch::Device> devices_from_text(const std::string& text, const std::string& field);
std::string to_text(const std::vector<torch::Device>& devices);

}  // namespace stalepipe
