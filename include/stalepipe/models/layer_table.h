// A per-unit description of a model: what `stalepipe layers` prints and what the partitioner
// and the cost profile start from.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "stalepipe/models/model.h"

namespace stalepipe::models {

struct UnitInfo {
  int index = 0;                     // position in model.units (0-based)
  std::string name;                  // unit name
  std::vector<int> weight_layers;    // as in the Unit
  std::vector<int64_t> output_shape; // per sample, without the batch dim, e.g. {6, 14, 14}
  int64_t parameters = 0;            // trainable parameter elements in the unit
  // Forward MFLOPs per sample: 1e-6 * FLOPs, one multiply-add = 2 FLOPs, conv and linear layers
  // only (bias adds, batch norm, ReLU, pooling and residual adds are not counted).
  double forward_mflops = 0.0;
  bool cut_after = true;
  Skips skips;                       // as in the Unit
  std::string joined;                // as in the Unit
};

// One row per unit. Runs one batch-1 forward of zeros (on the device and dtype of the model's
// first parameter, CPU float if it has none) under NoGradGuard with every unit in eval mode, so
// BN running statistics are untouched, then puts each unit back in its former train/eval mode.
// FLOPs come from the blocks' own counters (blocks.h: FlopCounted), from Conv2d/Linear shapes,
// or by walking a Sequential's children; nothing is added to the training path.
// Throws UsageError if the input shape does not fit the model or a unit holds a module with
// parameters whose FLOPs it cannot count.
std::vector<UnitInfo> describe_units(Model& model);

// Aligned text table, one line per unit, a header and a total line:
//   unit  name  layers  output  params  MFLOPs  register after
// The "register after" column shows the weight-layer index (the PPV entry) after which a
// register may follow this unit, blank where none may. Ends with a newline.
std::string format_layer_table(const Model& model, const std::vector<UnitInfo>& rows);

}  // namespace stalepipe::models
