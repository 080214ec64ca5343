// exec::Stage's CUDA graphs (stage.h; docs/design.md, "CUDA graphs"): the slots and their
// static tensors, capture on first use, replay, and the update's graph.
#include "stage_graphs_impl.h"

#include <utility>

#include "stalepipe/common/error.h"
#include "stalepipe/models/dropout.h"

namespace stalepipe::exec {

namespace {

std::string describe(const torch::Tensor& t) {
  return t.defined() ? c10::str(t.sizes(), " ", t.scalar_type()) : std::string("none");
}

// The shapes a forward's graphs are captured for: a forward with others runs eagerly.
std::string shapes_of(const torch::Tensor& input, const std::vector<torch::Tensor>& skips,
                      const torch::Tensor& target, double loss_scale) {
  std::string text = "input " + describe(input);
  for (const torch::Tensor& skip : skips) text += ", skip " + describe(skip);
  if (target.defined()) text += c10::str(", target ", describe(target), ", loss scale ", loss_scale);
  return text;
}

// A static copy of a leaf: same layout, its gradient allocated now so that the backward graph
// accumulates into it in place.
torch::Tensor static_leaf(const torch::Tensor& t) {
  torch::Tensor leaf = t.detach().clone();
  if (t.requires_grad()) {
    leaf.requires_grad_(true);
    leaf.mutable_grad() = torch::zeros_like(leaf);
  }
  return leaf;
}

void write(const torch::Tensor& into, const torch::Tensor& value) {
  torch::NoGradGuard no_grad;
  into.data().copy_(value);
}

}  // namespace

void Stage::Graphs::Slot::take(const Pending& p, const torch::Tensor& y) {
  if (!pending.input.defined()) {
    pending.input = static_leaf(p.input);
    for (const torch::Tensor& skip : p.skip_inputs) pending.skip_inputs.push_back(static_leaf(skip));
    if (y.defined()) target = y.clone();
    return;
  }
  write(pending.input, p.input);
  for (size_t i = 0; i < p.skip_inputs.size(); ++i) write(pending.skip_inputs[i], p.skip_inputs[i]);
  if (y.defined()) write(target, y);
}

void Stage::Graphs::arm(const std::vector<torch::Tensor>& params) {
  if (armed) return;
  for (size_t i = 0; i < params.size(); ++i) {
    const bool had = i < had_gradient.size() && had_gradient[i];
    if (had && !params[i].grad().defined()) params[i].mutable_grad() = torch::zeros_like(params[i]);
  }
  armed = true;
}

Stage::~Stage() = default;

void Stage::use_graphs(const GraphSettings& settings) {
  if (settings.mode == GraphMode::kOff) {
    graphs_.reset();
    return;
  }
  const std::string where = c10::str(settings.option, ": partition ", index_ + 1);
  SP_CHECK_ARG(settings.mode != GraphMode::kCuda || built_with_cuda(), where,
               ": this build's LibTorch has no CUDA (build against a CUDA LibTorch, scripts/gpu-check.sh)");
  SP_CHECK_ARG(settings.mode != GraphMode::kCuda || device_.is_cuda(), where, " runs on ", device_.str(),
               "; CUDA graphs need a CUDA device");
  SP_CHECK_ARG(recompute_units_ == 0, where, " recomputes the activations of its first ", recompute_units_,
               " unit(s); graphs replay a backward without its recomputation: use one or the other");
  for (size_t u = 0; u < module_->size(); ++u) {
    for (const auto& m : module_->ptr(u)->modules()) {
      const auto* d = dynamic_cast<const models::DropoutImpl*>(m.get());
      SP_CHECK_ARG(!d || d->options.p() == 0, where, " has dropout in unit ", unit_names_[u],
                   "; its masks are drawn on the host, and a replay would repeat them: train without dropout");
      const auto* drawing = dynamic_cast<const models::RandomDrawing*>(m.get());
      SP_CHECK_ARG(!drawing || !drawing->draws_random_numbers(), where, ": unit ", unit_names_[u],
                   " draws random numbers in its scripted code (dropout, bernoulli_, rand, ...); a replay "
                   "would repeat them: train without graphs, or without the draws");
    }
  }
  SP_CHECK_ARG(settings.eager_steps >= 1, where, ": at least 1 eager step before the capture, got ",
               settings.eager_steps);
  graphs_ = std::make_unique<Graphs>();
  graphs_->settings = settings;
  graphs_->where = where;
}

std::vector<std::string> Stage::take_notes() {
  return graphs_ ? std::exchange(graphs_->notes, {}) : std::vector<std::string>();
}

int64_t Stage::graphed_passes() const { return graphs_ ? graphs_->passes : 0; }

int64_t Stage::eager_passes() const { return graphs_ ? graphs_->eager_passes : 0; }

void Stage::drop_graphs() {
  SP_CHECK(in_flight_.empty(), "partition ", index_ + 1, ": graphs dropped with mini-batches in flight");
  if (!graphs_) return;
  graphs_->slots.clear();
  graphs_->update.reset();
  graphs_->shapes.clear();
}

void Stage::clear_gradients() {
  if (graphs_ && graphs_->armed) {
    optimizer_->zero_grad_in_place();
  } else {
    optimizer_->zero_grad();
  }
}

bool Stage::graphed_forward(int64_t step, int micro, Pending& p, const torch::Tensor& y, double loss_scale,
                            PendingLoss& loss) {
  if (!graphs_) return false;
  Graphs& g = *graphs_;
  const std::string shapes = shapes_of(p.input, p.skip_inputs, y, loss_scale);
  // The first forward's shapes, a whole mini-batch's (a partial one comes last in an epoch).
  if (g.shapes.empty()) g.shapes = shapes;
  if (g.eager_updates < g.settings.eager_steps) {
    ++g.eager_passes;
    return false;
  }
  if (shapes != g.shapes) {
    ++g.eager_passes;
    if (!std::exchange(g.noted, true)) {
      g.notes.push_back(c10::str(g.where, ", mini-batch ", step, " has ", shapes,
                                 ", not the captured ", g.shapes, "; passes of other shapes run without graphs"));
    }
    return false;
  }
  g.arm(optimizer_->params());
  const int index = g.free_slot(in_flight_);
  Graphs::Slot& slot = *g.slots[index];
  const auto on_stream = stream_->enter();
  slot.take(p, y);
  slot.step = step;
  slot.micro = micro;
  slot.loss_scale = loss_scale;
  if (slot.forward) {
    slot.forward->replay();
  } else {
    auto graph = g.make();
    graph->capture([this, &slot] {
      compute_forward(slot.step, slot.micro, slot.pending, slot.target, slot.loss_scale, slot.loss);
    });
    slot.forward = std::move(graph);
    const Score& score = slot.loss.score;
    SP_CHECK_ARG(score.correct_count.defined() || score.scored == 0, g.where,
                 ": the metric counts on the host, and a replay would repeat its count; leave it on the device "
                 "(Score::correct_count)");
  }
  p.input = slot.pending.input;
  p.skip_inputs = slot.pending.skip_inputs;
  p.output = slot.pending.output;
  p.skip_outputs = slot.pending.skip_outputs;
  p.slot = index;
  ++g.passes;
  if (is_last()) {  // copies: the slot's next replay writes these again
    loss = slot.loss;
    loss.loss = slot.loss.loss.clone();
    if (loss.score.correct_count.defined()) loss.score.correct_count = loss.score.correct_count.clone();
  }
  return true;
}

StageTensors Stage::graphed_backward(Pending& p, const std::vector<torch::Tensor>& grads) {
  Graphs::Slot& slot = *graphs_->slots.at(static_cast<size_t>(p.slot));
  const auto on_stream = stream_->enter();
  if (slot.grad_outputs.empty()) {
    for (const torch::Tensor& grad : grads) slot.grad_outputs.push_back(grad.detach().clone());
  } else {
    for (size_t i = 0; i < grads.size(); ++i) write(slot.grad_outputs[i], grads[i]);
  }
  if (slot.backward) {
    slot.backward->replay();
  } else {
    auto graph = graphs_->make();
    graph->capture([&slot] {
      {
        torch::NoGradGuard no_grad;
        if (slot.pending.input.requires_grad()) slot.pending.input.mutable_grad().zero_();
        for (const torch::Tensor& skip : slot.pending.skip_inputs) skip.mutable_grad().zero_();
      }
      std::vector<torch::Tensor> roots = {slot.pending.output};
      for (const torch::Tensor& skip : slot.pending.skip_outputs) roots.push_back(skip);
      detail::backward_from(roots, slot.grad_outputs);
    });
    slot.backward = std::move(graph);
  }
  ++graphs_->passes;
  // Copies: the slot's next backward replay writes these again.
  StageTensors grad_input;
  if (!is_first()) grad_input.main = slot.pending.input.grad().clone();
  for (const torch::Tensor& skip : slot.pending.skip_inputs) grad_input.skips.push_back(skip.grad().clone());
  return grad_input;
}

bool Stage::graphed_update(double lr, int delay) {
  if (!graphs_) return false;
  Graphs& g = *graphs_;
  if (!g.armed || !optimizer_->ready_on_device()) {  // eager: the warm-up
    const auto& params = optimizer_->params();
    g.had_gradient.assign(params.size(), false);
    for (size_t i = 0; i < params.size(); ++i) g.had_gradient[i] = params[i].grad().defined();
    ++g.eager_updates;
    ++g.eager_passes;
    return false;
  }
  const auto on_stream = stream_->enter();
  ++g.passes;
  optimizer_->set_step_values(lr, delay);
  if (g.update) {
    g.update->replay();
    return true;
  }
  auto graph = g.make();
  graph->capture([this] {
    optimizer_->step_on_device();
    optimizer_->zero_grad_in_place();
  });
  g.update = std::move(graph);
  return true;
}

}  // namespace stalepipe::exec
