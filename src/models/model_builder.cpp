#include "stalepipe/models/model_builder.h"

#include <set>
#include <sstream>

#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>

#include "stalepipe/common/error.h"
#include "stalepipe/models/dropout.h"
#include "stalepipe/models/skips.h"

namespace stalepipe::models {
namespace {

std::string shape_text(const torch::Tensor& t) {
  std::ostringstream out;
  out << t.sizes();
  return out.str();
}

// The first line of a c10::Error: the message without the C++ backtrace.
std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

// LibTorch's dropout draws from its global generator, which concurrent partitions would share:
// a unit that is one, or holds one in a Sequential, gets stalepipe's exact dropout instead.
void make_dropout_exact(const std::string& model, size_t index, Unit& unit) {
  try {
    if (auto options = stock_dropout_options(*unit.module.ptr())) {
      unit.module = torch::nn::AnyModule(Dropout(*options));
    } else {
      replace_stock_dropout(*unit.module.ptr(), unit.name);
    }
  } catch (const UsageError& e) {
    throw UsageError(c10::str("model ", model, ": unit ", index + 1, " (", unit.name, "): ", e.what()));
  }
}

}  // namespace

SequentialUnitImpl::SequentialUnitImpl(torch::nn::Sequential seq)
    : seq_(register_module("seq", std::move(seq))) {}

// Cloneable: an empty Sequential the clone then fills with copies of the original's layers.
void SequentialUnitImpl::reset() { seq_ = register_module("seq", torch::nn::Sequential()); }

torch::Tensor SequentialUnitImpl::forward(torch::Tensor x) { return seq_->forward(std::move(x)); }

int count_weight_layers(const torch::nn::Module& module) {
  int count = 0;
  for (const auto& m : module.modules(/*include_self=*/true)) {
    if (m->as<torch::nn::Conv1d>() || m->as<torch::nn::Conv2d>() || m->as<torch::nn::Conv3d>() ||
        m->as<torch::nn::ConvTranspose1d>() || m->as<torch::nn::ConvTranspose2d>() ||
        m->as<torch::nn::ConvTranspose3d>() || m->as<torch::nn::Linear>() ||
        m->as<torch::nn::Bilinear>()) {
      ++count;
    }
  }
  return count;
}

ModelBuilder::ModelBuilder(std::string name, InputShape input)
    : name_(std::move(name)), input_(input) {}

ModelBuilder& ModelBuilder::add_any(std::string name, torch::nn::AnyModule module,
                                    UnitOptions options) {
  SP_CHECK_ARG(!name.empty() && name.find('.') == std::string::npos, "model ", name_, ": unit ",
               units_.size() + 1, " has name '", name, "'; a unit name must be non-empty and without '.'");
  for (const Unit& u : units_) {
    SP_CHECK_ARG(u.name != name, "model ", name_, ": unit name '", name, "' is used twice");
  }
  SP_CHECK_ARG(!module.is_empty(), "model ", name_, ": unit ", name, " has no module");
  SP_CHECK_ARG(options.weight_layers() >= -1, "model ", name_, ": unit ", name,
               ": weight_layers must be >= 0 (or -1 to count), got ", options.weight_layers());
  const int count = options.weight_layers() >= 0 ? options.weight_layers()
                                                 : count_weight_layers(*module.ptr());
  int first = 1;
  for (int c : counts_) first += c;
  Unit unit;
  unit.name = std::move(name);
  unit.module = std::move(module);
  unit.cut_after = options.cut_after();
  unit.joined = options.joined();
  unit.skips = {options.pops(), options.stashes()};
  for (int i = 0; i < count; ++i) unit.weight_layers.push_back(first + i);
  units_.push_back(std::move(unit));
  counts_.push_back(count);
  return *this;
}

Model ModelBuilder::build() const {
  SP_CHECK_ARG(!units_.empty(), "model ", name_, ": no units; add at least one module");
  SP_CHECK_ARG(input_.channels > 0 && input_.height > 0 && input_.width > 0 &&
                   input_.num_classes > 0,
               "model ", name_, ": input shape must be positive, got ", input_.channels, "x",
               input_.height, "x", input_.width, " with ", input_.num_classes, " classes");
  Model model;
  model.name = name_;
  model.input = input_;
  model.units = units_;
  for (size_t i = 0; i < model.units.size(); ++i) make_dropout_exact(name_, i, model.units[i]);
  check_skips(name_, model.units);

  // Shape check: eval mode and no grad, so batch-norm statistics and autograd stay untouched.
  torch::NoGradGuard no_grad;
  torch::Tensor x = torch::zeros({2, input_.channels, input_.height, input_.width});
  SkipTable skips;
  for (size_t i = 0; i < model.units.size(); ++i) {
    Unit& unit = model.units[i];
    auto module = unit.module.ptr();
    const bool training = module->is_training();
    const auto params = module->parameters();
    if (!params.empty()) x = x.to(params.front().device());
    const std::string input_text = shape_text(x);
    module->eval();
    try {
      x = forward_unit(unit.module, unit.name, unit.skips, x, skips);
    } catch (const UsageError& e) {
      module->train(training);
      throw UsageError(c10::str("model ", name_, ": ", e.what()));
    } catch (const c10::Error& e) {
      module->train(training);
      const std::string from =
          i == 0 ? c10::str("the model input ", input_text)
                 : c10::str("the output of unit ", i, " (", units_[i - 1].name, "), ", input_text);
      throw UsageError(c10::str("model ", name_, ": unit ", i + 1, " (", unit.name,
                                ") cannot take ", from, ": ",
                                first_line(e.what_without_backtrace())));
    }
    module->train(training);
  }
  SP_CHECK_ARG(x.dim() >= 2 && x.size(0) == 2 && x.size(1) == input_.num_classes, "model ",
               name_, ": the last unit (", units_.back().name, ") produces ", shape_text(x),
               " for an input of 2 samples; expected logits [2, ", input_.num_classes,
               "] or per-pixel logits [2, ", input_.num_classes, ", H, W] (input.num_classes = ",
               input_.num_classes, ")");
  return model;
}

}  // namespace stalepipe::models
