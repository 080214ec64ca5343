// `stalepipe bench --seconds S`: the steady-state speed of one training configuration, timed
// the way bench/gpu_peer.py times PyTorch's (scripts/gpu-check.sh speed compares the two).
//
// The configuration is BenchOptions::training as `train` would run it: its model, batch size,
// cut (ppv, or partitions balanced), devices, layout, precision, schedule, executor and CUDA
// graphs, with SGD at a constant lr of 0.01 and the tree's momentum and weight decay. The
// input is one fixed batch made once on the first partition's device (pixels drawn from
// N(0, 1), labels uniform over the classes) in the run's layout, as the peer's: no loader, no
// host-to-device copy.
//
// Timing: warmup_steps mini-batches train as one segment, untimed (cuDNN's first calls, the
// allocator's growth, the CUDA graphs' eager steps and captures); then segments of whole steps
// run until `seconds` have passed (the first worker starts no step after that; the ones in
// flight finish), each timed from its start until every device it used is idle. The rate is
// steps x batch / those seconds: whole steps, a pipeline's fill and drain included once per
// segment (usually one or two segments, sized from the rate so far).
//
// What it reads at run time, after the timed part: LibTorch's process-wide switches (cuDNN
// benchmark mode, TF32 for cuBLAS and cuDNN), each partition's passes that ran as CUDA graphs
// and eagerly during the timed part (exec::Stage::graphed_passes(), eager_passes()), and each
// CUDA device's peak reserved memory over the timed part (the CUDA caching allocator's
// statistics, peak reset when the timed part begins).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "stalepipe/perf/bench.h"

namespace stalepipe::perf {

// LibTorch's process-wide switches that change what a GPU computes and how fast, as they are
// when read (at::globalContext()). stalepipe sets TF32 from the precision (exec/precision.h)
// and never sets cuDNN's benchmark mode, which stays LibTorch's default (off, as PyTorch's).
struct BackendSwitches {
  bool cudnn_benchmark = false;  // benchmarkCuDNN(): autotune each convolution shape
  bool tf32_cublas = false;      // allowTF32CuBLAS(): matmuls on TF32 tensor cores
  bool tf32_cudnn = false;       // allowTF32CuDNN(): convolutions on TF32 tensor cores
};
BackendSwitches read_backend_switches();

// One partition's passes (forwards, backwards, updates) in the timed part.
struct PartitionPasses {
  std::string device;          // "cuda:0"
  int64_t graphed_passes = 0;  // ran as a CUDA graph, captured or replayed
  int64_t eager_passes = 0;    // ran eagerly while graphs were on (0 without graphs)
};

// One CUDA device's memory over the timed part.
struct DeviceMemory {
  std::string device;               // "cuda:0"
  int64_t peak_reserved_bytes = 0;  // the caching allocator's reserved bytes, peak
};

struct SteadyReport {
  BenchOptions options;
  std::string ppv;        // "7", "none" for one partition
  std::string layout;     // "nchw" | "channels-last"
  std::string precision;  // "fp32" | "tf32" | "bf16"
  int partitions = 0;
  bool cuda_graphs = false;
  int64_t timed_steps = 0;
  int segments = 0;            // timed segments (each with its fill and drain)
  double timed_seconds = 0;    // >= options.seconds()
  double images_per_second = 0;
  double final_loss = 0;       // the last timed step's (finite)
  BackendSwitches switches;
  std::vector<PartitionPasses> passes;  // one per partition, in order
  std::vector<DeviceMemory> memory;     // one per CUDA device used; empty on the CPU
};

// Runs the measurement above. `log` (may be null) gets one line per phase. Throws UsageError
// for bad options (naming the field): seconds outside (0, 3600], rounds other than 1,
// replicas, the hybrid schedule or the processes executor; RuntimeError if training fails or
// diverges.
SteadyReport run_steady(const BenchOptions& options,
                        const std::function<void(const std::string&)>& log = nullptr);

// Text: the rate, the switches, each partition's passes and each device's peak. Ends with a
// newline.
std::string format_steady_report(const SteadyReport& report);

// Everything in the report as JSON: the configuration, the rate, "switches"
// {cudnn_benchmark, matmul_tf32, cudnn_tf32} (PyTorch's names), "partitions" [{device, graphed_passes,
// eager_passes}], "memory" [{device, peak_reserved_bytes}] and peak_reserved_bytes (their sum).
std::string to_json(const SteadyReport& report);

}  // namespace stalepipe::perf
