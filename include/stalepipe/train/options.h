// Every setting of a training run. Written to DIR/config.json as is, read back by --resume.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <torch/arg.h>

namespace stalepipe::train {

struct TrainOptions {
  // What to train on.
  TORCH_ARG(std::string, model) = "lenet5";
  TORCH_ARG(std::string, data) = "fashion-mnist";
  TORCH_ARG(int64_t, train_subset) = 0;   // first N training samples; 0 = all
  TORCH_ARG(int64_t, test_subset) = 0;    // first N test samples; 0 = all
  TORCH_ARG(bool, augment) = false;       // pad-4 random crop + horizontal flip
  TORCH_ARG(bool, drop_last) = false;     // drop the last partial batch of an epoch
  // Optimisation.
  TORCH_ARG(int64_t, epochs) = 10;
  TORCH_ARG(int64_t, max_steps) = 0;      // stop after this many mini-batches; 0 = no limit
  TORCH_ARG(int64_t, batch_size) = 128;
  TORCH_ARG(double, lr) = 0.05;
  TORCH_ARG(double, momentum) = 0.9;
  TORCH_ARG(double, weight_decay) = 5e-4;
  TORCH_ARG(bool, nesterov) = false;
  TORCH_ARG(std::string, lr_schedule) = "cosine";  // constant | step | cosine
  TORCH_ARG(std::vector<int>, lr_milestones) = {};
  TORCH_ARG(double, lr_gamma) = 0.1;
  TORCH_ARG(double, warmup_epochs) = 0;
  TORCH_ARG(uint64_t, seed) = 1;
  // Pipeline.
  TORCH_ARG(std::string, pipeline) = "none";        // PPV: "none", "2", "7,13"
  TORCH_ARG(int, partitions) = 0;                   // > 0: choose a balanced PPV for K partitions
  TORCH_ARG(std::string, balance) = "time";         // with partitions: time | params | flops
  TORCH_ARG(std::string, schedule) = "stale";       // stale | sequential | hybrid | gpipe | 1f1b-stash
  TORCH_ARG(std::string, hybrid_switch) = "";       // "N" epochs or "Ns" steps (hybrid only)
  TORCH_ARG(bool, hybrid_norm_reset) = false;       // hybrid: BN-fed weights back to their first norm
  TORCH_ARG(int, micro_batches) = 1;                // gpipe: slices per mini-batch
  // Staleness mitigations (docs/design.md, "Mitigations"; optim/sgd.h has the formulas).
  TORCH_ARG(bool, delay_aware_lr) = false;          // lr * (1 + D)^-p per partition (PipeMare)
  TORCH_ARG(double, delay_lr_anneal_epochs) = 0;    // p falls from 1 to 0 over these; 0 = p stays 1
  TORCH_ARG(bool, weight_prediction) = false;       // forward with weights extrapolated D updates ahead
  TORCH_ARG(bool, spike_compensation) = false;      // momentum spike compensation (Kosson et al.)
  TORCH_ARG(bool, fixed_weight_norm) = false;       // weights feeding a batch norm keep their norm
  TORCH_ARG(std::string, executor) = "threads";     // emulated | threads
  TORCH_ARG(std::string, devices) = "";             // "cpu,cpu" ; empty = cpu everywhere
  TORCH_ARG(int, threads) = 0;                      // total intra-op threads; 0 = all cores
  TORCH_ARG(int, threads_per_worker) = 0;           // 0 = threads / partitions (at least 1)
  // Output.
  TORCH_ARG(std::string, out) = "";                 // run directory; empty = none
  TORCH_ARG(int64_t, checkpoint_every) = 0;         // also checkpoint every N steps; 0 = per epoch
  TORCH_ARG(int64_t, eval_batch_size) = 1000;
  TORCH_ARG(std::string, progress) = "auto";        // auto | bar | lines | none
  TORCH_ARG(std::string, trace) = "";               // Chrome trace JSON of every op (+ FILE.svg)
};

}  // namespace stalepipe::train
