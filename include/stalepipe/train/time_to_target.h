// Time to accuracy: the first evaluation at which a run's test accuracy reached each target.
// The paper's claim is a trade of training time for accuracy (its Table 5), so summary.json
// and the sweeps report this besides the final accuracy.
#pragma once

#include <optional>
#include <vector>

#include "stalepipe/api/pipeline_trainer.h"

namespace stalepipe::train {

struct TargetTime {
  double target = 0;                 // test accuracy, %
  std::optional<EvalPoint> reached;  // the first evaluation at or above it; none if never
};

// One entry per target, in the order given; `evaluations` in step order.
std::vector<TargetTime> time_to_targets(const std::vector<EvalPoint>& evaluations,
                                        const std::vector<double>& targets);

}  // namespace stalepipe::train
