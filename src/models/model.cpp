#include "stalepipe/models/model.h"

#include <algorithm>

#include "stalepipe/models/skips.h"

namespace stalepipe::models {

int Model::num_weight_layers() const {
  int last = 0;
  for (const Unit& unit : units) {
    for (int layer : unit.weight_layers) {
      last = std::max(last, layer);
    }
  }
  return last;
}

std::vector<int> Model::cut_layers() const {
  const int total = num_weight_layers();
  std::vector<int> cuts;
  for (const Unit& unit : units) {
    if (unit.cut_after && !unit.weight_layers.empty() && unit.weight_layers.back() < total) {
      cuts.push_back(unit.weight_layers.back());
    }
  }
  return cuts;
}

int Model::unit_ending_at_layer(int layer) const {
  for (size_t i = 0; i < units.size(); ++i) {
    const Unit& unit = units[i];
    // Weight-layer indices increase along the units, so the first match is the only one.
    if (!unit.weight_layers.empty() && unit.weight_layers.back() == layer) {
      return unit.cut_after ? static_cast<int>(i) : -1;
    }
  }
  return -1;
}

torch::nn::Sequential Model::as_sequential() const {
  torch::nn::Sequential sequential;
  for (const Unit& unit : units) {
    sequential->push_back(unit.name, unit.module);
  }
  return sequential;
}

torch::Tensor Model::forward(torch::Tensor x) const {
  SkipTable skips;
  return forward_units(units, 0, units.size(), std::move(x), skips);
}

bool Model::has_skips() const {
  return std::any_of(units.begin(), units.end(), [](const Unit& u) { return !u.skips.empty(); });
}

int64_t Model::num_parameters() const {
  int64_t count = 0;
  for (const Unit& unit : units) {
    for (const torch::Tensor& parameter : unit.module.ptr()->parameters()) {
      count += parameter.numel();
    }
  }
  return count;
}

}  // namespace stalepipe::models
