#include "stalepipe/models/layer_table.h"

#include <algorithm>
#include <cstdio>

#include "stalepipe/common/error.h"
#include "stalepipe/models/blocks.h"
#include "stalepipe/models/model_builder.h"
#include "stalepipe/models/skips.h"

namespace stalepipe::models {
namespace {

std::vector<int64_t> per_sample_shape(const torch::Tensor& batch) {
  return std::vector<int64_t>(batch.sizes().begin() + 1, batch.sizes().end());
}

// FLOPs of `module` on `input` (a batch of one). Sequential children are run one by one so that
// each sees its real input shape.
double module_flops(torch::nn::Module& module, const torch::Tensor& input,
                    const std::string& unit_name) {
  if (const auto* counted = dynamic_cast<const FlopCounted*>(&module)) {
    return counted->forward_flops(per_sample_shape(input));
  }
  if (const auto* conv = module.as<torch::nn::Conv2d>()) {
    return conv2d_flops(*conv, per_sample_shape(input));
  }
  if (const auto* linear = module.as<torch::nn::Linear>()) {
    return linear_flops(*linear);
  }
  if (auto* unit = module.as<SequentialUnit>()) {
    return module_flops(*unit->sequential(), input, unit_name);
  }
  if (auto* sequential = module.as<torch::nn::Sequential>()) {
    double flops = 0.0;
    torch::Tensor x = input;
    for (torch::nn::AnyModule& child : *sequential) {
      flops += module_flops(*child.ptr(), x, unit_name);
      x = child.forward(x);
    }
    return flops;
  }
  SP_CHECK_ARG(module.parameters().empty(), "layer table: cannot count the FLOPs of unit '",
               unit_name, "': its module ", module.name(),
               " has parameters but is neither FlopCounted, Conv2d, Linear nor Sequential");
  return 0.0;  // activations, pooling, flatten
}

std::string layers_text(const std::vector<int>& layers) {
  if (layers.empty()) {
    return "-";
  }
  if (layers.size() == 1) {
    return std::to_string(layers.front());
  }
  return std::to_string(layers.front()) + "-" + std::to_string(layers.back());
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string text;
  for (int64_t size : shape) {
    text += (text.empty() ? "" : "x") + std::to_string(size);
  }
  return text;
}

// 1234567 -> "1,234,567"
std::string grouped(int64_t value) {
  std::string digits = std::to_string(value);
  for (int pos = static_cast<int>(digits.size()) - 3; pos > (value < 0 ? 1 : 0); pos -= 3) {
    digits.insert(static_cast<size_t>(pos), ",");
  }
  return digits;
}

// "pops block1_1", "stashes enc1", both joined by "; ".
std::string skips_text(const Skips& skips) {
  std::string text;
  if (!skips.pops.empty()) text = "pops " + c10::Join(", ", skips.pops);
  if (!skips.stashes.empty()) text += (text.empty() ? "" : "; ") + std::string("stashes ") + c10::Join(", ", skips.stashes);
  return text;
}

std::string mflops_text(double mflops) {
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "%.3f", mflops);
  return buffer;
}

}  // namespace

std::vector<UnitInfo> describe_units(Model& model) {
  torch::TensorOptions options = torch::kFloat;
  for (const Unit& unit : model.units) {
    const auto parameters = unit.module.ptr()->parameters();
    if (!parameters.empty()) {
      options = options.dtype(parameters.front().dtype()).device(parameters.front().device());
      break;
    }
  }
  torch::NoGradGuard no_grad;
  torch::Tensor x =
      torch::zeros({1, model.input.channels, model.input.height, model.input.width}, options);
  std::vector<UnitInfo> rows;
  SkipTable skips;
  for (size_t i = 0; i < model.units.size(); ++i) {
    Unit& unit = model.units[i];
    torch::nn::Module& module = *unit.module.ptr();
    const bool was_training = module.is_training();
    module.eval();
    UnitInfo row;
    row.index = static_cast<int>(i);
    row.name = unit.name;
    row.weight_layers = unit.weight_layers;
    row.cut_after = unit.cut_after;
    row.skips = unit.skips;
    row.joined = unit.joined;
    for (const torch::Tensor& parameter : module.parameters()) {
      row.parameters += parameter.numel();
    }
    try {
      row.forward_mflops = 1e-6 * module_flops(module, x, unit.name);
      x = forward_unit(unit.module, unit.name, unit.skips, x, skips);
    } catch (...) {
      module.train(was_training);
      throw;
    }
    module.train(was_training);
    row.output_shape = per_sample_shape(x);
    rows.push_back(std::move(row));
  }
  return rows;
}

std::string format_layer_table(const Model& model, const std::vector<UnitInfo>& rows) {
  const std::vector<int> cuts = model.cut_layers();
  const bool skips = model.has_skips();
  // Why a unit's weight layers cannot be cut apart, where it holds several and it is known.
  const auto says_why = [](const UnitInfo& row) { return row.weight_layers.size() > 1 && !row.joined.empty(); };
  const bool joined = std::any_of(rows.begin(), rows.end(), says_why);
  std::vector<std::vector<std::string>> cells = {
      {"unit", "name", "layers", "output", "params", "MFLOPs", "register after"}};
  if (skips) cells.front().push_back("skip tensors");
  if (joined) cells.front().push_back("no register between its layers");
  int64_t total_parameters = 0;
  double total_mflops = 0.0;
  for (const UnitInfo& row : rows) {
    std::string cut;
    if (row.cut_after && !row.weight_layers.empty() &&
        std::count(cuts.begin(), cuts.end(), row.weight_layers.back()) > 0) {
      cut = std::to_string(row.weight_layers.back());
    }
    cells.push_back({std::to_string(row.index), row.name, layers_text(row.weight_layers),
                     shape_text(row.output_shape), grouped(row.parameters),
                     mflops_text(row.forward_mflops), cut});
    if (skips) cells.back().push_back(skips_text(row.skips));
    if (joined) cells.back().push_back(says_why(row) ? row.joined : "");
    total_parameters += row.parameters;
    total_mflops += row.forward_mflops;
  }
  const int total_layers = model.num_weight_layers();
  cells.push_back({"total", "", total_layers > 0 ? "1-" + std::to_string(total_layers) : "-", "",
                   grouped(total_parameters), mflops_text(total_mflops), ""});
  if (skips) cells.back().push_back("");
  if (joined) cells.back().push_back("");

  std::vector<size_t> widths(cells.front().size(), 0);
  for (const auto& line : cells) {
    for (size_t c = 0; c < line.size(); ++c) {
      widths[c] = std::max(widths[c], line[c].size());
    }
  }
  // Numbers (unit, params, MFLOPs) align right, text left.
  const std::vector<bool> right = {true, false, false, false, true, true, false, false, false};
  std::string text = c10::str("model ", model.name, ": input ", model.input.channels, "x",
                              model.input.height, "x", model.input.width, ", ",
                              model.input.num_classes, " classes, ", total_layers,
                              " weight layers\n");
  for (const auto& line : cells) {
    std::string out;
    for (size_t c = 0; c < line.size(); ++c) {
      const std::string pad(widths[c] - line[c].size(), ' ');
      out += (c == 0 ? "" : "  ") + (right[c] ? pad + line[c] : line[c] + pad);
    }
    out.erase(out.find_last_not_of(' ') + 1);
    text += out + "\n";
  }
  return text;
}

}  // namespace stalepipe::models
