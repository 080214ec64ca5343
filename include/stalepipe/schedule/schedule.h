// Schedules: what each pipeline worker does, in which order, as plain data.
//
// A schedule covers the mini-batches ("steps") [first_step, end_step) of one *segment*: the
// pipeline is empty when a segment starts and drained when it ends. For each worker k
// (0-based here; partition k+1 in the paper's numbering) it lists the operations in program
// order:
//   kForward(t)  - forward of mini-batch t through partition k (receives its input from
//                  worker k-1, or from the data for k = 0; sends its output to worker k+1;
//                  the last worker also computes the loss);
//   kBackward(t) - backward of t (receives the output gradient from worker k+1, except the
//                  last worker, which starts from its loss; sends the input gradient to k-1);
//   kUpdate(t)   - applies the gradient of t to partition k's weights at once.
// Messages are implied: F(t) on k needs F(t) on k-1; B(t) on k needs B(t) on k+1.
// With micro-batches (GPipe), forwards and backwards carry a micro-batch index m in
// [0, micro_batches): mini-batch t is split into micro_batches slices along the batch
// dimension, F(t.m) and B(t.m) move one slice, and U(t) applies the gradient summed over all
// slices of t.
//
// Every executor (emulated, threads, processes) runs exactly these lists, so their results
// agree. The properties users care about - staleness d_k, activations held at once - are
// derived from the lists by analyze(), never assumed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace stalepipe::schedule {

enum class OpKind { kForward, kBackward, kUpdate };

struct Op {
  OpKind kind;
  int64_t step;
  int micro = 0;  // micro-batch of `step` (always 0 for kUpdate and without micro-batches)
  bool operator==(const Op& other) const {
    return kind == other.kind && step == other.step && micro == other.micro;
  }
};

enum class ScheduleKind {
  kSequential,  // no pipelining: F(t) B(t) U(t) on every worker, one mini-batch in the pipe
  kStale,       // the paper's PPL-SGD: see make_stale()
  kGPipe,       // micro-batches, flush before the update: see make_gpipe()
  kOneFOneB,    // PipeDream's 1F1B with weight stashing: see make_one_f_one_b()
  kHybrid,      // kStale up to a switch point, kSequential after it (the training loop
                // picks one of the two per segment; make_schedule refuses kHybrid itself)
};

struct Schedule {
  ScheduleKind kind = ScheduleKind::kSequential;
  int num_workers = 1;
  int64_t first_step = 0;
  int64_t end_step = 0;                      // exclusive
  int micro_batches = 1;                     // slices per mini-batch (GPipe); 1 otherwise
  // The backward of t uses the weights its forward used (PipeDream's weight stashing) instead
  // of the partition's current weights (the paper's scheme).
  bool stash_weights = false;
  std::vector<std::vector<Op>> worker_ops;   // [worker] -> ops in program order
};

// Sequential (non-pipelined) training over K partitions: every worker runs F(t) B(t) U(t);
// the data dependencies serialise the workers, so no weight is ever stale.
Schedule make_sequential(int num_workers, int64_t first_step, int64_t end_step);

// The canonical stale schedule (docs/design.md, "The stale schedule"). Worker k (0-based)
// of K first runs 2(K-1-k) forwards, then per cycle one backward, its update and one forward,
// then drains. The last worker runs F B U back to back. So the forward of t on worker k lacks
// the updates of the d = 2(K-1-k) - 1 mini-batches before it (none on the last worker).
Schedule make_stale(int num_workers, int64_t first_step, int64_t end_step);

// GPipe (Huang et al. 2019): every worker runs the forwards of all micro-batches of t, then
// their backwards in reverse order, then U(t). The pipeline is flushed before every update,
// so no weight is stale: the result equals non-pipelined training on the whole mini-batch
// (up to floating-point summation order, and except batch norm, which normalises each slice).
Schedule make_gpipe(int num_workers, int64_t first_step, int64_t end_step, int micro_batches);

// 1F1B with weight stashing (PipeDream, Narayanan et al. 2019): worker k (0-based) first runs
// K-k forwards, then per cycle one backward, its update and one forward. Forwards compute with
// weights that miss the updates of the K-k-1 mini-batches before them, as in PPL-SGD, but each
// backward uses the stashed weights of its own forward, so worker k holds up to K-k weight
// versions.
Schedule make_one_f_one_b(int num_workers, int64_t first_step, int64_t end_step);

// micro_batches applies to kGPipe only (must be 1 otherwise). Throws UsageError for kHybrid.
Schedule make_schedule(ScheduleKind kind, int num_workers, int64_t first_step, int64_t end_step,
                       int micro_batches = 1);

// "sequential" | "stale" | "gpipe" | "1f1b-stash" | "hybrid"; anything else throws UsageError
// naming `field` (the option the name came from) and the allowed names.
ScheduleKind schedule_from_name(const std::string& name,
                                const std::string& field = "schedule");
std::string to_string(ScheduleKind kind);
std::string to_string(const Op& op);  // "F12", "B12", "U12"; "F12.3" for micro-batch 3

// One operation of the whole pipeline.
struct GlobalOp {
  int worker;
  Op op;
};

// A single total order of all operations that respects each worker's program order and the
// messages between workers. Deterministic: at each point the lowest-numbered worker whose
// next operation is ready runs it. This is the emulated executor's order. Throws
// RuntimeError if the schedule can deadlock (no worker can proceed).
std::vector<GlobalOp> global_order(const Schedule& schedule);

struct WorkerStats {
  // The largest number of updates of earlier mini-batches that a forward of this worker
  // misses (d_k): the forward of t runs before U(t-d_k) .. U(t-1).
  int staleness = 0;
  // The largest number of mini-batches whose activations this worker holds at once (forward
  // done, backward not yet). With micro-batches, in mini-batch units rounded up.
  int max_in_flight = 0;
  // The largest number of copies of the partition's weights held at once: 1, plus the stashed
  // versions that in-flight backwards still need when the schedule stashes weights.
  int max_weight_versions = 1;
};

struct ScheduleStats {
  std::vector<WorkerStats> workers;
};

// Derives the per-worker staleness and in-flight counts from the operation lists.
ScheduleStats analyze(const Schedule& schedule);

// The most mini-batches (micro-batches rounded up) whose skip tensor from worker `from` to a
// later worker `to` exists at once, in the global order: from `from`'s forward of t, which
// sends it, to `to`'s backward of t, which frees it and sends its gradient back. A skip over
// many partitions is held for most of the pipeline's depth.
int max_skip_in_flight(const Schedule& schedule, int from, int to);

// Staleness as it ran: per worker, the largest delay any forward had (the updates of earlier
// mini-batches it missed; a segment starts with every earlier update applied, so a short
// segment never reaches the steady state's d_k) and how many forwards ran at a delay of at
// least full_delay[k]. Micro-batches of one step count as one forward.
struct StalenessTally {
  std::vector<int> max_delay;             // per worker
  std::vector<int64_t> forwards;          // per worker
  std::vector<int64_t> forwards_at_full;  // per worker: delay >= full_delay[k]
};
// Adds the forwards of steps [schedule.first_step, end_step) to `tally` (sized on first use);
// returns this segment's largest delay per worker.
std::vector<int> tally_staleness(const Schedule& schedule, int64_t end_step,
                                 const std::vector<int>& full_delay, StalenessTally& tally);

// A space-time table for `stalepipe schedule` and docs/design.md: one column per worker, one
// row per time slot, assuming every forward and backward takes one slot (equal partitions).
// Shows at most max_rows rows.
std::string format_schedule_table(const Schedule& schedule, int max_rows = 200);

}  // namespace stalepipe::schedule
