// Small training runs through train::train() for tests: options, silent hooks, the run
// directory's metrics.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "stalepipe/api/options.h"
#include "stalepipe/train/trainer.h"

namespace stalepipe::test {

// LeNet-5 on 200 synthetic samples, 2 epochs of 7 steps (the last partial), lr 0.05, 2 threads,
// registers after `pipeline`; `changes` as config.json spells them (api/options_json.h).
Options small_run(const std::string& pipeline = "2", const nlohmann::json& changes = nlohmann::json::object());

// Hooks that log nothing.
train::TrainHooks quiet_hooks();

// DIR/metrics.jsonl, line by line, without its timings (they differ between runs).
std::vector<nlohmann::json> metrics_lines(const std::string& dir);

}  // namespace stalepipe::test
