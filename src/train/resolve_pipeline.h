// --partitions K --balance time|params|flops: the PPV a run uses, chosen before the model that
// is trained is built. Private to src/train; the trainer's build() calls it once.
#pragma once

#include <string>

#include "stalepipe/models/model.h"
#include "stalepipe/train/options.h"

namespace stalepipe::train {

// Returns the PPV text to train with: options.pipeline() when options.partitions() == 0;
// otherwise the balanced PPV over K = options.partitions() partitions (partition/balance.h).
// "time" profiles a fresh copy of the model first (batch_size, 1 warm-up, 3 repeats, the
// per-worker thread count), so the model being trained and the global RNG stream after the
// caller's manual_seed are untouched. If options.pipeline() is already a PPV with K-1
// registers (a config.json written by a balanced run, read back by --resume) it is used as is,
// so a resumed run keeps the partitions it was trained with; any other PPV alongside
// --partitions is a UsageError.
std::string resolve_pipeline(const TrainOptions& options, const models::InputShape& input);

}  // namespace stalepipe::train
