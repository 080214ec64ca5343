// Timing simulator: predicts how a schedule runs on K workers from per-partition forward and
// backward times, without training anything.
//
// Discrete-event model: each worker runs its operations in program order (the schedule's
// lists); an operation starts when its worker is free and its message has arrived: F(t) on
// worker k needs F(t) on k-1 finished plus the message over the link (link.h: latency +
// bytes / bandwidth, the bytes being partition k-1's output for F(t)'s share of the
// mini-batch), B(t) on k needs B(t) on k+1 finished plus the gradient of partition k's output
// over the link (the last worker's B(t) and every U(t) need only the worker). Each direction
// of a link carries one message at a time, in the order they were sent; a message does not
// occupy either worker (copy engines overlap compute). Nothing else is shared: each
// partition owns its device, as in the paper's multi-GPU setup.
//
// Throughput: the steady state is measured between the completions of mini-batches
// first+2K and end-1-2K (completion of t = the end of the last operation of t on any worker),
// i.e. after the fill and before the drain, shortened to a whole number of 2(K-1)-step cycles
// (completions can alternate, e.g. K = 2 over a slow link); segments shorter than 4K+4 steps
// use the makespan.
// Memory per worker: in-flight activations (schedule::analyze's max_in_flight x activation
// bytes per mini-batch) + weights + optimizer state (gradient, plus the momentum buffer when
// momentum is used).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "stalepipe/schedule/schedule.h"
#include "stalepipe/sim/events.h"
#include "stalepipe/sim/link.h"

namespace stalepipe::partition {
struct Profile;
struct Plan;
}  // namespace stalepipe::partition

namespace stalepipe::sim {

// Per-partition costs (one entry per worker). Times in seconds; bytes per mini-batch.
struct PartitionCosts {
  std::vector<double> forward_seconds;
  std::vector<double> backward_seconds;
  std::vector<double> update_seconds;     // may be empty: updates take no time
  std::vector<int64_t> activation_bytes;  // kept per mini-batch in flight; may be empty
  std::vector<int64_t> parameter_bytes;   // may be empty
  // Of activation_bytes, what recomputation keeps for one mini-batch only (perf/memory.h R_k);
  // may be empty.
  std::vector<int64_t> recomputed_bytes;
  // Per mini-batch, what the link after partition k carries forward (and its gradient back):
  // the partition's output and the skip tensors that partition k+1 pops (a skip from further
  // back is charged to the link into its consumer). May be empty: messages then cost the
  // latency only.
  std::vector<int64_t> output_bytes;
};

// From a profile and a plan of the same model: sums of the units' forward and backward
// medians (a unit the plan recomputes adds its forward to the backward); activations = the
// partition's inputs (the register and the skip tensors it receives, held by its graph) + the
// units' kept bytes; of
// those, the recomputed units' kept bytes less the last one's output; parameter bytes; the
// output bytes of the partition's last unit. Throws
// UsageError if the profile does not match the plan.
PartitionCosts partition_costs(const partition::Profile& profile, const partition::Plan& plan);

// Replicas (R copies of the pipeline, each on its slice of every mini-batch: the costs are
// one slice's): every replica runs the same schedule at the same times, so one replica is
// replayed, and before each update its workers wait for their partition's gradient sum. The
// sum is an all-gather over replica_link, R-1 transfers of the partition's parameter bytes
// (latency + bytes / bandwidth each); it streams while the last backward of the step runs,
// in buckets of kGradientBucketBytes (common/slices.h), and the bucket of the first layers
// starts only when that backward ends. So it ends at the later of: the backward's start plus
// the whole transfer, the backward's end plus one bucket's transfer. A partition's replicas
// have a link of their own.
struct SimulateOptions {
  LinkModel link;               // between neighbouring workers, both directions; default: ideal
  int64_t batch_size = 128;     // for images per second: the whole mini-batch, every replica's slice
  bool momentum = true;         // optimizer keeps a momentum buffer (one more copy of weights)
  int replicas = 1;
  LinkModel replica_link;       // between the replicas of a partition; default: ideal
};

struct WorkerPrediction {
  double busy_seconds = 0;
  double bubble_fraction = 0;         // idle share of the whole makespan (fill and drain included)
  double steady_bubble_fraction = 0;  // idle share of the steady state: 1 - busy per step / period
  int max_in_flight = 0;
  int64_t activation_bytes = 0;       // max_in_flight x per-mini-batch activations
  int64_t weight_bytes = 0;
  int64_t optimizer_bytes = 0;        // gradient (+ momentum buffer)
  int64_t memory_bytes() const { return activation_bytes + weight_bytes + optimizer_bytes; }
};

struct Prediction {
  std::vector<OpEvent> events;         // every op with its predicted span, in start order per worker
  double makespan_seconds = 0;         // first start to last end
  double steady_step_seconds = 0;      // time between consecutive mini-batch completions
  double steady_images_per_second = 0; // batch_size / steady_step_seconds
  double images_per_second = 0;        // whole segment: steps x batch_size / makespan
  std::vector<WorkerPrediction> workers;
};

// Throws UsageError if the costs do not have one entry per worker or are negative, a link has
// a negative latency or bandwidth, or replicas < 1, and RuntimeError if the schedule
// deadlocks. With replicas, the events include each exposed gradient sum (OpEvent::sum).
Prediction simulate(const schedule::Schedule& schedule, const PartitionCosts& costs,
                    const SimulateOptions& options = {});

// A text report: throughput, then one line per worker (F ms, B ms, busy, bubble, memory MB).
std::string format_prediction(const Prediction& prediction, const PartitionCosts& costs);

}  // namespace stalepipe::sim
