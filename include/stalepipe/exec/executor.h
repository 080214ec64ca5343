// Executors run a schedule (schedule/schedule.h) over a pipeline's stages.
//
//   emulated - one thread runs every operation in schedule::global_order(). The reference:
//              the other executors must reproduce its parameters bit for bit on CPU.
//   threads  - one thread per partition, pipeline registers as bounded channels.
//   processes - one process (rank) per partition over c10d Gloo; see exec/processes.h.
//
// All executors share one worker loop (each worker walks its own operation list), so they
// differ only in how tensors travel between workers and in what runs concurrently.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <torch/types.h>

#include "stalepipe/exec/executor_kind.h"
#include "stalepipe/exec/stage.h"
#include "stalepipe/schedule/schedule.h"

namespace stalepipe::exec {

// One mini-batch as the first partition receives it.
struct Input {
  torch::Tensor x;       // [B, C, H, W] float
  torch::Tensor target;  // [B, ...]: any tensor the loss takes (class indices for the default)
  // The samples of the whole mini-batch when x is one replica's slice of it (the loss of each
  // slice counts by its share of them); 0: x is the whole mini-batch.
  int64_t batch_samples = 0;
  // x and target are in place on their device once this event has happened (a copy queued
  // ahead on another stream, LoaderSource); null: now.
  std::shared_ptr<const StreamEvent> ready = nullptr;
};

// Everything a segment run needs besides the stages.
struct SegmentContext {
  // Inputs for step t, called by the first worker in increasing step order, once per step.
  // An Input with an undefined x means the input ran out: the segment ends before step t,
  // exactly as with `stop` (the mini-batches in the pipeline finish).
  std::function<Input(int64_t step)> input;
  // Learning rate for the update of step t. Pure function; called from worker threads.
  std::function<double(int64_t step)> lr;
  // Called by the last worker with the loss of each step, in step order.
  std::function<void(int64_t step, const StepLoss&)> on_step;
  // The last worker leaves losses and metric counts on its device and reads them (one wait
  // for the device) every this many steps and at the segment's end; on_step then reports
  // those steps together. A loss that is not finite ends the segment (DivergedError naming
  // its step) within this many steps of it, so before the drain where a checkpoint could be
  // written. 1: at every step, where a CPU partition loses nothing by it.
  int64_t read_losses_every = 1;
  // When it becomes true, the first worker starts no new mini-batch; the ones already in the
  // pipeline finish (backward and update), so the stages end consistent. May be null.
  const std::atomic<bool>* stop = nullptr;
  // Intra-op threads for each worker (LibTorch/OpenMP); the emulator uses the same counts so
  // that results are bit-identical.
  std::vector<int> threads_per_worker;
  // Tracing (sim/trace.h: TraceRecorder::callback()). Called by the worker thread right after
  // each operation it executed (not for mini-batches cut off by `stop`), with the op's start
  // and end in seconds on the steady_clock's own scale (time_since_epoch); the receiver picks
  // its origin. Called concurrently from different workers. Null: no timing at all.
  std::function<void(int worker, const schedule::Op& op, double start_seconds, double end_seconds)>
      on_op;
  // Threads executor: called from a failing worker's thread (once per failing worker).
  // An `input` callback that blocks (waiting for data from another thread) must then return
  // promptly; what it returns is discarded. May be null.
  std::function<void()> on_abort;
};

struct SegmentResult {
  int64_t end_step = 0;  // first step not trained (schedule.end_step unless stopped)
  bool stopped = false;
};

class Executor {
 public:
  virtual ~Executor() = default;
  virtual std::string name() const = 0;
  // Runs the schedule over stages[0..K-1] (K = schedule.num_workers). Throws RuntimeError
  // naming the partition and mini-batch if any operation fails; the stages' in-flight state is
  // then cleared and their weights are those after the last completed update.
  virtual SegmentResult run(const schedule::Schedule& schedule, std::vector<Stage*>& stages,
                            const SegmentContext& context) = 0;
};

// SegmentContext::read_losses_every for a last partition on `device`: every step on the CPU,
// every 32 steps on a GPU (a NaN is caught within 32 steps, before the next drain).
int64_t default_read_losses_every(const torch::Device& device);


// kEmulated or kThreads. Throws UsageError for kProcesses, which needs a process group
// (make_processes_executor in exec/processes.h).
std::unique_ptr<Executor> make_executor(ExecutorKind kind);

}  // namespace stalepipe::exec
