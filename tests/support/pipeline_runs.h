// Small end-to-end runs for tests: a zoo model on synthetic data, through a pipeline with a
// given executor, or through the plain non-pipelined reference loop.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <torch/types.h>

#include "stalepipe/data/loader.h"
#include "stalepipe/exec/precision.h"
#include "stalepipe/exec/pipeline.h"
#include "stalepipe/schedule/schedule.h"

namespace stalepipe::test {

struct RunSpec {
  std::string model = "lenet5";
  // "synthetic" (classes, 28x28 padded to 32x32) or "synthetic-masks" (a class per pixel, 32x32)
  std::string data = "synthetic";
  std::vector<int> ppv;
  schedule::ScheduleKind kind = schedule::ScheduleKind::kStale;
  std::string executor = "emulated";
  int64_t steps = 20;
  int64_t batch_size = 8;
  int64_t train_size = 96;  // synthetic samples; several epochs if smaller than steps*batch
  double lr = 0.05;
  double momentum = 0.9;
  uint64_t seed = 7;
  // Hybrid: before_switch (stale) for steps [0, switch_step), then sequential. -1: one
  // schedule throughout.
  int64_t switch_step = -1;
  schedule::ScheduleKind before_switch = schedule::ScheduleKind::kStale;  // run_pipeline only
  // run_pipeline only: the first step trained, from the initial weights (as a run resumed there).
  int64_t first_step = 0;
  int micro_batches = 1;  // gpipe
  // Staleness mitigations (optim/sgd.h).
  bool delay_aware_lr = false;
  bool weight_prediction = false;
  bool spike_compensation = false;
  bool fixed_weight_norm = false;
  int recompute = 0;      // PipelineOptions::recompute
  double dropout = 0;     // ZooOptions::dropout
  bool buffers = false;   // run_pipeline also returns the buffers, after the parameters
  bool channels_last = false;  // weights, activations and registers in NHWC (run_pipeline only)
  exec::Precision precision = exec::Precision::kFp32;
  bool cosine_lr = false;      // lr (1 + cos(pi t / steps)) / 2 at step t instead of lr throughout
  // run_pipeline only: where the partitions run, and how (exec::Stage::use_graphs, 2 eager steps).
  torch::Device device = torch::kCPU;
  exec::GraphMode graphs = exec::GraphMode::kOff;
  // run_pipeline only: called with the trained pipeline before its state is read.
  std::function<void(exec::Pipeline&)> inspect;
  // run_pipeline only: each step's loss, read every read_losses_every steps
  // (exec::SegmentContext).
  std::function<void(int64_t step, const exec::StepLoss&)> on_step;
  int64_t read_losses_every = 1;
};

// ResNet-20 cut at `ppv`, 8 steps of batch 4 from 24 samples, buffers (batch-norm running
// statistics) returned too: small enough for unit tests of what a cut may change.
RunSpec small_resnet20(std::vector<int> ppv);

// A loader over seeded synthetic 28x28 data, padded to 32x32 and normalised.
data::Loader synthetic_loader(int64_t train_size, int64_t batch_size, uint64_t seed);

// Trains spec.steps mini-batches as one segment of the schedule; returns all parameters
// (and buffers if spec.buffers).
std::vector<torch::Tensor> run_pipeline(const RunSpec& spec);

// The parameters run_pipeline starts from, in the same order.
std::vector<torch::Tensor> initial_parameters(const RunSpec& spec);

// Non-pipelined reference: the whole model (Model::forward), torch::optim::SGD, the same
// batches and learning rate. Independent of stalepipe's schedule, executors and optimizer.
// Precision kBf16 runs the model's forward under LibTorch's CPU autocast, the loss in fp32.
// With switch_step >= 0 the first switch_step mini-batches are trained stale (emulated) and
// the reference loop continues from that state; this needs momentum 0 (no optimizer state
// to hand over).
std::vector<torch::Tensor> run_reference(const RunSpec& spec);

// Bitwise equality of two parameter lists (with a message naming the first difference).
::testing::AssertionResult all_equal(const std::vector<torch::Tensor>& a,
                                     const std::vector<torch::Tensor>& b);

// Equality up to floating-point summation order: |a - b| <= atol + rtol |b| elementwise.
::testing::AssertionResult all_close(const std::vector<torch::Tensor>& a,
                                     const std::vector<torch::Tensor>& b, double rtol, double atol);

}  // namespace stalepipe::test
