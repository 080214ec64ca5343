#include "stalepipe/train/time_to_target.h"

namespace stalepipe::train {

std::vector<TargetTime> time_to_targets(const std::vector<EvalPoint>& evaluations,
                                        const std::vector<double>& targets) {
  std::vector<TargetTime> times;
  for (double target : targets) {
    TargetTime t{target, std::nullopt};
    for (const EvalPoint& p : evaluations) {
      if (p.result.accuracy && 100 * *p.result.accuracy >= target) {
        t.reached = p;
        break;
      }
    }
    times.push_back(t);
  }
  return times;
}

}  // namespace stalepipe::train
