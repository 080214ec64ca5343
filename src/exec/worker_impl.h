// The loop every executor runs for one worker: walk the worker's operations, moving tensors
// through a Links implementation. Private to src/exec.
#pragma once

#include <cstdint>
#include <exception>
#include <limits>
#include <string>

#include "stalepipe/common/error.h"
#include "stalepipe/exec/executor.h"

namespace stalepipe::exec::detail {

// A pipeline-register message. `stop` marks "no mini-batch from this step on".
struct Message {
  int64_t step = 0;
  int micro = 0;
  torch::Tensor tensor;
  torch::Tensor target;       // travels with the activation to the last worker
  int64_t batch_samples = 0;  // samples in the whole mini-batch (weights a micro-batch's loss)
  bool stop = false;
};

// How worker k exchanges messages with its neighbours. recv_* block until the message is
// there, and throw Cancelled if the pipeline is aborting.
class Links {
 public:
  virtual ~Links() = default;
  virtual Message recv_activation(int worker) = 0;  // from worker-1
  virtual void send_activation(int worker, Message message) = 0;  // to worker+1
  virtual Message recv_gradient(int worker) = 0;  // from worker+1
  virtual void send_gradient(int worker, Message message) = 0;  // to worker-1
};

// Thrown inside a worker when another worker failed; never reaches the user.
struct Cancelled : std::exception {
  const char* what() const noexcept override { return "pipeline cancelled"; }
};

// Runs worker k's operations. Returns the step at which the worker stopped taking new
// mini-batches (schedule.end_step if it was not stopped).
class WorkerLoop {
 public:
  WorkerLoop(const schedule::Schedule& schedule, int worker, Stage& stage, Links& links,
             const SegmentContext& context)
      : schedule_(schedule), worker_(worker), stage_(stage), links_(links), context_(context),
        cutoff_(schedule.end_step) {
    stage_.begin_segment(schedule, context.lr);
  }

  // Runs operation i of this worker (in program order); reports it to context.on_op if set.
  void run_op(size_t i);
  size_t num_ops() const { return schedule_.worker_ops[worker_].size(); }
  int64_t cutoff() const { return cutoff_; }
  int64_t current_step() const { return current_step_; }

 private:
  void execute(const schedule::Op& op);
  void input_arrived();
  Message next_input(int64_t step, int micro);
  void forward(int64_t step, int micro);
  void backward(int64_t step, int micro);

  const schedule::Schedule& schedule_;
  int worker_;
  Stage& stage_;
  Links& links_;
  const SegmentContext& context_;
  int64_t cutoff_;
  int64_t current_step_ = -1;
  double op_start_ = 0;  // start of the current op's compute, for context.on_op
  // The first worker's current mini-batch, split into micro-batches.
  std::vector<torch::Tensor> micro_x_, micro_target_;
  int64_t batch_samples_ = 0;
  StepLoss step_loss_;  // the last worker's sum over the micro-batches of the current step
};

// Sets the calling thread's intra-op thread count to the worker's (context.threads_per_worker),
// if one is given.
void use_worker_threads(const SegmentContext& context, int worker);

// Throws RuntimeError unless there is one stage per worker of the schedule.
void check_stages(const schedule::Schedule& schedule, const std::vector<Stage*>& stages);

// Adds "partition k, mini-batch t: " to an exception's message, keeping its kind.
[[noreturn]] void rethrow_with_context(std::exception_ptr error, int worker, int64_t step);

}  // namespace stalepipe::exec::detail
