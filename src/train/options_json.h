// TrainOptions <-> JSON (config.json) and the hash that identifies a run's results.
#pragma once

#include <nlohmann/json.hpp>

#include "stalepipe/train/options.h"

namespace stalepipe::train {

nlohmann::json to_json(const TrainOptions& options);
// Throws RuntimeError naming `source` if a field is missing or has the wrong type.
TrainOptions options_from_json(const nlohmann::json& json, const std::string& source);
// Hash of the settings that determine the trained weights (not out, progress, executor).
std::string config_hash(const TrainOptions& options);

}  // namespace stalepipe::train
