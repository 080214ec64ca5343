// From a PPV (pipeline placement vector) to partitions.
//
// A PPV is an increasing list of weight-layer indices (1-based, docs/design.md "Layer index /
// PPV"); a pipeline register goes right after each. K-1 registers give K partitions, each a
// contiguous range of the model's units, numbered 1..K from the input (0..K-1 in code).
// A register may only follow a unit whose last weight layer it names and that allows a cut
// (in a ResNet: between residual blocks or inside one, after its first convolution). Skip
// tensors (models/skips.h) that a register falls between go straight from the partition that
// stashes them to the one that pops them (Plan::skips).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace stalepipe::models {
class Model;
}

namespace stalepipe::partition {

// A skip tensor (models/skips.h) that crosses a register: it goes from partition `from` (which
// stashes it) straight to partition `to` (which pops it), and its gradient back (0-based).
struct SkipRoute {
  std::string name;
  int from = 0;
  int to = 0;
};

struct Plan {
  std::vector<int> ppv;                                // register after these weight layers
  std::vector<std::pair<size_t, size_t>> unit_ranges;  // per partition: units [first, second)
  std::vector<int64_t> parameters;                     // trainable parameters per partition
  std::vector<SkipRoute> skips;                        // in the order their producers stash them
  // The model's first units whose activations backward recomputes (exec/stage.h); 0: none.
  size_t recompute_units = 0;
  int num_partitions() const { return static_cast<int>(unit_ranges.size()); }
  // How many of partition k's units are among them: the partition's first ones.
  size_t recomputed_units(int k) const;
};

// Parses "7", "7,13" or "none"/"" (no register). Throws UsageError naming `what` (the input
// the text came from) on anything else.
std::vector<int> parse_ppv(const std::string& text, const std::string& what = "ppv");
std::string format_ppv(const std::vector<int>& ppv);  // "7,13" or "none"

// Validates the PPV against the model and cuts it. Throws UsageError naming the input (`ppv_name`),
// the model, the bad entry and the valid register positions, e.g.
//   "ppv 9: model lenet5 has 5 weight layers; a register may follow layer 1, 2, 3, 4".
// recompute_layer: the weight layer through which backward recomputes activations (0: none),
// checked as units_through_layer does (naming `recompute_name`).
Plan make_plan(const models::Model& model, const std::vector<int>& ppv, int recompute_layer = 0,
               const std::string& ppv_name = "ppv", const std::string& recompute_name = "recompute");

// The number of the model's first units whose weight layers are 1..layer (0 for layer 0). A
// recomputed range ends where a register could go; throws UsageError naming `what` and the
// positions allowed otherwise.
size_t units_through_layer(const models::Model& model, int layer, const std::string& what = "recompute");

// The share (0..100) of trainable parameters in partitions whose forward uses stale weights,
// given each partition's staleness d_k (docs/design.md: "Percentage of stale weights").
double stale_weight_percent(const Plan& plan, const std::vector<int>& staleness);

// "block1_1: partition 1 -> 3, ..." - the plan's skip routes, 1-based; "none" without any.
std::string format_skip_routes(const Plan& plan);

// "1, 3, 5, 7" - the weight layers a register may follow.
std::string format_cut_layers(const models::Model& model);

}  // namespace stalepipe::partition
