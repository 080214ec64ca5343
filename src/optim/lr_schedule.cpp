#include "stalepipe/optim/lr_schedule.h"

#include <cmath>

#include "stalepipe/common/error.h"
#include "stalepipe/common/names.h"

namespace stalepipe::optim {
namespace {
const std::pair<LrScheduleKind, const char*> kLrScheduleNames[] = {
    {LrScheduleKind::kConstant, "constant"}, {LrScheduleKind::kStep, "step"}, {LrScheduleKind::kCosine, "cosine"}};
}  // namespace

LrScheduleKind lr_schedule_from_name(const std::string& name, const std::string& field) {
  return value_of(kLrScheduleNames, name, field);
}

std::string to_string(LrScheduleKind kind) { return name_of(kLrScheduleNames, kind); }

LrSchedule::LrSchedule(LrScheduleOptions options) : options_(std::move(options)) {
  SP_CHECK_ARG(options_.base_lr > 0 && std::isfinite(options_.base_lr),
               "lr schedule: base_lr must be a positive number, got ", options_.base_lr);
  SP_CHECK_ARG(options_.warmup_epochs >= 0, "lr schedule: warmup_epochs must be >= 0, got ",
               options_.warmup_epochs);
  SP_CHECK_ARG(options_.gamma > 0, "lr schedule: gamma must be > 0, got ", options_.gamma);
  for (size_t i = 0; i < options_.milestones.size(); ++i) {
    SP_CHECK_ARG(options_.milestones[i] > 0 && (i == 0 || options_.milestones[i] > options_.milestones[i - 1]),
                 "lr schedule: milestones must be increasing positive epochs");
  }
  warmup_steps_ = static_cast<int64_t>(std::llround(options_.warmup_epochs *
                                                    static_cast<double>(options_.steps_per_epoch)));
}

double LrSchedule::at(int64_t step) const {
  const double base = options_.base_lr;
  if (step < warmup_steps_) {
    return base * static_cast<double>(step + 1) / static_cast<double>(warmup_steps_);
  }
  if (options_.kind == LrScheduleKind::kStep) {
    const int64_t epoch = step / std::max<int64_t>(1, options_.steps_per_epoch);
    double lr = base;
    for (int m : options_.milestones) {
      if (epoch >= m) lr *= options_.gamma;
    }
    return lr;
  }
  if (options_.kind == LrScheduleKind::kCosine) {
    const double span = static_cast<double>(std::max<int64_t>(1, options_.total_steps - warmup_steps_));
    const double progress = std::min(1.0, static_cast<double>(step - warmup_steps_) / span);
    return 0.5 * base * (1.0 + std::cos(M_PI * progress));
  }
  return base;
}

}  // namespace stalepipe::optim
