// Memory of a stale pipeline, predicted from the schedule and measured per partition (the
// paper's Table 9 and its accounting, docs/performance.md).
//
// Prediction for partition k (bytes), from a profile (partition/profile.h) and the schedule:
//   activations = max_in_flight_k x A_k, A_k = the partition's input + its units' kept bytes
//                 per mini-batch (sim::partition_costs), max_in_flight_k from
//                 schedule::analyze (2(K-k) for k < K, 1 for the last);
//   weights     = W_k, trainable parameter bytes;
//   optimizer   = W_k for the gradient, + W_k for the momentum buffer when momentum is used.
// Weight stashing (PipeDream) would keep one more weight copy per mini-batch in flight beyond
// the first: (max_in_flight_k - 1) x W_k on top.
// Recomputation (PipelineOptions::recompute) keeps R_k of A_k, the recomputed units' kept bytes
// less their output, for one mini-batch only: the one being recomputed, whose other
// activations its backward has freed by then:
//   activations = (max_in_flight_k - 1) x (A_k - R_k) + max(A_k - R_k, R_k).
//
// Table 9 accounting (memory increase of pipelined over non-pipelined training), as the
// paper's columns: non-pipelined = W + A where W = sum W_k and A = sum A_k (one mini-batch's
// activations, weights once); this scheme adds sum_k (max_in_flight_k - 1) x A_k; stashing
// adds that plus sum_k (max_in_flight_k - 1) x W_k.
//
// Measurement (measure_partition_peaks): each partition alone on the calling thread, as its
// worker would run it: a Stage of the partition's units runs the worker's operation list of
// the stale schedule, with synthetic messages in place of its neighbours' (a random input of
// the register's shape, a random output gradient). Every CPU allocation made by LibTorch's
// default CPU allocator on this thread is counted through c10's memory-reporting hook
// (c10::MemoryReportingInfoBase under c10::DebugInfoGuard, the one the autograd profiler's
// memory events use); the peak of live bytes is taken. The partition's parameters are built
// inside the measured scope, so the peak includes weights, gradients, momentum, activations
// in flight and the temporaries of the op that reached the peak. One intra-op thread, so no
// allocation escapes to an OpenMP worker thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "stalepipe/api/options.h"

namespace stalepipe::perf {

struct PartitionMemory {
  int max_in_flight = 0;
  int64_t activation_bytes = 0;   // A_k, per mini-batch
  int64_t weight_bytes = 0;       // W_k
  int64_t optimizer_bytes = 0;    // gradient (+ momentum)
  int64_t recomputed_bytes = 0;   // R_k (0 without recomputation)
  int64_t predicted_bytes = 0;    // activations as above + W_k + optimizer
  int64_t stash_bytes = 0;        // (max_in_flight - 1) x W_k
  int64_t measured_peak_bytes = -1;  // -1: not measured
};

struct MemoryTable {
  int64_t batch_size = 0;
  double activation_mb_per_sample = 0;  // A / batch, MB = 1e6 bytes as the paper
  double weight_mb = 0;                 // W
  int64_t non_pipelined_bytes = 0;      // W + A
  int64_t scheme_added_bytes = 0;       // sum (in_flight - 1) A_k
  int64_t stash_added_bytes = 0;        // scheme_added + sum (in_flight - 1) W_k
  double scheme_percent = 0;            // 100 x scheme_added / non_pipelined
  double stash_percent = 0;
  std::vector<PartitionMemory> partitions;
};

// The prediction above from per-partition numbers (one entry each, same length; in-flight
// counts >= 1; recomputed_bytes empty for none, else R_k <= A_k). The Table 9 columns are the
// paper's scheme, without recomputation. Throws UsageError on mismatched lengths or values.
MemoryTable predict_memory(const std::vector<int64_t>& activation_bytes,
                           const std::vector<int64_t>& weight_bytes,
                           const std::vector<int>& max_in_flight, bool momentum,
                           int64_t batch_size, const std::vector<int64_t>& recomputed_bytes = {});

struct MemoryOptions {
  // The run measured, from the one option tree: its model, seed, batch size, ppv (registers:
  // at least one), layout (kAuto decided for the model) and recompute (of the partitions; the
  // non-pipelined peak is measured without). The tree's defaults throughout.
  Options training;
  int64_t channels = 1;  // input channels
};

struct MemoryReport {
  MemoryOptions options;
  MemoryTable predicted;                 // measured_peak_bytes filled per partition
  int64_t measured_non_pipelined_bytes = 0;  // peak of the whole model as one partition
  // sum of partition peaks - non-pipelined peak: with one device per partition, each must hold
  // its own peak, so the peaks add up (temporaries included).
  int64_t measured_scheme_added_bytes = 0;
  // Of the computed column's base: the non-pipelined peak less gradient and momentum (2W).
  double measured_scheme_percent = 0;
  // The pipeline's partition peaks summed over the non-pipelined peak (1.0: no extra memory).
  double measured_peak_ratio = 0;
  std::string layout;  // the layout measured: "nchw" or "channels-last"
  // The two operating points side by side, partition peaks summed: the stale pipeline without
  // recomputation, and with it through `recompute_layer` (options.recompute, or where none is
  // given the first register's layer: all of partition 1, the least memory at this cut).
  int recompute_layer = 0;
  int64_t measured_stale_bytes = 0;
  int64_t measured_recompute_bytes = 0;
  // The skip tensors that cross a register (docs/design.md, "Skip tensors"), each counted in
  // its consumer's activations: its bytes per mini-batch (profiled) and the most mini-batches
  // of it alive at once in the stale schedule (schedule::max_skip_in_flight).
  struct Skip {
    std::string name;
    int from = 0, to = 0;  // partitions, 0-based
    int64_t bytes = 0;
    int held = 0;
  };
  std::vector<Skip> skips;
};

// Peak bytes of each partition of model/ppv running its worker's ops of the stale schedule
// (momentum 0.9), measured as above. An empty ppv measures the whole model (sequential).
// Throws UsageError for bad options, RuntimeError if LibTorch's allocator reports nothing
// (the hook is not available in this build).
std::vector<int64_t> measure_partition_peaks(const MemoryOptions& options, const std::vector<int>& ppv);

// Profile (for A_k) + prediction + measurement of every partition and of the whole model.
MemoryReport memory_report(const MemoryOptions& options);

// Text table: per partition in-flight, A_k, W_k, predicted, measured, stashing; then the
// Table 9 line (computed and measured) and the measured peaks of non-pipelined training, the
// stale pipeline and the pipeline recomputing, side by side. Ends with a newline.
std::string format_memory_report(const MemoryReport& report);
std::string to_json(const MemoryReport& report);

}  // namespace stalepipe::perf
