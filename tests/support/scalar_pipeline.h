// Three scalar partitions small enough to follow by hand (tests of the schedule's weight rule):
// their initial weights, the learning rate, and each step's input and target.
#pragma once

#include <cstdint>
#include <vector>

#include <torch/types.h>

#include "stalepipe/exec/executor.h"

namespace stalepipe::test::scalar {

constexpr double kLr = 0.1;
constexpr double kInitial[3] = {0.9, -1.1, 0.7};

inline double input_of(int64_t t) { return 1.0 + 0.25 * static_cast<double>(t % 3); }
inline double target_of(int64_t t) { return 0.5 - 0.3 * static_cast<double>(t % 2); }

// A segment over those inputs and targets (double [1, 1] each) at learning rate kLr.
inline exec::SegmentContext context() {
  exec::SegmentContext c;
  c.input = [](int64_t t) {
    return exec::Input{torch::full({1, 1}, input_of(t), torch::kDouble), torch::full({1, 1}, target_of(t), torch::kDouble)};
  };
  c.lr = [](int64_t) { return kLr; };
  return c;
}

// Each partition's single weight after a run.
inline std::vector<double> scalar_weights(const std::vector<exec::Stage*>& stages) {
  std::vector<double> w;
  for (auto* stage : stages) w.push_back(stage->module()->parameters()[0].item<double>());
  return w;
}

}  // namespace stalepipe::test::scalar
