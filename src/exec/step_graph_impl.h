// A recorded piece of a partition's work that can run again: a CUDA graph, or, in tests, a
// stand-in that behaves like one on the CPU. Private to src/exec (exec::Stage's graphs,
// docs/design.md "CUDA graphs").
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <torch/types.h>

namespace stalepipe::exec::detail {

// What a graph's body leaves where, looked up after each run of the body. A CUDA graph
// ignores it (a replay writes where the capture wrote by construction); the stand-in needs it
// to behave as a replay.
struct GraphResults {
  // The variables the body assigns its results to (outputs, losses, counts).
  std::function<std::vector<torch::Tensor*>()> outputs;
  // Tensors a replay writes in place at the address they had at capture (gradients that
  // accumulate, parameters and optimizer buffers), each with its name for messages.
  std::function<std::vector<std::pair<std::string, torch::Tensor>>()> fixed;
};

class StepGraph {
 public:
  virtual ~StepGraph() = default;
  // Records `body`'s work and runs it once. The body must leave its results in tensors that
  // outlive the graph (a replay writes them again, at the same addresses); `results` says
  // which.
  virtual void capture(const std::function<void()>& body, const GraphResults& results) = 0;
  // Runs the recorded work again, reading what was written into the captured inputs since.
  virtual void replay() = 0;
};

// A CUDA graph on the calling thread's current stream of the current device (a non-default
// one: the stage's), captured in thread-local mode (other partitions' threads go on queueing
// work meanwhile). Its memory pool is `share_pool_of`'s (a graph made here and captured
// before; null: a pool of its own), which only a graph always replayed right after that one
// may share. Where the capture fails (an operation that waits for the host, a CPU tensor),
// throws UsageError "<what>: <the error>", leaving no capture open. Only in a CUDA build
// (kCudaStreams); elsewhere throws UsageError.
std::unique_ptr<StepGraph> make_cuda_graph(const std::string& what, StepGraph* share_pool_of = nullptr);

// Whether CUDA graphs' captures, replays and destructions take their process-wide lock
// (step_graph.cpp says why they must); on by default. Off only for the negative control that
// shows what the lock prevents (scripts/gpu-check.sh lock). Returns the previous setting.
bool set_graph_lock_for_tests(bool on);

// The CPU stand-in for tests (exec::GraphMode::kReplayForTests). capture() runs the body and
// keeps the memory of its results; replay() runs the body again, copies each new result into
// that memory and points the variable's new tensor at it (its autograd graph stays: a backward
// that runs again needs it), so every holder of an earlier result sees the values a real
// replay would have written over it. A fixed tensor found at another address after a run
// throws RuntimeError "<what>: <name> ...", as a real replay would have written the old one.
// A result of another shape than at capture throws RuntimeError too. What a real capture
// freezes besides memory (host values, random offsets) is not exercised.
std::unique_ptr<StepGraph> make_replay_graph(const std::string& what);

// Where the default generator that a graph of this kind freezes stands: the device's CUDA
// generator's philox offset (`cuda`), or else the default CPU generator's state (the stand-in's
// device). Two equal marks: nothing drew random numbers from it in between. Only in a CUDA
// build for `cuda`.
torch::Tensor generator_mark(bool cuda, const torch::Device& device);

// Autograd from each root that needs a gradient and, where `grads` holds one per root, is given
// one (empty `grads`: scalar roots, gradient 1). A root may be a leaf (a recomputed unit's
// output or stash, an input stashed unchanged): backward fills its grad. One that needs no
// gradient (data the first stage stashed) has no graph to run. It runs on the calling thread
// (common/backward_impl.h). (stage.cpp; the eager passes and the backward graphs run this.)
void backward_from(const std::vector<torch::Tensor>& roots, const std::vector<torch::Tensor>& grads);

}  // namespace stalepipe::exec::detail
