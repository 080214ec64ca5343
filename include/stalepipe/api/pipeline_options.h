// How to pipeline a model: where the registers go, the schedule, the executor, the devices and
// the optimizer. Fluent setters in the style of LibTorch's options (torch/arg.h):
//
//   auto options = stalepipe::PipelineOptions().partitions(3).balance("params").lr(0.05);
//
// Every field is checked when a PipelineTrainer is built from it (UsageError naming the field
// and the bad value); setting a field checks nothing.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <torch/arg.h>
#include <torch/types.h>

#include "stalepipe/exec/stage.h"

namespace stalepipe {

struct PipelineOptions {
  // Where the pipeline registers go. Either a PPV - increasing weight-layer indices (1-based,
  // models/model.h), a register right after each; empty = one partition, no pipelining - or,
  // with partitions K > 0 and an empty ppv, the PPV with K-1 registers that minimises the
  // cost of the most expensive partition (partition/balance.h) under `balance`:
  //   "params" (trainable parameters; the default, deterministic), "flops" (forward MFLOPs per
  //   sample), or "time" (a forward/backward profile of each unit at batch `profile_batch`;
  //   measured, so it may differ between runs; the model's parameters, buffers and the global
  //   RNG state are restored after profiling).
  TORCH_ARG(std::vector<int>, ppv) = {};
  TORCH_ARG(int, partitions) = 0;
  TORCH_ARG(std::string, balance) = "params";
  TORCH_ARG(int64_t, profile_batch) = 128;

  // "stale" (PPL-SGD: each partition updates as soon as its backward is done; the forward of
  // partition k uses weights that miss the last d_k = 2(K-k)-1 updates), "sequential" (no
  // pipelining: F, B, U of one mini-batch through all partitions before the next; ordinary
  // SGD), or "hybrid" (stale for steps [0, hybrid_switch_step), sequential after; the pipeline
  // drains at the switch and the optimizer state carries over).
  TORCH_ARG(std::string, schedule) = "stale";
  TORCH_ARG(int64_t, hybrid_switch_step) = -1;  // global step; required (>= 0) with "hybrid"
  // Hybrid only: at the switch, every weight that feeds a batch norm is rescaled to its norm
  // at the start (optim::Sgd::reset_norms): stale training inflates those norms, and so
  // shrinks the non-pipelined phase's effective learning rate (docs/design.md).
  TORCH_ARG(bool, hybrid_norm_reset) = false;

  // "threads" (one thread per partition: the real concurrent pipeline) or "emulated" (one
  // thread runs every operation in a fixed order: the reference; bit-identical on CPU).
  TORCH_ARG(std::string, executor) = "threads";
  // One device per partition (e.g. {torch::kCPU, torch::Device("cuda:0")}); empty = all CPU.
  // Each must be present on this machine.
  TORCH_ARG(std::vector<torch::Device>, devices) = {};
  // Intra-op threads: `threads` in total (0 = all cores), split evenly over the partitions,
  // at least 1 each; threads_per_worker > 0 sets each partition's count directly.
  TORCH_ARG(int, threads) = 0;
  TORCH_ARG(int, threads_per_worker) = 0;

  // Also "gpipe" (each mini-batch in micro_batches slices, flushed before the update: nothing
  // is stale) and "1f1b-stash" (PipeDream's 1F1B with weight stashing: each backward uses the
  // weights its forward used). docs/design.md, "The other pipelines, on the same engine".
  TORCH_ARG(int, micro_batches) = 1;  // gpipe only

  // Staleness mitigations (optim/sgd.h has the formulas; docs/design.md, "Mitigations"):
  // each partition's gradient of delay D gets lr (1+D)^-p, p falling from 1 to 0 over
  // delay_lr_anneal_steps (0: p = 1); forwards use weights extrapolated D updates ahead along
  // the momentum; momentum spike compensation; weights that feed a batch norm keep their
  // initial norm (models/scale_invariance.h).
  TORCH_ARG(bool, delay_aware_lr) = false;
  TORCH_ARG(int64_t, delay_lr_anneal_steps) = 0;
  TORCH_ARG(bool, weight_prediction) = false;
  TORCH_ARG(bool, spike_compensation) = false;
  TORCH_ARG(bool, fixed_weight_norm) = false;

  // SGD (optim/sgd.h; PyTorch's formula). The update of global step t uses lr_at(t) if set,
  // else lr. lr_at is called from worker threads: it must be a pure function of t.
  TORCH_ARG(double, lr) = 0.05;
  TORCH_ARG(std::function<double(int64_t step)>, lr_at) = nullptr;
  TORCH_ARG(double, momentum) = 0.9;
  TORCH_ARG(double, weight_decay) = 5e-4;
  TORCH_ARG(bool, nesterov) = false;
  // Training loss of the last partition: scalar from (output, target). Default: mean
  // cross-entropy of logits [B, classes] against class indices [B].
  TORCH_ARG(exec::LossFn, loss) = exec::cross_entropy_loss;

  // The step interface (PipelineTrainer::feed) drains the pipeline at least every this many
  // mini-batches (the executor runs schedules of bounded length); fit() drains at each epoch.
  TORCH_ARG(int64_t, segment_steps) = 1 << 16;
};

}  // namespace stalepipe
