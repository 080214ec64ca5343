// Skip tensors: values that go from one unit to a later one other than the next.
//
// A unit stashes a named tensor (returns it besides its output) and a later unit pops it
// (takes it besides its input); unit.h's Skips says which names a unit stashes and pops. Inside
// a partition a skip is a local value; when a register falls between its stash and its pop,
// the skip travels from the producing partition straight to the consuming one (not through the
// partitions between), and its gradient travels back the same way (docs/design.md, "Skip
// tensors").
//
//   // A residual block cut in two: the first half stashes the block's input.
//   struct FirstHalf : torch::nn::Module {
//     std::vector<torch::Tensor> forward(std::vector<torch::Tensor> in) {
//       return {relu(conv1(in[0])), in[0]};  // output, then the stash "shortcut"
//     }
//   };
//   struct SecondHalf : torch::nn::Module {
//     std::vector<torch::Tensor> forward(std::vector<torch::Tensor> in) {
//       return {relu(conv2(in[0]) + in[1])};  // in[1]: the popped "shortcut"
//     }
//   };
//   builder.add("block_a", first, UnitOptions().stashes({"shortcut"}))
//          .add("block_b", second, UnitOptions().pops({"shortcut"}));
#pragma once

#include <map>
#include <string>
#include <vector>

#include <torch/nn/modules/container/any.h>
#include <torch/types.h>

#include "stalepipe/models/unit.h"

namespace stalepipe::models {

// The skip tensors stashed and not yet popped, by name.
using SkipTable = std::map<std::string, torch::Tensor>;

// Names the engine's own messages use; a skip may not be called so.
bool is_reserved_skip_name(const std::string& name);

// Runs one unit on x: a unit without skips as forward(x); one with skips takes its pops out of
// `table` and puts its stashes in. Throws UsageError naming the unit when a popped name is not
// in the table or the unit returns the wrong number of tensors.
torch::Tensor forward_unit(torch::nn::AnyModule& module, const std::string& unit_name,
                           const Skips& skips, torch::Tensor x, SkipTable& table);

// Checks that the units' skips fit together: every name stashed by exactly one unit and popped
// by exactly one later unit, no name listed twice in one unit, no reserved or empty name.
// Throws UsageError naming the model, the unit and the skip, e.g.
//   "model unet: unit 7 (up2) pops 'enc3', which unit 9 (enc3) stashes after it; a skip
//    must go forward".
void check_skips(const std::string& model, const std::vector<Unit>& units);

// What a run of consecutive units (each one's Skips, in order) exchanges with the units outside
// it: the names it pops that none of its own units stashed before (in pop order), and those it
// stashes that none of its own later units pops (in stash order). For a partition, its skip
// inputs and outputs.
struct OpenSkips {
  std::vector<std::string> in, out;
};
OpenSkips open_skips(const std::vector<Skips>& units);

// Whether a skip tensor is stashed by unit u or before it and popped after it: a register
// after unit u would have it cross.
bool skip_live_after(const std::vector<Unit>& units, size_t u);

// Runs units [first, last) on x with `table`, as a partition does.
torch::Tensor forward_units(const std::vector<Unit>& units, size_t first, size_t last, torch::Tensor x,
                            SkipTable& table);

}  // namespace stalepipe::models
