// exec::Stage's CUDA graphs (stage.h; docs/design.md, "CUDA graphs"): the slots and their
// static tensors, capture on first use, replay, and the update's graph.
#include "stage_graphs_impl.h"

#include <mutex>
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

// One unit watched at a time: partitions on one device share its generator, and a draw by one
// must not be blamed on another.
std::mutex watch_mutex;

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

std::unique_ptr<detail::StepGraph> Stage::Graphs::make(detail::StepGraph* share_pool_of) const {
  SP_CHECK(warm(), where, ": a graph would be captured on a thread that ran no pass of the partition eagerly in "
           "this segment");
  return settings.mode == GraphMode::kCuda ? detail::make_cuda_graph(where, share_pool_of)
                                           : detail::make_replay_graph(where);
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
  SP_CHECK_ARG(settings.batch_size >= 1, where, ": the graphs need the mini-batch size (>= 1), got ",
               settings.batch_size);
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

void Stage::begin_graphs_segment(int micro_batches) {
  if (!graphs_) return;
  Graphs& g = *graphs_;
  const int64_t batch = g.settings.batch_size;
  // tensor_split's first slice (exec/worker.cpp), and the worker's share of the loss for it.
  const int64_t rows = (batch + micro_batches - 1) / micro_batches;
  if (rows != g.whole_rows && !g.shapes.empty()) {
    SP_CHECK(in_flight_.empty(), g.where, ": a segment begins with mini-batches in flight");
    g.slots.clear();  // the update's graph does not depend on the shapes
    g.shapes.clear();
  }
  g.whole_rows = rows;
  g.whole_loss_scale = static_cast<double>(rows) / static_cast<double>(batch);
  g.warm_thread = std::thread::id();
}

torch::Tensor Stage::watched_unit(size_t u, torch::Tensor x, models::SkipTable& table) {
  const Graphs& g = *graphs_;
  const bool cuda = g.settings.mode == GraphMode::kCuda;
  torch::nn::AnyModule& unit = *(module_->begin() + static_cast<std::ptrdiff_t>(u));
  std::lock_guard<std::mutex> lock(watch_mutex);
  const torch::Tensor before = detail::generator_mark(cuda, device_);
  x = models::forward_unit(unit, unit_names_[u], skips_[u], std::move(x), table);
  SP_CHECK_ARG(torch::equal(before, detail::generator_mark(cuda, device_)), g.where, ", unit ", unit_names_[u],
               " draws random numbers from the device's default generator; a replay would repeat them: take the "
               "draw out of the unit or train without ", g.settings.option);
  return x;
}

std::vector<std::pair<std::string, torch::Tensor>> Stage::fixed_tensors(int slot) const {
  std::vector<std::pair<std::string, torch::Tensor>> all;
  if (slot >= 0) {
    const Pending& p = graphs_->slots.at(static_cast<size_t>(slot))->pending;
    if (p.input.requires_grad()) all.emplace_back("the input's gradient", p.input.grad());
    for (size_t i = 0; i < p.skip_inputs.size(); ++i) {
      all.emplace_back("skip input " + skip_inputs_[i] + "'s gradient", p.skip_inputs[i].grad());
    }
  }
  size_t i = 0;  // the optimizer's state is in the parameters' order
  for (const auto& param : module_->named_parameters()) {
    all.emplace_back("parameter " + param.key(), param.value());
    all.emplace_back("parameter " + param.key() + "'s gradient", param.value().grad());
    for (auto& [name, state] : optimizer_->state_of(i)) all.emplace_back("parameter " + param.key() + "'s " + name, state);
    ++i;
  }
  for (const auto& buffer : module_->named_buffers()) all.emplace_back("buffer " + buffer.key(), buffer.value());
  return all;
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
  if (g.eager_updates < g.settings.eager_steps) {
    ++g.eager_passes;
    return false;
  }
  const std::string shapes = shapes_of(p.input, p.skip_inputs, y, loss_scale);
  const bool whole = p.input.dim() > 0 && p.input.size(0) == g.whole_rows && loss_scale == (is_last() ? g.whole_loss_scale : 1.0);
  if (g.shapes.empty() && whole) g.shapes = shapes;
  if (shapes != g.shapes) {
    ++g.eager_passes;
    if (!std::exchange(g.noted, true)) {
      const std::string captured = g.shapes.empty() ? c10::str("a whole mini-batch's (", g.whole_rows, " samples)")
                                                    : "the captured " + g.shapes;
      g.notes.push_back(c10::str(g.where, ", mini-batch ", step, " has ", shapes, ", not ", captured,
                                 "; passes of other shapes run without graphs"));
    }
    return false;
  }
  g.arm(optimizer_->params());
  const int index = g.free_slot(in_flight_);
  Graphs::Slot& slot = *g.slots[index];
  if (!slot.forward && !g.warm()) {  // warms this segment's thread first
    ++g.eager_passes;
    return false;
  }
  const auto on_stream = stream_->enter();
  slot.take(p, y);
  slot.step = step;
  slot.micro = micro;
  slot.loss_scale = loss_scale;
  if (slot.forward) {
    slot.forward->replay();
  } else {
    capture_forward(index);
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

void Stage::capture_forward(int index) {
  Graphs& g = *graphs_;
  Graphs::Slot& slot = *g.slots[index];
  detail::GraphResults results;
  results.outputs = [&slot] {
    std::vector<torch::Tensor*> all = {&slot.pending.output, &slot.loss.loss, &slot.loss.score.correct_count};
    for (torch::Tensor& skip : slot.pending.skip_outputs) all.push_back(&skip);
    return all;
  };
  results.fixed = [this, index] { return fixed_tensors(index); };
  g.captured = true;  // the units were watched in the eager passes; the capture records none
  auto graph = g.make();
  graph->capture([this, &slot] { compute_forward(slot.step, slot.micro, slot.pending, slot.target, slot.loss_scale, slot.loss); },
                 results);
  slot.forward = std::move(graph);
  const Score& score = slot.loss.score;
  SP_CHECK_ARG(score.correct_count.defined() || score.scored == 0, g.where,
               ": the metric counts on the host, and a replay would repeat its count; leave it on the device "
               "(Score::correct_count)");
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
    // The forward's pool: a slot's backward always replays right after its forward, before
    // the slot's next forward.
    auto graph = graphs_->make(slot.forward.get());
    detail::GraphResults results;
    results.fixed = [this, index = p.slot] { return fixed_tensors(index); };
    graph->capture([&slot] {
      {
        torch::NoGradGuard no_grad;
        if (slot.pending.input.requires_grad()) slot.pending.input.mutable_grad().zero_();
        for (const torch::Tensor& skip : slot.pending.skip_inputs) skip.mutable_grad().zero_();
      }
      std::vector<torch::Tensor> roots = {slot.pending.output};
      for (const torch::Tensor& skip : slot.pending.skip_outputs) roots.push_back(skip);
      detail::backward_from(roots, slot.grad_outputs);
    }, results);
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
  if (!g.armed || !optimizer_->ready_on_device() || (!g.update && !g.warm())) {  // eager: the warm-up
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
  detail::GraphResults results;
  results.fixed = [this] { return fixed_tensors(-1); };
  auto graph = g.make();
  graph->capture([this] {
    optimizer_->step_on_device();
    optimizer_->zero_grad_in_place();
  }, results);
  g.update = std::move(graph);
  return true;
}

}  // namespace stalepipe::exec
