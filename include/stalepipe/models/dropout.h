// Dropout that stays exact when partitions run concurrently.
//
// LibTorch's dropout modules and functions draw from one global generator. Pipeline workers
// run forwards at the same time on different threads, so which worker draws first would
// decide every mask, and two identical runs would differ. stalepipe's dropout draws from the
// calling thread's *unit generator* instead: inside a pipeline, exec::Stage installs, around
// the forward of the model's unit u for mini-batch t (micro-batch m), a generator seeded from
// (the run's seed, u, t, m), so the masks are the same whichever executor runs the forward,
// on whatever thread, wherever the registers are, and after any resume. The backward reuses the forward's mask (autograd
// keeps it). Outside such a scope (your own loop, a unit test) the unit generator is
// LibTorch's default CPU generator, as for torch::nn::Dropout.
//
//   auto head = torch::nn::Sequential(torch::nn::Flatten(), stalepipe::models::Dropout(0.5),
//                                     torch::nn::Linear(320, 50));
//   x = stalepipe::models::dropout(x, 0.5, is_training());  // inside your module's forward
//
// ModelBuilder::build() replaces LibTorch's stock dropout modules (Dropout, Dropout2d,
// Dropout3d, AlphaDropout, FeatureAlphaDropout) found as units or inside Sequentials with
// these, same p, same kind; one held anywhere else (a member of your own module) is refused
// with its path. Random draws that no module shows (torch::dropout, torch::rand, bernoulli_
// called in your forward) cannot be seen: call the functions below, or draw from
// unit_generator(), instead.
//
// Masks are drawn on the CPU and moved to the input's device, so they do not depend on the
// device either. A scripted piece's other random operations (bernoulli_, rand, normal, ...)
// draw from unit_generator(device) on their tensors' device.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Generator.h>
#include <torch/arg.h>
#include <torch/nn/cloneable.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>

namespace stalepipe::models {

// The generator random draws in units use on this thread: the innermost RandomScope's, or
// LibTorch's default CPU generator outside any.
at::Generator unit_generator();
// The same for draws made on `device`: the CPU one above for the CPU; for another device (a
// GPU), a generator of that device seeded as the innermost RandomScope's CPU generator, made
// on the scope's first draw there; that device's default generator outside any scope.
at::Generator unit_generator(c10::Device device);

// Installs a fresh CPU generator seeded with `seed` as this thread's unit generator for the
// scope's lifetime (scopes nest). Not copyable; destroy on the thread that made it.
class RandomScope {
 public:
  explicit RandomScope(uint64_t seed);
  ~RandomScope();
  RandomScope(const RandomScope&) = delete;
  RandomScope& operator=(const RandomScope&) = delete;

  at::Generator generator(c10::Device device);

 private:
  uint64_t seed_;
  at::Generator generator_;
  std::vector<std::pair<c10::Device, at::Generator>> device_generators_;
  RandomScope* previous_;  // the enclosing scope, or null
};

// A unit module whose forward draws from unit_generator() other than through Dropout (a
// scripted piece with dropout or random operations in its code). A CUDA graph would replay
// its draws.
class RandomDrawing {
 public:
  virtual ~RandomDrawing() = default;
  virtual bool draws_random_numbers() const = 0;
};

enum class DropoutKind {
  kElement,       // each element (torch::nn::Dropout)
  kFeature,       // whole channels of [N, C, ...] (Dropout2d/3d, FeatureDropout)
  kAlpha,         // each element, keeping SELU's mean and variance (AlphaDropout)
  kFeatureAlpha,  // whole channels, alpha (FeatureAlphaDropout)
};
// "dropout", "dropout2d", "alpha_dropout", "feature_alpha_dropout" (names in messages).
std::string to_string(DropoutKind kind);

// Call these qualified (stalepipe::models::dropout): unqualified, argument-dependent lookup also
// finds at::dropout.
// Dropout of x with probability p (0 <= p < 1; p = 0 or !training returns x) drawn from
// unit_generator(); the kept values are scaled by 1/(1-p) (alpha kinds: as PyTorch's
// alpha_dropout). Throws UsageError for p outside [0, 1).
torch::Tensor dropout(const torch::Tensor& x, double p, bool training,
                      DropoutKind kind = DropoutKind::kElement);
inline torch::Tensor feature_dropout(const torch::Tensor& x, double p, bool training) {
  return dropout(x, p, training, DropoutKind::kFeature);
}
inline torch::Tensor alpha_dropout(const torch::Tensor& x, double p, bool training) {
  return dropout(x, p, training, DropoutKind::kAlpha);
}
inline torch::Tensor feature_alpha_dropout(const torch::Tensor& x, double p, bool training) {
  return dropout(x, p, training, DropoutKind::kFeatureAlpha);
}

struct DropoutOptions {
  /* implicit */ DropoutOptions(double p = 0.5) : p_(p) {}
  TORCH_ARG(double, p);
  TORCH_ARG(DropoutKind, kind) = DropoutKind::kElement;
};

// The module form of dropout() (active in train mode only). Throws UsageError for p outside
// [0, 1).
class DropoutImpl : public torch::nn::Cloneable<DropoutImpl> {
 public:
  explicit DropoutImpl(DropoutOptions options = {});
  void reset() override;
  torch::Tensor forward(const torch::Tensor& x);
  void pretty_print(std::ostream& stream) const override;
  DropoutOptions options;
};
TORCH_MODULE(Dropout);

// Replaces every stock LibTorch dropout module that is `module` itself's child inside a
// torch::nn::Sequential (at any depth of Sequentials) with a Dropout of the same p and kind.
// Returns how many it replaced. Throws UsageError naming the module's path ("<path>.<child>")
// and the replacement for a stock dropout module held anywhere else.
int replace_stock_dropout(torch::nn::Module& module, const std::string& path);

// The DropoutOptions equivalent to a stock LibTorch dropout module; nullopt for any other module.
std::optional<DropoutOptions> stock_dropout_options(const torch::nn::Module& module);

}  // namespace stalepipe::models
