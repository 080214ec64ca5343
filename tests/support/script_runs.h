// Training a scripted network of support/script_modules.h's shape (1x8x8 inputs, 3 classes)
// through the pipeline from its file, for the cutter's tests.
#pragma once

#include <string>
#include <vector>

#include <torch/types.h>

#include "stalepipe/api/options.h"
#include "stalepipe/models/model.h"

namespace stalepipe::test {

inline const models::InputShape kScriptInput{1, 8, 8, 3};

// A constant lr of 0.05, 2 threads, the given cut, schedule and executor.
Options script_options(std::vector<int> ppv, schedule::ScheduleKind schedule, const std::string& executor);

// Loads `file` with kScriptInput, trains `steps` seeded mini-batches of 4 random samples under
// `options` and returns the parameters.
std::vector<torch::Tensor> train_script(const std::string& file, int steps, const Options& options);

}  // namespace stalepipe::test
