// A recorded piece of a partition's work that can run again: a CUDA graph, or, in tests, a
// stand-in that runs the work again on the CPU. Private to src/exec (exec::Stage's graphs,
// docs/design.md "CUDA graphs").
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <torch/types.h>

namespace stalepipe::exec::detail {

class StepGraph {
 public:
  virtual ~StepGraph() = default;
  // Records `body`'s work and runs it once. The body must leave its results in tensors that
  // outlive the graph (a replay writes them again, at the same addresses).
  virtual void capture(const std::function<void()>& body) = 0;
  // Runs the recorded work again, reading what was written into the captured inputs since.
  virtual void replay() = 0;
};

// A CUDA graph on the calling thread's current stream of the current device (a non-default
// one: the stage's), captured in thread-local mode (other partitions' threads go on queueing
// work meanwhile) into a memory pool of its own. Where the capture fails (an operation that
// waits for the host, a CPU tensor), throws UsageError "<what>: <the error>", leaving no capture
// open. Only in a CUDA build (kCudaStreams); elsewhere throws UsageError.
std::unique_ptr<StepGraph> make_cuda_graph(const std::string& what);

// The test double of the plumbing around a graph, for CPU tests only: capture() keeps the body
// and runs it, replay() runs it again. It records nothing: with it, the static inputs and
// outputs, slots and in-place gradients around the graphs run on the CPU, so tests can compare
// that plumbing with eager training; what a real capture freezes is not exercised.
std::unique_ptr<StepGraph> make_rerun_graph();

// Autograd from each root that needs a gradient and, where `grads` holds one per root, is given
// one (empty `grads`: scalar roots, gradient 1). A root may be a leaf (a recomputed unit's
// output or stash, an input stashed unchanged): backward fills its grad. One that needs no
// gradient (data the first stage stashed) has no graph to run. (stage.cpp; the eager passes
// and the backward graphs run this.)
void backward_from(const std::vector<torch::Tensor>& roots, const std::vector<torch::Tensor>& grads);

}  // namespace stalepipe::exec::detail
