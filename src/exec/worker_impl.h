// The loop every executor runs for one worker: walk the worker's operations, moving messages
// along the pipeline's routes through a Links implementation (links_impl.h). Private to
// src/exec.
#pragma once

#include <cstdint>
#include <exception>
#include <limits>
#include <map>
#include <string>

#include <torch/arg.h>

#include "stalepipe/common/error.h"
#include "links_impl.h"
#include "stalepipe/exec/executor.h"

namespace stalepipe::exec::detail {

class ReplicaPeers;

// Thrown inside a worker when another worker failed; never reaches the user.
struct Cancelled : std::exception {
  const char* what() const noexcept override { return "pipeline cancelled"; }
};

// What one worker's loop works with: worker `worker` of `schedule` runs on `stage`, its
// messages going through `links` along `wiring`'s routes, under `context`; `peers`: the other
// replicas of its partition (replicas_impl.h), null with one. Every pointer but peers must be
// set and outlive the loop.
struct WorkerLoopOptions {
  using SchedulePtr = const schedule::Schedule*;
  using WiringPtr = const Wiring*;
  using StagePtr = Stage*;
  using LinksPtr = Links*;
  using ContextPtr = const SegmentContext*;
  using PeersPtr = ReplicaPeers*;
  TORCH_ARG(SchedulePtr, schedule) = nullptr;
  TORCH_ARG(WiringPtr, wiring) = nullptr;
  TORCH_ARG(int, worker) = 0;
  TORCH_ARG(StagePtr, stage) = nullptr;
  TORCH_ARG(LinksPtr, links) = nullptr;
  TORCH_ARG(ContextPtr, context) = nullptr;
  TORCH_ARG(PeersPtr, peers) = nullptr;
};

// Runs worker k's operations. Returns the step at which the worker stopped taking new
// mini-batches (schedule.end_step if it was not stopped).
class WorkerLoop {
 public:
  explicit WorkerLoop(const WorkerLoopOptions& options);

  // Runs operation i of this worker (in program order), on the stage's stream; reports it to
  // context.on_op if set.
  void run_op(size_t i);
  // Runs every operation, then finish().
  void run_all();
  // Reads the losses still on the device and waits for the stage's stream: the segment's work
  // is done when this returns (with read_losses(), the only waits for a device in a segment).
  void finish();
  size_t num_ops() const { return schedule_.worker_ops[worker_].size(); }
  int64_t cutoff() const { return cutoff_; }
  int64_t current_step() const { return current_step_; }

 private:
  void execute(const schedule::Op& op);
  void input_arrived();
  Message next_input(int64_t step, int micro);
  // The next message of `route`, its tensors readable on this worker's stream.
  Message receive(const Route* route);
  void send(const Route* route, Message message);
  void forward(int64_t step, int micro);
  void backward(int64_t step, int micro);
  // Receives the next message of each route into `into` (tensors appended), checking that it
  // belongs to `op`'s mini-batch.
  void receive_all(const std::vector<const Route*>& routes, const schedule::Op& op, Message& into);
  // Sends to each route a message of (step, micro) with the tensors of `all` it names.
  void send_all(const std::vector<const Route*>& routes, Message& all);
  // The last worker: reports every loss held to context.on_step, in step order; throws
  // DivergedError at the first that is not finite.
  void read_losses();

  const schedule::Schedule& schedule_;
  int worker_;
  Stage& stage_;
  Links& links_;
  // This worker's routes in the chain (null at its ends), and those of skip tensors to and
  // from workers further away.
  const Route* activation_in_ = nullptr;
  const Route* activation_out_ = nullptr;
  std::vector<const Route*> skips_in_, skips_out_;
  std::vector<const Route*> gradients_in_, gradients_out_;
  const SegmentContext& context_;
  ReplicaPeers* peers_;
  int64_t cutoff_;
  int64_t current_step_ = -1;
  double op_start_ = 0;  // start of the current op's compute, for context.on_op
  // The first worker's current mini-batch, split into micro-batches.
  std::vector<torch::Tensor> micro_x_, micro_target_;
  int64_t batch_samples_ = 0;
  // The last worker's losses not yet read, a micro-batch each, in order, with their steps.
  std::vector<PendingLoss> losses_;
  std::vector<int64_t> loss_steps_;
  // With replicas: backwards run so far of each step whose gradient is not complete.
  std::map<int64_t, int> backwards_;
};

// Sets the calling thread's intra-op thread count to the worker's (context.threads_per_worker),
// if one is given.
void use_worker_threads(const SegmentContext& context, int worker);

// Throws RuntimeError unless there is one stage per worker of the schedule.
void check_stages(const schedule::Schedule& schedule, const std::vector<Stage*>& stages);

// After a failure: drops every partition's mini-batches in flight and the gradients their
// backwards left (Stage::clear_in_flight).
void clear_in_flight(const std::vector<Stage*>& stages);

// Adds "[replica r, ]partition k, mini-batch t: " to an exception's message, keeping its kind
// (replica < 0: one pipeline).
[[noreturn]] void rethrow_with_context(std::exception_ptr error, int worker, int64_t step, int replica = -1);

}  // namespace stalepipe::exec::detail
