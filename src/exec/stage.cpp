#include "stalepipe/exec/stage.h"

#include <algorithm>
#include <optional>

#include <torch/autograd.h>

#include "common/backward_impl.h"
#include "stalepipe/common/error.h"
#include "stalepipe/models/dropout.h"
#include "stalepipe/models/in_place.h"
#include "stalepipe/models/memory_format.h"
#include "stalepipe/models/scale_invariance.h"
#include "stage_graphs_impl.h"

namespace stalepipe::exec {

Stage::Stage(torch::nn::Sequential module, StageOptions options)
    : index_(options.index()), num_stages_(options.num_stages()), module_(std::move(module)),
      skips_(std::move(options.skips())), device_(options.device()), stream_(make_stream(device_)),
      objective_(std::move(options.objective())), seed_(options.seed()), first_unit_(options.first_unit()),
      memory_format_(options.memory_format()), precision_(options.precision()),
      recompute_units_(options.recompute_units()) {
  SP_CHECK_ARG(recompute_units_ <= module_->size(), "partition ", index_ + 1, " has ", module_->size(),
               " units; cannot recompute ", recompute_units_);
  if (skips_.empty()) skips_.resize(module_->size());
  for (const auto& child : module_->named_children()) unit_names_.push_back(child.key());
  SP_CHECK_ARG(skips_.size() == module_->size(), "partition ", index_ + 1, " has ", module_->size(),
               " units but skips for ", skips_.size());
  models::OpenSkips open = models::open_skips(skips_);
  skip_inputs_ = std::move(open.in);
  skip_outputs_ = std::move(open.out);
  module_->to(device_);
  models::to_memory_format(*module_, memory_format_);  // before the optimizer keeps any state
  module_->train();
  optimizer_ = optim::make_optimizer(module_->parameters(), options.update(), models::scale_invariant_weights(*module_));
  for (size_t u = 0; u < module_->size(); ++u) writes_input_.push_back(models::writes_its_input(*module_->ptr(u)));
  for (size_t u = 0; u < recompute_units_; ++u) {
    const auto& unit = *module_->ptr(u);
    for (const auto& t : unit.parameters()) recompute_params_.push_back(t);
    for (const auto& t : unit.buffers()) recompute_buffers_.push_back(t);
  }
}

torch::Tensor Stage::to_device(const torch::Tensor& t) const {
  // To a GPU the copy is queued on this stage's stream: from page-locked memory (the loader's
  // pin_memory) the host goes on at once, from pageable memory CUDA waits as it must. Never
  // asynchronous towards the host, which would read before the copy is done.
  return t.to(torch::TensorOptions().device(device_), /*non_blocking=*/device_.is_cuda());
}

torch::Tensor Stage::arrived(const torch::Tensor& t) const { return to_device(t); }

torch::Tensor Stage::main_arrived(const torch::Tensor& t) const {
  return is_first() ? models::in_memory_format(to_device(t), memory_format_) : to_device(t);
}

namespace {

// A leaf of a stage's graph, whose gradient backward() yields; one that has no gradient (a
// number from a scripted forward, as a tensor of integers) only a leaf.
torch::Tensor leaf(const torch::Tensor& t) { return t.detach().requires_grad_(t.is_floating_point()); }

}  // namespace

torch::Tensor Stage::prepare_input(const torch::Tensor& input) const {
  torch::Tensor x = main_arrived(input);
  if (is_first()) return x;
  // A leaf of this stage's graph, so backward() yields the gradient to send upstream.
  return x.detach().requires_grad_(true);
}

namespace {

// splitmix64's finaliser: consecutive inputs give unrelated outputs.
uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// The seed of the random numbers the forward of (unit, step, micro) draws.
uint64_t forward_seed(uint64_t run_seed, size_t unit, int64_t step, int micro) {
  uint64_t h = mix(run_seed + 0x9e3779b97f4a7c15ULL);
  h = mix(h ^ static_cast<uint64_t>(unit));
  h = mix(h ^ static_cast<uint64_t>(step));
  return mix(h ^ static_cast<uint64_t>(micro));
}

std::vector<torch::Tensor> copy_weights(const std::vector<torch::Tensor>& params) {
  std::vector<torch::Tensor> copies;
  copies.reserve(params.size());
  for (const auto& p : params) copies.push_back(p.detach().clone());
  return copies;
}

// One copy that several forwards in flight may share (weight stashing).
std::shared_ptr<const std::vector<torch::Tensor>> shared_copy(const std::vector<torch::Tensor>& params) {
  return std::make_shared<const std::vector<torch::Tensor>>(copy_weights(params));
}

// Through data(): pending graphs hold these tensors and must not see a version bump.
void write_weights(const std::vector<torch::Tensor>& params, const std::vector<torch::Tensor>& values) {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < params.size(); ++i) params[i].data().copy_(values[i]);
}

// Puts tensors back as they were when a pass ends, even by a throw: the current weights after
// a pass that ran with other weights, the buffers (batch-norm running statistics) after a
// forward that must not count as one more (a recomputation).
class RestoreWeights {
 public:
  explicit RestoreWeights(const std::vector<torch::Tensor>& params)
      : params_(params), saved_(copy_weights(params)) {}
  ~RestoreWeights() { write_weights(params_, saved_); }
  RestoreWeights(const RestoreWeights&) = delete;
  RestoreWeights& operator=(const RestoreWeights&) = delete;

 private:
  const std::vector<torch::Tensor>& params_;
  std::vector<torch::Tensor> saved_;
};

}  // namespace

void Stage::begin_segment(const schedule::Schedule& schedule, std::function<double(int64_t)> lr) {
  last_update_step_ = schedule.first_step - 1;
  stash_weights_ = schedule.stash_weights;
  delay_.clear();
  lr_ = std::move(lr);
  begin_graphs_segment(schedule.micro_batches);
}

void Stage::clear_in_flight() {
  stream_->synchronize();
  in_flight_.clear();
  delay_.clear();
  // A backward whose update never ran left its gradient: the next update (after a load())
  // would add it in.
  clear_gradients();
}

torch::Tensor Stage::run_units(size_t first, size_t last, torch::Tensor x, models::SkipTable& table,
                               std::optional<Key> pass) {
  // x is a register's leaf (shares its storage with the previous partition's output), a
  // batch, or what a recomputation runs from again: a unit that writes into it gets a copy.
  if (first < last && writes_input_[first]) x = x.clone();
  for (size_t u = first; u < last; ++u) {
    std::optional<models::RandomScope> random;
    if (pass) random.emplace(forward_seed(seed_, first_unit_ + u, pass->first, pass->second));
    if (graphs_ && !graphs_->captured) {  // the eager passes before the first capture
      x = watched_unit(u, std::move(x), table);
      continue;
    }
    torch::nn::AnyModule& unit = *(module_->begin() + static_cast<std::ptrdiff_t>(u));
    x = models::forward_unit(unit, unit_names_[u], skips_[u], std::move(x), table);
  }
  return x;
}

models::SkipTable Stage::input_table(const std::vector<torch::Tensor>& skips) const {
  models::SkipTable table;
  for (size_t i = 0; i < skips.size(); ++i) table.emplace(skip_inputs_[i], skips[i]);
  return table;
}

PendingLoss Stage::forward_pass(int64_t step, int micro, Pending& p, const torch::Tensor& y, double loss_scale) {
  SP_CHECK(!in_flight_.count({step, micro}), "partition ", index_ + 1, ", mini-batch ", step,
           ": forward twice without backward");
  const int delay = static_cast<int>(step - 1 - last_update_step_);
  delay_[step] = delay;
  const auto& params = optimizer_->params();
  std::optional<RestoreWeights> restore;
  if (optimizer_->options().weight_prediction() && delay > 0) {
    restore.emplace(params);
    optimizer_->extrapolate(delay, optimizer_->effective_lr(lr_ ? lr_(step) : 0.0, delay, step));
  }
  // Predicted weights are this forward's own: stash them now. The current weights are stashed
  // only if an update comes before this forward's backward (see update()).
  if (stash_weights_ && restore) {
    p.weights = shared_copy(params);
  }
  // Recomputation needs them too, where stashing does not keep them already.
  if (recompute_units_ > 0 && !stash_weights_ && restore) p.head_weights = shared_copy(recompute_params_);
  PendingLoss loss;
  if (!graphed_forward(step, micro, p, y, loss_scale, loss)) compute_forward(step, micro, p, y, loss_scale, loss);
  return loss;
}

torch::Tensor Stage::forward_units(int64_t step, int micro, Pending& p) {
  AutocastScope autocast(precision_, device_);
  models::SkipTable table = input_table(p.skip_inputs);
  torch::Tensor x = p.input;
  if (recompute_units_ > 0) {
    {
      torch::NoGradGuard no_grad;  // nothing of these units is kept but their outputs
      x = run_units(0, recompute_units_, x, table, Key{step, micro});
    }
    p.head_output = x.detach().requires_grad_(true);
    x = p.head_output;
    // What they stashed becomes leaves too, whose gradients the recomputation continues from.
    for (auto& [name, value] : table) {
      if (value.requires_grad()) continue;  // a skip input they left for the later units
      value = leaf(value);
      p.head_stashes.emplace(name, value);
    }
  }
  x = run_units(recompute_units_, module_->size(), x, table, Key{step, micro});
  p.skip_outputs.clear();  // a graph's test double runs this again on the same slot
  for (const std::string& name : skip_outputs_) p.skip_outputs.push_back(table.at(name));
  return x;
}

void Stage::compute_forward(int64_t step, int micro, Pending& p, const torch::Tensor& y, double loss_scale,
                            PendingLoss& loss) {
  torch::Tensor x = forward_units(step, micro, p);
  if (!is_last()) {
    p.output = x;
    return;
  }
  x = to_full_precision(x);  // the loss and the metric in fp32 (bf16: after autocast's scope)
  const torch::Tensor value = objective_.loss(x, y);
  SP_CHECK(value.numel() == 1, "the loss (", objective_.loss.name(), ") gave ", value.sizes(),
           " for output ", x.sizes(), " and target ", y.sizes(), "; a loss must be a scalar");
  p.output = loss_scale == 1.0 ? value : value * loss_scale;
  loss.loss = value.detach();
  if (objective_.metric) {
    torch::NoGradGuard no_grad;
    loss.score = objective_.metric(x.detach(), y);
  }
  loss.samples = y.size(0);
}

void Stage::take_inputs(const StageTensors& input, Pending& p) const {
  SP_CHECK(input.skips.size() == skip_inputs_.size(), "partition ", index_ + 1, " takes ",
           skip_inputs_.size(), " skip tensors, got ", input.skips.size());
  p.input = prepare_input(input.main);
  for (const torch::Tensor& skip : input.skips) {
    p.skip_inputs.push_back(leaf(arrived(skip)));
  }
}

namespace {

// Whether `t` shares memory with one of `module`'s parameters or buffers.
bool shares_weights(const torch::Tensor& t, const torch::nn::Module& module) {
  if (!t.defined() || !t.has_storage()) return false;
  const auto shares = [&](const std::vector<torch::Tensor>& weights) {
    return std::any_of(weights.begin(), weights.end(),
                       [&](const torch::Tensor& w) { return w.has_storage() && t.is_alias_of(w); });
  };
  return shares(module.parameters()) || shares(module.buffers());
}

}  // namespace

StageTensors Stage::forward(int64_t step, const StageTensors& input, int micro) {
  SP_CHECK(!is_last(), "partition ", index_ + 1, ": forward() called on the last partition");
  Pending p;
  take_inputs(input, p);
  forward_pass(step, micro, p, {}, 1.0);
  // A slot's outputs are written again by its next replay: what leaves it is a copy. So is a
  // tensor that shares memory with this partition's weights (a skip that is a view of a
  // parameter, as ConViT's `self.cls_token.expand(B, -1, -1)`): the next partition reads it
  // while this one goes on to its update, which writes the weight in place.
  const auto leaving = [&](const torch::Tensor& t) {
    return p.slot >= 0 || shares_weights(t, *module_) ? t.detach().clone() : t.detach();
  };
  StageTensors out{leaving(p.output), {}};
  for (const torch::Tensor& skip : p.skip_outputs) out.skips.push_back(leaving(skip));
  in_flight_.emplace(Key{step, micro}, std::move(p));
  return out;
}

torch::Tensor Stage::forward(int64_t step, const torch::Tensor& input, int micro) {
  return forward(step, StageTensors{input, {}}, micro).main;
}

PendingLoss Stage::forward_loss(int64_t step, const StageTensors& input,
                                const torch::Tensor& target, int micro, double loss_scale) {
  SP_CHECK(is_last(), "partition ", index_ + 1, ": forward_loss() on a non-last partition");
  Pending p;
  take_inputs(input, p);
  PendingLoss result = forward_pass(step, micro, p, to_device(target), loss_scale);
  in_flight_.emplace(Key{step, micro}, std::move(p));
  return result;
}

PendingLoss Stage::forward_loss(int64_t step, const torch::Tensor& input, const torch::Tensor& target,
                                int micro, double loss_scale) {
  return forward_loss(step, StageTensors{input, {}}, target, micro, loss_scale);
}

Stage::Pending& Stage::pending(int64_t step, int micro, const char* what) {
  auto it = in_flight_.find({step, micro});
  SP_CHECK(it != in_flight_.end(), "partition ", index_ + 1, ", mini-batch ", step,
           micro ? c10::str(".", micro) : "", ": ", what, " without a forward in flight");
  return it->second;
}

namespace {

// Gradient of a leaf the backward filled, or zeros where nothing downstream used it (a message
// carries a tensor for every name).
// The gradients autograd hands some leaves (a register's input, skip inputs, recomputation's
// outputs), in the layout autograd made them. A leaf's .grad holds a gradient in the leaf's own
// layout (AccumulateGrad copies a permuted one into a contiguous one), and what the partition
// before computes from a gradient in another layout adds up in another order than the uncut
// network does. A gradient in the leaf's layout is left to .grad, which takes it without a copy.
class LeafGradients {
 public:
  LeafGradients() = default;
  LeafGradients(const LeafGradients&) = delete;
  LeafGradients& operator=(const LeafGradients&) = delete;
  ~LeafGradients() {
    for (auto& [leaf, hook] : hooks_) leaf.remove_hook(hook);
  }
  void watch(const torch::Tensor& leaf) {
    leaves_.push_back(leaf);
    other_layout_->emplace_back();
    if (!leaf.defined() || !leaf.requires_grad()) return;
    auto kept = other_layout_;
    const size_t i = leaves_.size() - 1;
    hooks_.emplace_back(leaf, leaf.register_hook([kept, i, leaf](const torch::Tensor& g) -> torch::Tensor {
      torch::Tensor& sum = (*kept)[i];
      if (!sum.defined() && g.strides() == leaf.strides()) return g;
      // A second part (a leaf the recomputation reads again) adds to the first.
      const torch::Tensor& before = sum.defined() ? sum : leaf.grad();
      sum = before.defined() ? before + g : g;
      // .grad is not read any more: it gets g's own memory under the leaf's strides, which
      // AccumulateGrad keeps as it is instead of copying g.
      // (A leaf that is a view of part of its storage, as a part of a split, keeps g as it is.)
      return g.is_non_overlapping_and_dense() && leaf.is_non_overlapping_and_dense()
                 ? g.as_strided(g.sizes(), leaf.strides(), g.storage_offset())
                 : g;
    }));
  }
  // Leaf i's gradient (in watch order); undefined where none arrived.
  torch::Tensor operator[](size_t i) const {
    const torch::Tensor& kept = other_layout_->at(i);
    return kept.defined() || !leaves_[i].defined() ? kept : leaves_[i].grad();
  }

 private:
  std::vector<torch::Tensor> leaves_;
  std::shared_ptr<std::vector<torch::Tensor>> other_layout_ = std::make_shared<std::vector<torch::Tensor>>();
  std::vector<std::pair<torch::Tensor, unsigned>> hooks_;
};

}  // namespace

namespace detail {

void backward_from(const std::vector<torch::Tensor>& roots, const std::vector<torch::Tensor>& grads) {
  std::vector<torch::Tensor> used_roots, used_grads;
  for (size_t i = 0; i < roots.size(); ++i) {
    if (!roots[i].requires_grad() || (!grads.empty() && !grads[i].defined())) continue;
    used_roots.push_back(roots[i]);
    if (!grads.empty()) used_grads.push_back(grads[i]);
  }
  if (!used_roots.empty()) backward_on_this_thread(used_roots, used_grads);
}

}  // namespace detail

StageTensors Stage::backward(int64_t step, const StageTensors& grad_output, int micro) {
  Pending& p = pending(step, micro, "backward");
  std::optional<RestoreWeights> restore;
  if (p.weights) {  // the forward ran with other weights than the current ones
    restore.emplace(optimizer_->params());
    write_weights(optimizer_->params(), *p.weights);
  }
  std::vector<torch::Tensor> roots, grads;
  if (is_last()) {
    roots.push_back(p.output);
  } else {
    SP_CHECK(grad_output.main.defined(), "partition ", index_ + 1, ", mini-batch ", step,
             ": backward needs the gradient of the partition's output");
    SP_CHECK(grad_output.skips.size() == p.skip_outputs.size(), "partition ", index_ + 1, ", mini-batch ", step,
             ": backward needs the gradients of its ", p.skip_outputs.size(), " skip outputs, got ",
             grad_output.skips.size());
    roots.push_back(p.output);
    grads.push_back(grad_output.main.to(device_));
    for (size_t i = 0; i < p.skip_outputs.size(); ++i) {
      roots.push_back(p.skip_outputs[i]);
      grads.push_back(grad_output.skips[i].to(device_));
    }
  }
  StageTensors grad_input;
  if (p.slot >= 0) {
    grad_input = graphed_backward(p, grads);
  } else {
    if (graphs_) ++graphs_->eager_passes;
    LeafGradients inputs;
    inputs.watch(is_first() ? torch::Tensor() : p.input);
    for (const torch::Tensor& skip : p.skip_inputs) inputs.watch(skip);
    std::vector<torch::Tensor> head_grads;
    {
      LeafGradients head;  // let go of before the recomputation, which replaces them
      head.watch(p.head_output);
      for (const auto& stash : p.head_stashes) head.watch(stash.second);
      detail::backward_from(roots, grads);
      if (p.head_output.defined()) {
        for (size_t i = 0; i < 1 + p.head_stashes.size(); ++i) head_grads.push_back(head[i]);
      }
    }
    if (!head_grads.empty()) recompute_backward(step, micro, p, std::move(head_grads));
    if (graphs_) graphs_->warm_thread = std::this_thread::get_id();
    grad_input.main = inputs[0];
    for (size_t i = 0; i < p.skip_inputs.size(); ++i) {
      const torch::Tensor g = inputs[1 + i];
      grad_input.skips.push_back(g.defined() ? g : torch::zeros_like(p.skip_inputs[i]));
    }
  }
  in_flight_.erase({step, micro});
  return grad_input;
}

torch::Tensor Stage::backward(int64_t step, const torch::Tensor& grad_output, int micro) {
  return backward(step, StageTensors{grad_output, {}}, micro).main;
}

void Stage::recompute_backward(int64_t step, int micro, Pending& p, std::vector<torch::Tensor> grads) {
  std::vector<std::string> stashes;
  for (const auto& stash : p.head_stashes) stashes.push_back(stash.first);
  // The forward's copies of their outputs go before the recomputation makes its own.
  p.output.reset();
  p.skip_outputs.clear();
  p.head_output.reset();
  p.head_stashes.clear();
  if (std::none_of(grads.begin(), grads.end(), [](const torch::Tensor& g) { return g.defined(); })) {
    return;  // the rest of the stage did not use their outputs
  }
  std::vector<torch::Tensor> roots;
  {
    std::optional<RestoreWeights> restore;
    if (p.head_weights) {
      restore.emplace(recompute_params_);
      write_weights(recompute_params_, *p.head_weights);
    }
    RestoreWeights keep_statistics(recompute_buffers_);
    AutocastScope autocast(precision_, device_);
    models::SkipTable table = input_table(p.skip_inputs);
    roots.push_back(run_units(0, recompute_units_, p.input, table, Key{step, micro}));
    for (const std::string& name : stashes) roots.push_back(table.at(name));
  }
  // With the current weights back, as the backward without recomputation would see them.
  detail::backward_from(roots, grads);
}

void Stage::update(int64_t step, double lr) {
  // Copy on write: forwards in flight that ran with the current weights keep one shared copy
  // (of all weights for stashing, of the recomputed units' for recomputation).
  if (stash_weights_ || recompute_units_ > 0) {
    const auto& params = stash_weights_ ? optimizer_->params() : recompute_params_;
    Weights current;
    for (auto& [key, p] : in_flight_) {
      Weights& kept = stash_weights_ ? p.weights : p.head_weights;
      if (kept) continue;
      if (!current) current = shared_copy(params);
      kept = current;
    }
  }
  int delay = 0;
  if (auto it = delay_.find(step); it != delay_.end()) {
    delay = it->second;
    delay_.erase(it);
  }
  const double lr_delayed = optimizer_->effective_lr(lr, delay, step);
  if (!graphed_update(lr_delayed, delay)) {
    optimizer_->step(lr_delayed, delay);
    clear_gradients();
  }
  last_update_step_ = step;
}

StageTensors Stage::predict(const StageTensors& input) {
  torch::NoGradGuard no_grad;
  module_->eval();
  std::vector<torch::Tensor> skips;
  for (const torch::Tensor& skip : input.skips) skips.push_back(arrived(skip));
  models::SkipTable table = input_table(skips);
  StageTensors out;
  {
    AutocastScope autocast(precision_, device_);
    out.main = run_units(0, module_->size(), main_arrived(input.main), table, std::nullopt);
  }
  if (is_last()) out.main = to_full_precision(out.main);
  for (const std::string& name : skip_outputs_) out.skips.push_back(table.at(name));
  module_->train();
  return out;
}

torch::Tensor Stage::predict(const torch::Tensor& input) { return predict(StageTensors{input, {}}).main; }

}  // namespace stalepipe::exec
