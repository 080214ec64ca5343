// `stalepipe bench`: how fast the stale pipeline trains next to non-pipelined training and
// next to what the profile says it could do, measured in one run (docs/performance.md).
//
// Configurations, each on a freshly built model with the same seed, driven through the real
// path (exec::Pipeline + Executor::run over a schedule):
//   one_thread     non-pipelined (1 partition, sequential schedule), 1 intra-op thread;
//   all_threads    non-pipelined, `threads` intra-op threads;
//   pipeline       stale schedule, threads executor, K workers with threads/K threads each;
//   emulated       the same stale pipeline on the emulated executor (one op at a time);
//   same_threads   non-pipelined with threads/K threads, measured only when threads/K is
//                  neither 1 nor `threads` (the emulator's fair comparison);
//   replicas       with PipelineOptions::replicas R > 1: R copies of the stale pipeline on the
//                  threads executor, R x K workers with threads / (R x K) threads each;
//   side_by_side   K independent non-pipelined models trained at once on K threads with
//                  threads/K threads each: the pipeline's workers without the pipeline. The
//                  summed rate is what the hardware gives K such workers (they contend for
//                  caches and memory bandwidth), the ceiling of the pipeline's rate.
// Each runs warmup_steps mini-batches as one segment, then `steps` as a second segment. The
// rate reported is the steady state of the second segment: the last worker's loss
// completions from index 2K to steps-1-2K (skipping fill and drain, as sim::simulate's
// steady state does): batch x intervals / time. The whole-segment rate is kept too.
// With rounds > 1 every configuration runs once per round, in the same order each round, and
// each rate is the median over the rounds: on a 2-vCPU VM one short measurement varies by
// +-10-20%, and alternating spreads a slow spell over all configurations instead of one.
// Inputs: a few pre-made batches of synthetic data (data/synthetic.h), padded to 32x32 and
// normalised as the trainer does, reused in turn, so data loading is not measured.
//
// Before anything is reported as a speed, correctness: the pipeline and emulated runs must end
// with bit-identical weights (they run the same schedule from the same seed), and every
// configuration's losses must be finite.
//
// With seconds > 0, bench times the one configuration of `training` instead, as PyTorch's peer
// times its own on a GPU (perf/steady.h, run_steady).
//
// Predictions from one profile (partition/profile.h) with threads/K threads per unit:
//   bound      = batch / max_k (forward + backward of partition k): the steady-state pace of
//                the slowest partition, ignoring updates and register copies;
//   simulated  = sim::simulate's steady images/s of the stale schedule with the same costs.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <torch/arg.h>

#include "stalepipe/api/options.h"
#include "stalepipe/partition/balance.h"

namespace stalepipe::sim {
struct PartitionCosts;
}

namespace stalepipe::perf {

struct BenchOptions {
  // Partitions 2 instead of the tree's 0 (one partition): bench measures a pipeline.
  BenchOptions();
  // The run measured, from the one option tree: its model, seed, batch size, ppv (registers;
  // empty: chosen for `partitions`, 2..64, by `balance`), threads (cores in all; 0: all),
  // layout (of every configuration) and recompute (of the pipelined configurations; the
  // baselines train plainly). Every configuration trains with a constant lr of 0.01.
  TORCH_ARG(Options, training) = {};
  TORCH_ARG(int64_t, channels) = 1;         // input channels (1: Fashion-MNIST, 3: CIFAR-10)
  TORCH_ARG(int64_t, warmup_steps) = 3;     // >= 0
  TORCH_ARG(int64_t, steps) = 20;           // >= 4K + 2 (steady state needs fill and drain cut)
  TORCH_ARG(int, rounds) = 1;               // 1..100: alternated runs of every configuration
  // > 0: the timed seconds of run_steady (perf/steady.h), which alone reads the devices,
  // precision and CUDA graphs of `training`; 0: the configurations above, on the CPU.
  TORCH_ARG(double, seconds) = 0;
};

// One configuration's result.
struct Measurement {
  std::string key;  // one_thread | all_threads | pipeline | emulated | same_threads | side_by_side
  std::string label;                  // human-readable, e.g. "stale pipeline, threads, 2 x 1 thread"
  std::string executor;               // emulated | threads
  int partitions = 1;
  int replicas = 1;
  std::vector<int> threads_per_worker;
  int64_t steps = 0;                  // measured steps (after warm-up)
  double images_per_second = 0;       // steady state (see above); the median over the rounds
  double segment_images_per_second = 0;  // steps x batch / segment wall time (fill, drain in)
  double final_loss = 0;              // last measured step's loss (finite)
  std::vector<double> round_images_per_second;  // each round's steady rate, in round order
};

// A speed target: value must lie in [low, high].
struct TargetCheck {
  std::string name;         // e.g. "pipeline / non-pipelined 1 thread"
  double value = 0;
  double low = 0, high = 0; // high = +inf for one-sided targets
  bool measured = true;     // false: a rate was not measured (0); not a pass, not a miss
  bool pass() const { return measured && value >= low && value <= high; }
};

// The rates the ratios come from (images/s; 0 = not measured).
struct BenchRates {
  double one_thread = 0;
  double all_threads = 0;
  double pipeline = 0;
  double emulated = 0;
  double non_pipelined_same_threads = 0;  // non-pipelined at threads/K threads per worker
  double bound = 0;
  double simulated = 0;
  double processes = 0;       // `train --executor processes` on K ranks (bench --processes)
  double threads_train = 0;   // the same `train` run with the threads executor
  double side_by_side = 0;    // K independent non-pipelined runs at once, summed
  // The stale pipeline at the best cut that no skip tensor crosses (a ResNet's block
  // boundaries), measured where the chosen cut has a skip tensor cross a register.
  double skip_free_cut = 0;
  // PipelineOptions::replicas R > 1: R copies of the stale pipeline (threads executor, R x K
  // workers at threads / (R x K) threads), and the simulator's rate for them (a profile of one
  // replica's slice; where the workers outnumber the cores, each op slowed by that ratio).
  double replicas = 0;
  double simulated_replicas = 0;
  // Each of the alternated runs behind the two rates above (their medians).
  std::vector<double> processes_runs, threads_train_runs;
};

struct BenchRatios {
  double pipeline_vs_one_thread = 0;
  double pipeline_vs_all_threads = 0;
  double pipeline_vs_bound = 0;
  double emulated_vs_non_pipelined = 0;  // against non_pipelined_same_threads
  double simulated_vs_measured = 0;      // simulated / pipeline
  double processes_vs_threads = 0;
  // Not targets: how far the hardware lets K workers go, and how much of it the pipeline uses.
  double side_by_side_vs_one_thread = 0;
  double pipeline_vs_side_by_side = 0;
  double pipeline_vs_skip_free_cut = 0;  // the chosen cut against the best skip-free one
  double replicas_vs_pipeline = 0;
  double simulated_vs_measured_replicas = 0;
};

// Ratios of measured rates; a ratio whose denominator or numerator is 0 is 0.
BenchRatios compute_ratios(const BenchRates& rates);

// The speed targets on the ratios: pipeline >= 1.8 x one thread, >= 0.9 x bound, >= 1.0 x
// all threads; emulated within 5% of non-pipelined; simulated within 15% of measured;
// processes >= 0.9 x threads; with replicas, simulated within 15% of measured. A target whose
// ratio is 0 is reported as not measured.
std::vector<TargetCheck> check_targets(const BenchRatios& ratios);

// batch / max_k (forward_k + backward_k) in images/s. Throws UsageError for empty or
// mismatched costs, batch < 1, or a partition with zero time.
double pipeline_bound(const sim::PartitionCosts& costs, int64_t batch_size);

// Steady-state rate from the completion times (seconds, in step order) of a segment of a
// K-partition pipeline: batch x (last - first) / (t[last] - t[first]) with first = 2K,
// last = n-1-2K. Throws UsageError if n < 4K + 2 or the times do not increase.
double steady_images_per_second(const std::vector<double>& completion_seconds, int partitions,
                                int64_t batch_size);

struct BenchReport {
  BenchOptions options;
  std::string ppv;              // the PPV measured, "7"
  // The best cut by the profile among those no skip tensor crosses (a ResNet's block
  // boundaries), for a model with skip tensors ("" otherwise); measured beside `ppv` where
  // they differ.
  std::string skip_free_ppv;
  std::string layout;           // the layout measured, "nchw" or "channels-last"
  int partitions = 0;
  int threads = 0;              // cores used in all
  int threads_per_worker = 0;   // threads / K, at least 1
  std::vector<double> partition_ms;  // profile: forward + backward per partition
  std::vector<Measurement> measurements;
  bool executors_agree = false; // pipeline and emulated weights bit-identical
  BenchRates rates;
  BenchRatios ratios;
  std::vector<TargetCheck> targets;
};

// Runs the configurations above. `log` (may be null) gets one line per phase. Throws
// UsageError for bad options (naming the option), RuntimeError if a run fails or diverges.
// Leaves the calling thread's intra-op thread count at `threads`.
BenchReport run_bench(const BenchOptions& options,
                      const std::function<void(const std::string&)>& log = nullptr);

// Recomputes ratios and targets from report.rates (after the caller added processes rates).
void finish_report(BenchReport& report);

// Text: one line per configuration (images/s, x one thread), the predictions, the ratios and
// each target with pass / MISS / not measured. Ends with a newline.
std::string format_bench_report(const BenchReport& report);

// Everything in the report as JSON (options, ppv, rates, ratios, targets, measurements).
std::string to_json(const BenchReport& report);

}  // namespace stalepipe::perf
