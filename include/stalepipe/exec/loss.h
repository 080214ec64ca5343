// What the last partition computes from the model's output and a mini-batch's target: the
// loss that training minimises, and an optional score (top-1 accuracy by default).
//
// The target is any tensor whose first dimension is the batch: int64 class indices [B],
// float regression targets [B, D], masks [B, H, W], ... Nothing in the engine assumes
// classification: accuracy exists only where the metric scores samples.
//
//   options.optimizer().loss("mse");                                   // by name (CLI, config.json)
//   options.optimizer().loss([](const torch::Tensor& out, const torch::Tensor& y) {
//     return torch::huber_loss(out, y);                                // any function ("custom")
//   });
//   options.optimizer().metric([](const torch::Tensor& out, const torch::Tensor& y) {
//     return stalepipe::exec::Score{(out - y).abs().lt(0.1).all(1).sum().item<int64_t>(), y.size(0)};
//   });
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <torch/types.h>

namespace stalepipe::exec {

// A loss function: scalar from (output, target). Runs on the last partition's worker thread.
using LossFn = std::function<torch::Tensor(const torch::Tensor& output, const torch::Tensor& target)>;

// Mean cross-entropy of logits [B, classes] against class indices [B].
torch::Tensor cross_entropy_loss(const torch::Tensor& output, const torch::Tensor& target);

// A loss with a name: one of loss_names() (what the CLI and config.json can name), or a
// function of yours (named "custom" unless you name it).
class Loss {
 public:
  // cross-entropy, the default.
  Loss();
  // By name; throws UsageError "'NAME' is not a loss ..." listing loss_names().
  Loss(const char* name);         // NOLINT(google-explicit-constructor): options read as names
  Loss(const std::string& name);  // NOLINT(google-explicit-constructor)
  Loss(LossFn fn, std::string name);
  // Any callable Tensor(const Tensor& output, const Tensor& target).
  template <typename F, typename = std::enable_if_t<
                            !std::is_convertible_v<F, std::string> &&
                            std::is_invocable_r_v<torch::Tensor, F, const torch::Tensor&, const torch::Tensor&>>>
  Loss(F fn) : fn_(std::move(fn)), name_("custom") {}  // NOLINT(google-explicit-constructor)

  const std::string& name() const { return name_; }
  torch::Tensor operator()(const torch::Tensor& output, const torch::Tensor& target) const {
    return fn_(output, target);
  }

 private:
  LossFn fn_;
  std::string name_;
};

// "cross-entropy" (logits [B, C], class indices [B]), "nll" (log-probabilities [B, C], class
// indices [B]), "mse", "l1", "smooth-l1" (output and target of one shape, float),
// "bce-with-logits" (logits and 0/1 float targets of one shape). All are means over the batch.
std::vector<std::string> loss_names();

// How many of a batch's samples a metric scored, and how many of those it counts as correct.
// A metric may leave the count on its device (correct_count, a 0-dim integer tensor; `correct`
// is then ignored): training reads it with the loss every few steps instead of waiting for the
// device at every mini-batch (SegmentContext::read_losses_every). top1_accuracy does.
struct Score {
  int64_t correct = 0;
  int64_t scored = 0;
  torch::Tensor correct_count;
};
// score.correct, or the count it left on its device (read now).
int64_t correct_of(const Score& score);
// A metric: runs where the loss runs (no gradient), on the output and target of a batch.
using MetricFn = std::function<Score(const torch::Tensor& output, const torch::Tensor& target)>;

// Top-1 accuracy where the target is class indices: output [B, C] and int64 target [B] score
// all B samples; output [B, C, d1, ...] and target [B, d1, ...] (a class per pixel, as
// segmentation has) score every target element; any other target scores none (so no
// accuracy is reported).
Score top1_accuracy(const torch::Tensor& output, const torch::Tensor& target);

// What the last partition computes.
struct Objective {
  Loss loss;
  MetricFn metric = top1_accuracy;
};

}  // namespace stalepipe::exec
