#include "stalepipe/models/dropout.h"

#include <cmath>
#include <mutex>
#include <vector>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/dropout.h>

#include "stalepipe/common/error.h"

namespace stalepipe::models {
namespace {

// The innermost RandomScope on this thread; null outside any scope.
thread_local RandomScope* current_scope = nullptr;

void check_p(double p) {
  SP_CHECK_ARG(p >= 0 && p < 1, "dropout probability must be in [0, 1), got ", p);
}

bool is_feature(DropoutKind kind) { return kind == DropoutKind::kFeature || kind == DropoutKind::kFeatureAlpha; }
bool is_alpha(DropoutKind kind) { return kind == DropoutKind::kAlpha || kind == DropoutKind::kFeatureAlpha; }

}  // namespace

at::Generator unit_generator() { return unit_generator(c10::Device(c10::kCPU)); }

at::Generator unit_generator(c10::Device device) {
  if (current_scope) return current_scope->generator(device);
  return device.is_cpu() ? at::detail::getDefaultCPUGenerator() : at::globalContext().defaultGenerator(device);
}

RandomScope::RandomScope(uint64_t seed) : seed_(seed), previous_(current_scope) { current_scope = this; }

// Scopes nest on one thread, so the enclosing scope is still alive.
RandomScope::~RandomScope() { current_scope = previous_; }

at::Generator RandomScope::generator(c10::Device device) {
  if (device.is_cpu()) {
    // Made at the first draw: a scope around every unit's forward costs nothing where none draws.
    if (!generator_.defined()) generator_ = at::make_generator<at::CPUGeneratorImpl>(seed_);
    return generator_;
  }
  for (const auto& [d, g] : device_generators_) {
    if (d == device) return g;
  }
  // A device generator is made by its backend only: a clone of the default one, reseeded.
  at::Generator own;
  {
    at::Generator shared = at::globalContext().defaultGenerator(device);
    std::lock_guard<std::mutex> lock(shared.mutex());
    own = shared.clone();
  }
  own.set_current_seed(seed_);
  device_generators_.emplace_back(device, own);
  return own;
}

std::string to_string(DropoutKind kind) {
  switch (kind) {
    case DropoutKind::kElement: return "dropout";
    case DropoutKind::kFeature: return "dropout2d";
    case DropoutKind::kAlpha: return "alpha_dropout";
    case DropoutKind::kFeatureAlpha: return "feature_alpha_dropout";
  }
  return "dropout";
}

torch::Tensor dropout(const torch::Tensor& x, double p, bool training, DropoutKind kind) {
  check_p(p);
  if (!training || p == 0) return x;
  // One draw per element, or per (sample, channel) for the feature kinds.
  std::vector<int64_t> shape = x.sizes().vec();
  if (is_feature(kind)) {
    SP_CHECK_ARG(x.dim() >= 2, to_string(kind), " needs an input [N, C, ...], got ", x.sizes());
    for (size_t d = 2; d < shape.size(); ++d) shape[d] = 1;
  }
  // Drawn on the CPU so that the mask does not depend on the device.
  torch::Tensor keep = torch::empty(shape, torch::TensorOptions().dtype(x.scalar_type()));
  {
    at::Generator gen = unit_generator();
    keep.bernoulli_(1 - p, gen);
  }
  keep = keep.to(x.device());
  if (!is_alpha(kind)) return x * keep.div_(1 - p);
  // PyTorch's alpha dropout: dropped values go to SELU's negative saturation, then an affine
  // map restores zero mean and unit variance.
  constexpr double alpha = 1.7580993408473766;
  const double a = 1.0 / std::sqrt((alpha * alpha * p + 1) * (1 - p));
  const torch::Tensor b = (keep - 1) * (alpha * a) + alpha * a * p;
  return x * (keep * a) + b;
}

DropoutImpl::DropoutImpl(DropoutOptions options_) : options(options_) { reset(); }

void DropoutImpl::reset() { check_p(options.p()); }

torch::Tensor DropoutImpl::forward(const torch::Tensor& x) {
  return dropout(x, options.p(), is_training(), options.kind());
}

void DropoutImpl::pretty_print(std::ostream& stream) const {
  stream << "stalepipe::models::Dropout(p=" << options.p() << ", kind=" << to_string(options.kind()) << ")";
}

std::optional<DropoutOptions> stock_dropout_options(const torch::nn::Module& module) {
  if (auto* m = module.as<torch::nn::Dropout>()) return DropoutOptions(m->options.p());
  if (auto* m = module.as<torch::nn::Dropout2d>()) return DropoutOptions(m->options.p()).kind(DropoutKind::kFeature);
  if (auto* m = module.as<torch::nn::Dropout3d>()) return DropoutOptions(m->options.p()).kind(DropoutKind::kFeature);
  if (auto* m = module.as<torch::nn::AlphaDropout>()) return DropoutOptions(m->options.p()).kind(DropoutKind::kAlpha);
  if (auto* m = module.as<torch::nn::FeatureAlphaDropout>()) {
    return DropoutOptions(m->options.p()).kind(DropoutKind::kFeatureAlpha);
  }
  return std::nullopt;
}

namespace {

void refuse_stock(const std::string& path, const torch::nn::Module& module) {
  throw UsageError(c10::str(
      path, " is ", module.name(), ", which draws from LibTorch's global generator: partitions that run ",
      "concurrently would draw in a different order every run; use stalepipe::models::Dropout ",
      "(stalepipe/models/dropout.h), or hold it in a torch::nn::Sequential, where it is replaced"));
}

}  // namespace

int replace_stock_dropout(torch::nn::Module& module, const std::string& path) {
  int replaced = 0;
  if (auto* seq = dynamic_cast<torch::nn::SequentialImpl*>(&module)) {
    // A Sequential holds its children twice (as AnyModules it runs and as registered children
    // it saves): both are swapped.
    const auto names = seq->named_children();
    size_t i = 0;
    for (auto& any : *seq) {
      const std::string& name = names[i++].key();
      if (auto options = stock_dropout_options(*any.ptr())) {
        Dropout replacement(*options);
        replacement->train(any.ptr()->is_training());
        seq->replace_module(name, replacement);
        any = torch::nn::AnyModule(replacement);
        ++replaced;
      }
    }
  }
  // What is left is held where it cannot be swapped (the owner's member still points at it).
  for (const auto& child : module.named_children()) {
    const std::string child_path = path + "." + child.key();
    if (stock_dropout_options(*child.value())) refuse_stock(child_path, *child.value());
    replaced += replace_stock_dropout(*child.value(), child_path);
  }
  return replaced;
}

}  // namespace stalepipe::models
