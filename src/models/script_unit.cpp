#include <algorithm>
#include <cstring>

#include <torch/csrc/autograd/profiler_legacy.h>
#include <torch/csrc/jit/passes/inliner.h>

#include "stalepipe/common/error.h"
#include "torchscript_impl.h"

namespace stalepipe::models::detail {
namespace {

namespace profiler = torch::autograd::profiler;

// ATen ops that draw from a generator, by name prefix ("aten::rand" covers randn, randint,
// randperm, random_ and rand_like).
const char* const kRandomOps[] = {
    "aten::rand",          "aten::bernoulli",   "aten::normal",           "aten::multinomial",
    "aten::dropout",       "aten::feature_dropout", "aten::alpha_dropout", "aten::feature_alpha_dropout",
    "aten::native_dropout", "aten::fused_dropout", "aten::uniform",       "aten::exponential",
    "aten::geometric",     "aten::cauchy",      "aten::log_normal",       "aten::poisson",
    "aten::rrelu"};

bool block_draws(torch::jit::Block* block) {
  for (torch::jit::Node* node : block->nodes()) {
    const char* kind = node->kind().toQualString();
    for (const char* op : kRandomOps) {
      if (std::strncmp(kind, op, std::strlen(op)) == 0) return true;
    }
    for (torch::jit::Block* sub : node->blocks()) {
      if (block_draws(sub)) return true;
    }
  }
  return false;
}

// The ops whose FLOPs the profiler computes and the zoo counts too (conv and matrix products;
// not the elementwise mul/add it also reports).
bool counted_op(const std::string& name) {
  return name == "aten::conv2d" || name == "aten::mm" || name == "aten::addmm" ||
         name == "aten::bmm" || name == "aten::baddbmm";
}

std::string flat_name(std::string name) {
  std::replace(name.begin(), name.end(), '.', '_');
  return name;
}

}  // namespace

std::string script_error_cause(const std::exception& e) {
  const auto* error = dynamic_cast<const c10::Error*>(&e);
  std::string text = error ? error->what_without_backtrace() : e.what();
  if (text.rfind("The following operation failed in the TorchScript interpreter", 0) == 0) {
    text.erase(text.find_last_not_of(" \n") + 1);
    return text.substr(text.rfind('\n') + 1);
  }
  text = text.substr(0, text.find('\n'));
  // The archive reader's checks read "[enforce fail at inline_container.cc:165] . <cause>".
  const std::string enforce = "[enforce fail at ";
  if (text.rfind(enforce, 0) == 0 && text.find("] . ") != std::string::npos) {
    text = text.substr(text.find("] . ") + 4);
  }
  return text;
}

ScriptUnitImpl::ScriptUnitImpl(torch::jit::Module script)
    : torch::nn::Module("ScriptUnit(" + display_type_name(script_type_name(script)) + ")"),
      script_(std::move(script)) {
  for (const auto& p : script_.named_parameters(/*recurse=*/true)) {
    register_parameter(flat_name(p.name), p.value, p.value.requires_grad());
  }
  for (const auto& b : script_.named_buffers(/*recurse=*/true)) {
    register_buffer(flat_name(b.name), b.value);
  }
  torch::nn::Module::train(script_.is_training());
}

torch::Tensor ScriptUnitImpl::forward(torch::Tensor x) {
  c10::IValue out;
  try {
    out = script_.forward({std::move(x)});
  } catch (const std::exception& e) {
    // As c10::Error, the type LibTorch modules throw, with one line that names the cause.
    TORCH_CHECK(false, script_error_cause(e));
  }
  SP_CHECK_ARG(out.isTensor(), "scripted ", display_type_name(script_type_name(script_)),
               " returns a ", out.tagKind(), "; a unit must return one tensor");
  return out.toTensor();
}

void ScriptUnitImpl::train(bool on) {
  torch::nn::Module::train(on);
  script_.train(on);
}

double ScriptUnitImpl::forward_flops(const std::vector<int64_t>& input_shape) const {
  std::vector<int64_t> sizes = {1};
  sizes.insert(sizes.end(), input_shape.begin(), input_shape.end());
  auto options = torch::TensorOptions(torch::kFloat);
  const auto params = parameters();
  if (!params.empty()) options = options.dtype(params.front().dtype()).device(params.front().device());
  torch::NoGradGuard no_grad;
  profiler::enableProfilerLegacy(profiler::ProfilerConfig(profiler::ProfilerState::CPU,
                                                          /*report_input_shapes=*/true,
                                                          /*profile_memory=*/false,
                                                          /*with_stack=*/false,
                                                          /*with_flops=*/true));
  try {
    script_.forward({torch::zeros(sizes, options)});
  } catch (...) {
    profiler::disableProfilerLegacy();
    throw;
  }
  double flops = 0;
  for (auto& events : profiler::disableProfilerLegacy()) {
    for (auto& event : events) {
      if (counted_op(event.name())) flops += static_cast<double>(event.flops());
    }
  }
  return flops;
}

std::string script_type_name(const torch::jit::Module& module) {
  const auto name = module.type()->name();
  if (!name) return "?";
  std::string text;
  for (const std::string& atom : name->atoms()) {
    if (atom == "__torch__" || atom.rfind("___torch_mangle_", 0) == 0) continue;
    text += (text.empty() ? "" : ".") + atom;
  }
  return text;
}

std::string display_type_name(const std::string& type) {
  const std::string prefix = "torch.nn.modules.";
  if (type.rfind(prefix, 0) != 0) return type;
  return "torch.nn." + type.substr(type.rfind('.') + 1);
}

bool is_torch_nn(const std::string& type, const std::string& name) {
  return type.rfind("torch.nn.modules.", 0) == 0 && type.size() > name.size() &&
         type.compare(type.size() - name.size() - 1, std::string::npos, "." + name) == 0;
}

int count_script_weight_layers(const torch::jit::Module& module) {
  static const char* const kWeightLayers[] = {"Conv1d",          "Conv2d",          "Conv3d",
                                              "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d",
                                              "Linear",          "Bilinear"};
  int count = 0;
  for (const torch::jit::Module& m : module.modules()) {
    const std::string type = script_type_name(m);
    for (const char* name : kWeightLayers) count += is_torch_nn(type, name) ? 1 : 0;
  }
  return count;
}

bool draws_random_numbers(const torch::jit::Module& module) {
  const auto forward = module.find_method("forward");
  if (!forward) return false;
  const std::shared_ptr<torch::jit::Graph> graph = forward->graph()->copy();
  torch::jit::Inline(*graph);
  return block_draws(graph->block());
}

std::optional<DropoutOptions> script_dropout_options(const torch::jit::Module& module) {
  const std::pair<const char*, DropoutKind> kStock[] = {
      {"Dropout", DropoutKind::kElement},       {"Dropout1d", DropoutKind::kFeature},
      {"Dropout2d", DropoutKind::kFeature},     {"Dropout3d", DropoutKind::kFeature},
      {"AlphaDropout", DropoutKind::kAlpha},    {"FeatureAlphaDropout", DropoutKind::kFeatureAlpha}};
  const std::string type = script_type_name(module);
  for (const auto& [name, kind] : kStock) {
    if (is_torch_nn(type, name) && module.hasattr("p")) {
      return DropoutOptions(module.attr("p").toDouble()).kind(kind);
    }
  }
  return std::nullopt;
}

}  // namespace stalepipe::models::detail
