// A partition at run time: its units, its device, its optimizer and the mini-batches in flight.
//
// Weight semantics (docs/design.md, "Which weights each pass uses"):
//   forward(t)  uses the partition's weights as they are at that moment;
//   backward(t) uses the weights current at backward time (updates applied since forward(t)
//               are visible) together with the activations saved by forward(t);
//   update(t)   applies t's gradient at once, in place, keeping no copy of older weights.
// This falls out of LibTorch's autograd: the graph of forward(t) keeps references to the live
// weight tensors, and the optimizer (optim/optimizer.h) writes them through `data()` without bumping the version
// counter that would otherwise make the pending backward throw.
// Two schedule or optimizer settings change what a pass sees:
//   weight stashing (Schedule::stash_weights, PipeDream's 1F1B): the weights forward(t) used
//       are copied before the first update that would change them (copy on write, one copy
//       per version in flight), and backward(t) runs with that copy written into the weights,
//       then the current weights are put back; memory grows by the copies in flight;
//   weight prediction (UpdateOptions::weight_prediction): forward(t) runs with the weights
//       extrapolated along the momentum by the number of updates it lacks (its delay D),
//       then the current weights are put back; no old version is kept.
// Recomputation (recompute_units > 0) changes what is kept, not what is computed: forward(t)
// runs the stage's first recompute_units units without a graph and keeps only the stage's
// inputs and their output and skip tensors (a skip is sent once: recomputing sends nothing);
// backward(t) runs the rest of the backward, then those units' forward again, with the
// weights and random numbers forward(t) used (the weights copied on write, as stashing does,
// but only theirs) and their buffers (batch-norm running statistics) left as forward(t) left
// them, then their backward with the current weights. The gradients
// are those without recomputation bit for bit; a mini-batch in flight keeps one activation
// of those units instead of all, and each backward costs one more forward of them.
// D, the delay of mini-batch t's gradient, is counted here: the updates of mini-batches
// before t that are not yet applied when forward(t) runs (every mini-batch before the
// segment's first step is applied: segments start with a drained pipeline).
//
// CUDA graphs (use_graphs(), docs/design.md "CUDA graphs"): after a few eager steps, each
// forward, backward and update runs as a replay of a graph captured from its first run. A
// forward takes a slot (static inputs, its forward and backward graphs; as many slots as
// forwards in flight), its backward frees it; parameter gradients accumulate in place into
// tensors that stay. What crosses to other stages (events, messages, the batch's copy to the
// device), weight prediction and weight stashing stay eager, around the replays.
//
// Threading: a Stage is used by one thread at a time (its worker). Different stages may run
// concurrently on different threads, and on a GPU each queues its work on its own stream.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <torch/arg.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/types.h>

#include "stalepipe/exec/device_stream.h"
#include "stalepipe/exec/loss.h"
#include "stalepipe/exec/precision.h"
#include "stalepipe/models/skips.h"
#include "stalepipe/optim/optimizer.h"
#include "stalepipe/schedule/schedule.h"

namespace stalepipe::exec {

// The loss of one mini-batch as the last partition computed it (with that partition's weights
// at the time; earlier partitions' weights as the schedule's staleness implies).
struct StepLoss {
  int64_t step = 0;     // global mini-batch index (filled in by the worker that reports it)
  double loss = 0;      // the loss function's value
  int64_t correct = 0;  // samples the metric counts as correct (Objective::metric)
  int64_t scored = 0;   // samples the metric scored (0: no accuracy, e.g. a regression target)
  int64_t samples = 0;  // B
};

// The loss and score of one micro-batch as the last partition left them on its device; the
// worker loop reads them every few steps (SegmentContext::read_losses_every), not at once.
struct PendingLoss {
  torch::Tensor loss;  // 0-dim, the loss function's value, no graph
  Score score;         // the objective's metric (its count possibly on the device)
  int64_t samples = 0;
};

// What crosses a partition's boundary besides the target: the main activation (or its
// gradient) and the skip tensors (models/skips.h) coming in from earlier partitions or going
// out to later ones (or their gradients), in the order of Stage::skip_inputs() for what comes
// in and Stage::skip_outputs() for what goes out.
struct StageTensors {
  torch::Tensor main;
  std::vector<torch::Tensor> skips;
};

// How a stage runs its passes: eagerly, as CUDA graphs, or (tests only) through a CPU
// stand-in that behaves like a replay (src/exec/step_graph_impl.h): it runs the work again,
// then writes the results into the memory the capture's results live in, and throws where a
// tensor a replay writes in place (a gradient, a parameter) moved; it exercises the slots,
// static tensors, copies and in-place gradients on the CPU, not a capture.
enum class GraphMode { kOff, kCuda, kReplayForTests };

struct GraphSettings {
  GraphMode mode = GraphMode::kOff;
  // Updates that run eagerly before the first capture (cuDNN's autotuning, lazy
  // initialisation, the momentum buffers); at least 1.
  int eager_steps = 2;
  // The mini-batch size B the pipeline is fed: the graphs are captured for the first micro-batch
  // of a whole mini-batch (B / micro_batches rounded up samples); at least 1.
  int64_t batch_size = 0;
  // The option's name in messages.
  std::string option = "cuda_graphs";
};

// How a partition runs. Everything but its place in the pipeline has a default.
struct StageOptions {
  StageOptions(int index, int num_stages) : index_(index), num_stages_(num_stages) {}
  // 0-based partition number, of num_stages.
  TORCH_ARG(int, index);
  TORCH_ARG(int, num_stages);
  TORCH_ARG(torch::Device, device) = torch::kCPU;
  TORCH_ARG(optim::UpdateOptions, update);
  // Used by the last stage only.
  TORCH_ARG(Objective, objective);
  // The run's seed, and the model's index of the module's first unit: unit u's forward of
  // (step, micro) draws its random numbers (models/dropout.h) from a generator seeded from
  // (seed, first_unit + u, step, micro), so they depend neither on the executor nor on where
  // the registers are.
  TORCH_ARG(uint64_t, seed) = 0;
  TORCH_ARG(size_t, first_unit) = 0;
  // The layout of the module's 4-D weights and of the 4-D inputs it takes
  // (models/memory_format.h); an input that arrives in another layout is converted once.
  TORCH_ARG(torch::MemoryFormat, memory_format) = torch::MemoryFormat::Contiguous;
  // The module's first units whose activations backward recomputes (above); at most the
  // module's size.
  TORCH_ARG(size_t, recompute_units) = 0;
  // Each unit's skip tensors (empty: a chain). A name popped here and stashed in no earlier
  // unit of the module is a skip input, a name stashed here and popped by no later unit of it a
  // skip output.
  TORCH_ARG(std::vector<models::Skips>, skips);
  // kBf16 runs the units' forwards (and their recomputation, and predict) under autocast on the
  // device (exec/precision.h); the last stage's loss and metric read its output in fp32. The
  // process-wide TF32 switches are the caller's (exec::Pipeline sets them).
  TORCH_ARG(Precision, precision) = Precision::kFp32;
};

class Stage {
 public:
  // module: the partition's units in order (already built and initialised); it is moved to
  // options.device().
  Stage(torch::nn::Sequential module, StageOptions options);
  ~Stage();
  Stage(const Stage&) = delete;
  Stage& operator=(const Stage&) = delete;

  // Runs the passes as graphs from now on (above). Throws UsageError naming settings.option
  // and the partition where this partition cannot: kCuda on a device other than CUDA or in a
  // build without CUDA, stalepipe's dropout in a unit (its masks come from the host, and a
  // replay would repeat them), recomputation. Later, a unit whose forward draws from the
  // device's default generator during the eager passes before the first capture (LibTorch's
  // dropout, bernoulli_, rand: a replay would repeat its offsets), or a capture that fails,
  // throws UsageError naming both and the unit or the error.
  // Graphs are captured for the first micro-batch of a whole mini-batch; a segment
  // (begin_segment) whose micro-batches differ in size from the captured ones drops the
  // forwards' and backwards' graphs, and its first whole micro-batch captures new ones.
  void use_graphs(const GraphSettings& settings);
  // The notes since the last call: a pass that ran eagerly because its shapes differ from
  // the captured ones (a partial batch, unequal micro-batches), once per stage.
  std::vector<std::string> take_notes();
  // The passes (forwards, backwards, updates) that ran as a graph, captured or replayed, and
  // those that ran eagerly while graphs were on (the warm-up, other shapes); both 0 without.
  int64_t graphed_passes() const;
  int64_t eager_passes() const;
  // Forgets the captured graphs (the next passes capture new ones); after the weights or the
  // optimizer's state were replaced, as a checkpoint's load does. Nothing may be in flight.
  void drop_graphs();

  int index() const { return index_; }
  bool is_first() const { return index_ == 0; }
  bool is_last() const { return index_ == num_stages_ - 1; }
  const torch::Device& device() const { return device_; }
  Precision precision() const { return precision_; }
  // The skip tensors this partition receives (in the order its units pop them) and sends (in
  // the order its units stash them).
  const std::vector<std::string>& skip_inputs() const { return skip_inputs_; }
  const std::vector<std::string>& skip_outputs() const { return skip_outputs_; }
  // The stream this partition's work is queued on (exec/device_stream.h): the executors enter
  // it around each operation, so forward, backward and update of different partitions overlap
  // on one GPU.
  DeviceStream& stream() { return *stream_; }

  // Called by the executor before a segment of `schedule` runs: every update before
  // schedule.first_step has been applied, nothing is in flight. `lr` gives the learning rate of
  // a step (weight prediction extrapolates with it).
  void begin_segment(const schedule::Schedule& schedule, std::function<double(int64_t)> lr);

  // Forward of micro-batch `micro` of mini-batch `step` on a non-last stage. The input tensors
  // (any device) are copied to this stage's device. Keeps the graph until backward(step,
  // micro). Returns the output and the skip outputs, detached: what crosses the registers.
  StageTensors forward(int64_t step, const StageTensors& input, int micro = 0);
  // The same for a stage without skip tensors.
  torch::Tensor forward(int64_t step, const torch::Tensor& input, int micro = 0);

  // Forward of the last stage: output, the objective's loss against `target` and its score
  // (by default top-1 accuracy where the target is class indices), left on the device. The
  // backward starts from loss * loss_scale (a micro-batch's share of its mini-batch); the
  // reported loss is unscaled.
  PendingLoss forward_loss(int64_t step, const StageTensors& input, const torch::Tensor& target,
                           int micro = 0, double loss_scale = 1.0);
  PendingLoss forward_loss(int64_t step, const torch::Tensor& input, const torch::Tensor& target,
                           int micro = 0, double loss_scale = 1.0);

  // Backward of (step, micro): from the saved loss (last stage) or from the gradients of the
  // stage's output and skip outputs. Accumulates parameter gradients and returns the gradients
  // of the stage's input (undefined for the first stage) and skip inputs.
  // Throws RuntimeError if (step, micro) has no forward in flight.
  StageTensors backward(int64_t step, const StageTensors& grad_output, int micro = 0);
  torch::Tensor backward(int64_t step, const torch::Tensor& grad_output, int micro = 0);

  // Applies the accumulated gradient of `step` with learning rate lr (scaled by the
  // optimizer for the gradient's delay where a mitigation asks for it) and clears it.
  void update(int64_t step, double lr);

  // Evaluation forward: no graph, eval mode (batch-norm running statistics), train mode restored.
  StageTensors predict(const StageTensors& input);
  torch::Tensor predict(const torch::Tensor& input);

  size_t in_flight() const { return in_flight_.size(); }
  // Drops the mini-batches in flight and the gradients not yet applied (after a failure);
  // the weights stay as they are. Waits first for the work queued on the stage's stream, which
  // may still write what this frees or zeroes.
  void clear_in_flight();

  torch::nn::Sequential& module() { return module_; }
  optim::Optimizer& optimizer() { return *optimizer_; }

 private:
  using Weights = std::shared_ptr<const std::vector<torch::Tensor>>;
  struct Pending {
    torch::Tensor input;   // leaf requiring grad (non-first stages)
    std::vector<torch::Tensor> skip_inputs;   // leaves requiring grad
    torch::Tensor output;  // output or loss, with its graph
    std::vector<torch::Tensor> skip_outputs;  // with their graphs
    Weights weights;       // the forward's weights, once they differ from the current ones
    torch::Tensor head_output;  // recomputation: the recomputed units' output, a leaf
    models::SkipTable head_stashes;  // ... the skips they stashed, leaves
    Weights head_weights;       // ... their weights as the forward saw them, once they differ
    int slot = -1;              // graphs: the slot whose graphs ran the forward, -1: eager
  };
  using Key = std::pair<int64_t, int>;  // (step, micro)

  torch::Tensor to_device(const torch::Tensor& t) const;
  // A tensor from another partition (a register, a skip) on this stage's device, in the layout
  // its sender gave it: the one the uncut network's next unit would see.
  torch::Tensor arrived(const torch::Tensor& t) const;
  // The stage's main input: the batch (first stage) in this stage's layout, else as arrived().
  torch::Tensor main_arrived(const torch::Tensor& t) const;
  torch::Tensor prepare_input(const torch::Tensor& input) const;
  // The input leaves of a forward; checks the number of skip inputs.
  void take_inputs(const StageTensors& input, Pending& p) const;
  // The skip inputs by name.
  models::SkipTable input_table(const std::vector<torch::Tensor>& skips) const;
  Pending& pending(int64_t step, int micro, const char* what);
  // Units [first, last) of the module on x (on a copy where unit `first` writes into its input);
  // in training, `pass` (step, micro) seeds each unit's random draws (StageOptions::seed).
  torch::Tensor run_units(size_t first, size_t last, torch::Tensor x, models::SkipTable& table,
                          std::optional<Key> pass);
  // Recomputation: the recomputed units' forward again, then their backward from the gradients
  // the rest of the stage's backward handed p.head_output and p.head_stashes (in that order).
  void recompute_backward(int64_t step, int micro, Pending& p, std::vector<torch::Tensor> grads);
  // compute_forward()'s units, under the forward's random numbers and autocast (bf16): the
  // output; fills p.skip_outputs and, with recomputation, p.head_output and p.head_stashes.
  torch::Tensor forward_units(int64_t step, int micro, Pending& p);
  // The forward of (step, micro) with its weights in place: the units (the last stage: then
  // the loss against y, scaled, and the metric into `loss`), filling p.output,
  // p.skip_outputs and, with recomputation, p.head_output and p.head_stashes.
  void compute_forward(int64_t step, int micro, Pending& p, const torch::Tensor& y, double loss_scale,
                       PendingLoss& loss);
  // forward(), forward_loss(): the delay and the weights this forward of `step` should see
  // (filling p.weights and, with recomputation, p.head_weights), then the computation.
  PendingLoss forward_pass(int64_t step, int micro, Pending& p, const torch::Tensor& y, double loss_scale);
  // Graphs (stage_graphs.cpp). The forward and the update return false where the pass runs
  // eagerly instead; the backward of a graphed forward is graphed.
  bool graphed_forward(int64_t step, int micro, Pending& p, const torch::Tensor& y, double loss_scale,
                       PendingLoss& loss);
  // The first forward of graph slot `index`, captured from its statics.
  void capture_forward(int index);
  StageTensors graphed_backward(Pending& p, const std::vector<torch::Tensor>& grads);
  bool graphed_update(double lr, int delay);
  // begin_segment's part: the shapes this segment's graphs are for.
  void begin_graphs_segment(int micro_batches);
  // Unit u's forward before the first capture: refused where it draws from the device's
  // default generator.
  torch::Tensor watched_unit(size_t u, torch::Tensor x, models::SkipTable& table);
  // What the graphs write in place (the replay stand-in checks their addresses): the static
  // leaves' gradients of `slot` (none: -1), then the parameters, their gradients, the buffers
  // and the momentum buffers.
  std::vector<std::pair<std::string, torch::Tensor>> fixed_tensors(int slot) const;
  // After an eager update: the gradients zeroed where graphs accumulate into them, dropped
  // otherwise.
  void clear_gradients();

  int index_;
  int num_stages_;
  torch::nn::Sequential module_;
  std::vector<models::Skips> skips_;  // per unit
  std::vector<std::string> unit_names_;
  std::vector<std::string> skip_inputs_, skip_outputs_;
  torch::Device device_;
  std::unique_ptr<DeviceStream> stream_;
  std::unique_ptr<optim::Optimizer> optimizer_;
  Objective objective_;
  uint64_t seed_;
  size_t first_unit_;
  torch::MemoryFormat memory_format_;
  Precision precision_;
  std::map<Key, Pending> in_flight_;
  std::map<int64_t, int> delay_;      // step -> delay D of its gradient, until its update
  int64_t last_update_step_ = -1;     // updates of all steps up to this one are applied
  bool stash_weights_ = false;
  std::function<double(int64_t)> lr_;
  size_t recompute_units_ = 0;
  std::vector<bool> writes_input_;  // per unit: models::writes_its_input
  std::vector<torch::Tensor> recompute_params_;   // the recomputed units' parameters
  std::vector<torch::Tensor> recompute_buffers_;  // and buffers
  struct Graphs;                  // src/exec/stage_graphs_impl.h
  std::unique_ptr<Graphs> graphs_;  // null: eager
};

}  // namespace stalepipe::exec
