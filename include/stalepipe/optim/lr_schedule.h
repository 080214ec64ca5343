// Learning rate as a pure function of the global step, so that every worker (and a resumed
// run) computes the same value for the same mini-batch.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace stalepipe::optim {

enum class LrScheduleKind { kConstant, kStep, kCosine };
// "constant" | "step" | "cosine"; UsageError naming `field` otherwise.
LrScheduleKind lr_schedule_from_name(const std::string& name,
                                     const std::string& field = "lr schedule");
std::string to_string(LrScheduleKind kind);

struct LrScheduleOptions {
  LrScheduleKind kind = LrScheduleKind::kCosine;
  double base_lr = 0.05;
  double warmup_epochs = 0;         // linear ramp from base_lr/warmup_steps to base_lr
  std::vector<int> milestones;      // step: epochs at which lr is multiplied by gamma
  double gamma = 0.1;
  int64_t steps_per_epoch = 1;
  int64_t total_steps = 1;          // cosine decays to 0 at total_steps
};

class LrSchedule {
 public:
  // Throws UsageError for a non-positive lr or bad milestones.
  explicit LrSchedule(LrScheduleOptions options);
  double at(int64_t step) const;
  const LrScheduleOptions& options() const { return options_; }

 private:
  LrScheduleOptions options_;
  int64_t warmup_steps_;
};

}  // namespace stalepipe::optim
