// The one option tree of a training run, shared by the library (PipelineTrainer, train::)
// and the CLI. Four parts, each with fluent setters in the style of LibTorch (torch/arg.h):
//
//   stalepipe::Options options;
//   options.pipeline().partitions(3).balance(stalepipe::Balance::kParams);
//   options.optimizer().lr(0.1).momentum(0.9);
//   options.run().epochs(4).seed(2);
//
// Every field has exactly one default, here. Setting a field checks nothing; check_options()
// (called when a PipelineTrainer or a run is built) is the one place that names fields in its
// errors, e.g. "OptimizerOptions::lr must be a positive number, got -1"; the layers below
// check their own arguments in their own terms. The CLI derives each field's flag from its
// name (apps/stalepipe/flags.h); nothing below apps/ knows a flag.
//
// Each stored field is one line of the tables below: type, name, default, config.json key
// and help text. api/option_fields.h turns them into the registry that config.json
// (api/options_json.h), the CLI's flags and the messages use.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <torch/arg.h>
#include <torch/types.h>

#include "stalepipe/exec/executor_kind.h"
#include "stalepipe/exec/loss.h"
#include "stalepipe/exec/precision.h"
#include "stalepipe/exec/process_group_options.h"
#include "stalepipe/optim/lr_schedule.h"
#include "stalepipe/optim/optimizer_kind.h"
#include "stalepipe/partition/balance.h"
#include "stalepipe/schedule/schedule.h"

namespace stalepipe {

using partition::Balance;
using exec::ExecutorKind;
using schedule::ScheduleKind;

using optim::LrScheduleKind;
using optim::OptimizerKind;
enum class ProgressMode { kAuto, kBar, kLines, kNone };
// The memory layout of 4-D weights, activations and registers (models/memory_format.h).
// kAuto: the one measured fastest for the zoo network (models::prefers_channels_last), NCHW
// for a model file or a network of the caller's.
enum class Layout { kAuto, kNchw, kChannelsLast };

// Whether a field's value is part of a run's hash (the fields' table below says why).
enum class HashRule { kAlways, kUnlessDefault, kNever };

// A point in training: after `count` epochs, or (in_steps) after `count` mini-batches.
// count < 0: not set.
struct TrainingPoint {
  int64_t count = -1;
  bool in_steps = false;
  bool set() const { return count >= 0; }
  // The global step of the point; epochs need steps_per_epoch (> 0).
  int64_t step(int64_t steps_per_epoch) const { return in_steps ? count : count * steps_per_epoch; }
  bool operator==(const TrainingPoint& o) const { return count == o.count && in_steps == o.in_steps; }
  static TrainingPoint epochs(int64_t n) { return {n, false}; }
  static TrainingPoint steps(int64_t n) { return {n, true}; }
};

// The fields, each once: X(type, name, default, config.json key, how it is stored, hash rule,
// flag, help). The key is the field's name but where run directories had another before the
// tree existed ("data", "pipeline"); keys after '|' are earlier ones still read
// (option_fields.h). The hash rule says whether the field's value is part of a run's hash
// (options_json.h), which finds a sweep's finished runs: Always (the fields of 0.1), Never (what
// does not change the trained weights: where files go, how many threads, executors and devices,
// which train the same weights), UnlessDefault (every later field: left out at its default, so
// that older runs keep their hash). The flag is the CLI's ("": none). The help names other
// fields as "Part::field" (the CLI shows each as its flag); the lists of models and data sets
// come from their registries (option_fields.cpp). Adding a field is one line here plus its use:
// config.json, the hash, the CLI flag and its help follow from the line.

// What to train on: the data set and how it is batched (train/ builds the loaders; the
// PipelineTrainer's own loops take any loader). dataset: data/registry.h.
#define SP_DATA_OPTION_FIELDS(X)                                                                   \
  X(std::string, dataset, "fashion-mnist", "data", Plain, Always, "--data", "the data set")        \
  X(int64_t, train_subset, 0, "train_subset", Plain, Always, "--train-subset", "train on the first N samples (0: all)")       \
  X(int64_t, test_subset, 0, "test_subset", Plain, Always, "--test-subset", "evaluate on the first N test samples (0: all)") \
  X(bool, augment, false, "augment", Plain, Always, "--augment", "random 4-pixel-padded crop and horizontal flip")      \
  X(bool, drop_last, false, "drop_last", Plain, Always, "--drop-last", "drop the last partial batch of each epoch")       \
  X(int64_t, batch_size, 128, "batch_size", Plain, Always, "--batch-size", "mini-batch size")                              \
  X(int64_t, eval_batch_size, 1000, "eval_batch_size", Plain, Always, "--eval-batch-size", "batch size for evaluation")             \
  X(int64_t, image_size, 0, "image_size", Plain, UnlessDefault, "--image-size",                                                   \
    "resize each image (shorter side) and centre-crop it to S x S (0: as stored)")                 \
  X(bool, resized_crop, false, "resized_crop", Plain, UnlessDefault, "--resized-crop",                                              \
    "training images: RandomResizedCrop (scale 0.08-1, ratio 3/4-4/3) and a horizontal flip instead of the centre crop") \
  X(double, val_fraction, 0, "val_fraction", Plain, UnlessDefault, "--val-fraction",                                                \
    "folder:DIR without train/: hold out this fraction of each class for validation")              \
  X(bool, skip_bad_images, false, "skip_bad_images", Plain, UnlessDefault, "--skip-bad-images",                                        \
    "folder:DIR: decode every image first and train without those that cannot be read (listed in skipped-images.txt)") \
  X(double, max_megapixels, 100, "max_megapixels", Plain, UnlessDefault, "--max-megapixels", "folder:DIR: refuse images above this many megapixels") \
  X(std::vector<double>, norm_mean, {}, "norm_mean", Plain, UnlessDefault, "--norm-mean",                                        \
    "per-channel mean of pixel/255 to normalise with (default: measured on the training split)")   \
  X(std::vector<double>, norm_std, {}, "norm_std", Plain, UnlessDefault, "--norm-std",                                          \
    "per-channel standard deviation of pixel/255 to normalise with (with DataOptions::norm_mean)") \
  X(int, data_threads, 0, "data_threads", Plain, Never, "--data-threads",                                                   \
    "threads decoding images (0: the cores PipelineOptions::threads leaves free, at least 1)")      \
  X(std::string, cache_images, "", "cache_images", Plain, Never, "--cache-images",                                          \
    "folder:DIR: decode each split once into a file in this folder, and read the pixels from there in every run that matches")

// How the model is cut and run.
// ppv: registers right after these weight layers (1-based, increasing; models/model.h); empty =
//   one partition. With partitions K > 0 and an empty ppv, the PPV with K-1 registers that
//   minimises the most expensive partition under `balance` (partition/balance.h): kTime
//   profiles the model first (profile_batch samples, the per-worker thread count; measured, so
//   it may differ between runs; the model's state and the RNG are restored afterwards).
// schedule: kStale (PPL-SGD), kSequential (no pipelining), kHybrid (stale until hybrid_switch,
//   then sequential; the pipeline drains there and the optimizer state carries over), kGPipe
//   (micro_batches slices, flushed: nothing stale), kOneFOneB (PipeDream's 1F1B with weight
//   stashing). docs/design.md has the semantics of each.
// executor: kThreads (one thread per partition), kEmulated (the reference: one thread, a fixed
//   order; bit-identical to the others on CPU) or kProcesses (one rank per partition over c10d
//   Gloo; `group` says where this process sits, unset fields from torchrun's environment).
// threads: intra-op threads in total (0 = all cores), split evenly over the partitions, at
//   least 1 each, except in sequential segments (schedule sequential, a hybrid after its
//   switch), where one partition works at a time with all of them; threads_per_worker > 0
//   sets each partition's count directly, throughout.
// layout: weights, activations and registers in NCHW or channels-last (NHWC). The layout
//   changes the order of floating-point reductions, so the weights' bits (never the executors'
//   agreement). A run directory records the layout that ran; a config.json without one was
//   written before the per-model default, in NCHW (or with the earlier key "channels_last":
//   true), and is read that way, so older runs resume as they ran.
// replicas: R copies of the K-partition pipeline (pipeline x data parallelism). Each takes
//   its slice of every mini-batch (the global batch stays batch_size); before each update the
//   R copies of a partition sum their gradients in replica order, so their weights stay equal
//   bit for bit and the staleness is the one pipeline's (docs/design.md, "Replicas"). Threads
//   and emulated run R x K workers in this process; processes run R x K ranks, rank r x K + k
//   being partition k + 1 of replica r.
// precision: fp32 (TF32 off on CUDA too), tf32 (CUDA partitions only) or bf16 (forwards under
//   autocast, registers in bf16, fp32 master weights; CUDA and CPU). The default is fp32,
//   bit for bit what ran before on the CPU (exec/precision.h has what each changes).
// recompute (activation checkpointing): the units through this weight layer keep no
//   activations from forward to backward, which recomputes them (exec/stage.h). The trained
//   weights are the same bit for bit; a partition with mini-batches in flight keeps less, and
//   each backward costs one more forward of those units (balance kTime and kFlops count it).
// cuda_graphs: every partition on a CUDA device captures its forward, backward and update as
//   CUDA graphs after 2 eager steps and replays them (exec/stage.h, docs/design.md "CUDA
//   graphs"); the same training up to the rounding of the update (its lr on the device).
// segment_steps has no flag: it is feed()'s segment length, for callers of the API; `train`
//   drains where its loop needs to.
#define SP_PIPELINE_OPTION_FIELDS(X)                                                               \
  X(std::vector<int>, ppv, {}, "pipeline", PpvText, Always, "--pipeline",                                                \
    "PPV: weight layers followed by a register, e.g. 2 or 7,13; none = no pipeline")               \
  X(int, partitions, 0, "partitions", Plain, Always, "--partitions", "K partitions with a balanced PPV (instead of PipelineOptions::ppv)") \
  X(Balance, balance, Balance::kTime, "balance", Name, Always, "--balance",                                             \
    "with PipelineOptions::partitions: balance time (quick profile first) | params | flops")       \
  X(int64_t, profile_batch, 0, "profile_batch", Plain, Never, "--profile-batch",                                             \
    "with PipelineOptions::balance time: samples per profiled step (0: DataOptions::batch_size)")  \
  X(ScheduleKind, schedule, ScheduleKind::kStale, "schedule", Name, Always, "--schedule",                                \
    "stale (PPL-SGD) | sequential | hybrid | gpipe | 1f1b-stash (PipeDream)")                      \
  X(TrainingPoint, hybrid_switch, {}, "hybrid_switch", PointText, Always, "--hybrid-switch",                                  \
    "hybrid: switch to sequential after N epochs, or Ns steps (e.g. 3 or 500s)")                   \
  X(bool, hybrid_norm_reset, false, "hybrid_norm_reset", Plain, UnlessDefault, "--hybrid-norm-reset",                                    \
    "hybrid: at the switch, weights that feed a batch norm get back their initial norm")           \
  X(int, micro_batches, 1, "micro_batches", Plain, UnlessDefault, "--micro-batches", "gpipe: micro-batches per mini-batch")          \
  X(int, replicas, 1, "replicas", Plain, UnlessDefault, "--replicas",                                                           \
    "R data-parallel copies of the pipeline, each training on its 1/R of every mini-batch; their gradients are summed before each update") \
  X(ExecutorKind, executor, ExecutorKind::kThreads, "executor", Name, Never, "--executor",                              \
    "emulated (reference, one thread) | threads (one thread per partition) | processes (one rank per partition)") \
  X(std::vector<torch::Device>, devices, {}, "devices", DevicesText, Never, "--devices",                               \
    "one device per partition, e.g. cpu,cpu or cuda:0,cuda:1 (default: cpu)")                     \
  X(int, threads, 0, "threads", Plain, Never, "--threads", "intra-op threads in all (0: all cores)")                   \
  X(int, threads_per_worker, 0, "threads_per_worker", Plain, Always, "--threads-per-worker",                                       \
    "intra-op threads per partition (0: PipelineOptions::threads / partitions)")                   \
  X(int64_t, segment_steps, 1 << 16, "segment_steps", Plain, UnlessDefault, "",                                       \
    "PipelineTrainer::feed drains at least every this many mini-batches")                          \
  X(Layout, layout, Layout::kAuto, "layout|channels_last", LayoutName, UnlessDefault, "--layout",                             \
    "weights, activations and registers in nchw | channels-last | auto (the faster for the model, as measured)") \
  X(exec::Precision, precision, exec::Precision::kFp32, "precision", Name, UnlessDefault, "--precision",                         \
    "fp32 | tf32 (CUDA: convolutions and matmuls on TF32 tensor cores) | bf16 (forwards autocast to bfloat16; fp32 weights and optimizer state)") \
  X(bool, cudnn_benchmark, false, "cudnn_benchmark", Plain, UnlessDefault, "--cudnn-benchmark",                         \
    "CUDA: cuDNN times its algorithms for each convolution shape and keeps the fastest (torch.backends.cudnn.benchmark; PyTorch's default is off)") \
  X(int, recompute, 0, "recompute", Plain, Never, "--recompute",                                                         \
    "recompute activations in backward through weight layer L (a position a register could follow; 0: none): " \
    "less memory, same weights, one more forward of those layers")                                 \
  X(bool, cuda_graphs, false, "cuda_graphs", Plain, Never, "--cuda-graphs",                                                \
    "CUDA partitions replay each pass as a CUDA graph after 2 eager steps (no dropout, recompute or replicas; other shapes run eagerly)")

// The optimizer (SGD or AdamW), its learning rate over time, the staleness mitigations
// (optim/optimizer.h, sgd.h and adamw.h have the formulas; docs/design.md, "Mitigations") and the loss: a name (exec/loss.h) or any function of
// (output, target); by default mean cross-entropy of logits against class indices.
#define SP_OPTIMIZER_OPTION_FIELDS(X)                                                              \
  X(OptimizerKind, algorithm, OptimizerKind::kSgd, "optimizer", Name, UnlessDefault, "--optimizer",                      \
    "sgd | adamw (decoupled weight decay; its state per partition)")                               \
  X(double, lr, 0.05, "lr", Plain, Always, "--lr", "base learning rate")                                           \
  X(double, momentum, 0.9, "momentum", Plain, Always, "--momentum", "SGD momentum")                                      \
  X(double, weight_decay, 5e-4, "weight_decay", Plain, Always, "--weight-decay",                                         \
    "weight decay: L2 in the gradient (sgd), decoupled (adamw)")                                   \
  X(bool, nesterov, false, "nesterov", Plain, Always, "--nesterov", "Nesterov momentum")                                 \
  X(std::vector<double>, betas, {}, "betas", Plain, UnlessDefault, "--betas",                                            \
    "adamw: the moments' decay rates beta1,beta2, each in [0, 1) (default 0.9,0.999)")              \
  X(double, eps, 1e-8, "eps", Plain, UnlessDefault, "--eps", "adamw: added to the second moment's root, > 0")             \
  X(LrScheduleKind, lr_schedule, LrScheduleKind::kCosine, "lr_schedule", Name, Always, "--lr-schedule", "constant | step | cosine") \
  X(std::vector<int>, lr_milestones, {}, "lr_milestones", Plain, Always, "--lr-milestones",                                   \
    "epochs at which the step schedule multiplies lr by OptimizerOptions::lr_gamma")              \
  X(double, lr_gamma, 0.1, "lr_gamma", Plain, Always, "--lr-gamma", "step schedule factor")                              \
  X(double, warmup_epochs, 0, "warmup_epochs", Plain, Always, "--warmup-epochs", "linear learning-rate warm-up (may be fractional)") \
  X(bool, delay_aware_lr, false, "delay_aware_lr", Plain, UnlessDefault, "--delay-aware-lr",                                          \
    "mitigation: lr * (1+D)^-p for a gradient D updates stale (PipeMare)")                         \
  X(double, delay_lr_anneal_epochs, 0, "delay_lr_anneal_epochs", Plain, UnlessDefault, "--delay-lr-anneal-epochs",                            \
    "with OptimizerOptions::delay_aware_lr: p falls from 1 to 0 over these epochs (0: p = 1 throughout)") \
  X(bool, weight_prediction, false, "weight_prediction", Plain, UnlessDefault, "--weight-prediction",                                    \
    "mitigation: forwards use weights extrapolated D updates ahead along the momentum")            \
  X(bool, spike_compensation, false, "spike_compensation", Plain, UnlessDefault, "--spike-compensation",                                  \
    "mitigation: momentum spike compensation for delayed gradients (Kosson et al.)")               \
  X(bool, delay_nesterov, false, "delay_nesterov", Plain, UnlessDefault, "--delay-nesterov",                                    \
    "mitigation: Nesterov's look-ahead moved by each partition's delay, kept in its one weight copy (after Ajanthan et al.)") \
  X(bool, fixed_weight_norm, false, "fixed_weight_norm", Plain, UnlessDefault, "--fixed-weight-norm",                                    \
    "mitigation: weights that feed a batch norm keep their initial norm (stale gradients inflate it)") \
  X(exec::Loss, loss, {}, "loss", LossName, UnlessDefault, "--loss",                                                        \
    "cross-entropy | nll (log-probabilities) | mse | l1 | smooth-l1 | bce-with-logits")

// The run around the loop: what model, how long, where its files go. model: a zoo name
// (train/ only; the API takes a Model). model_file: a TorchScript file saved by PyTorch 1.13
// (models/torchscript.h), stored as given: a resumed run reloads the file. stop_at_step:
// unlike max_steps it does not change the learning-rate schedule, and a run resumed at that
// step goes on. eval_every: the pipeline drains there, as at an epoch end. targets change
// nothing in training.
#define SP_RUN_OPTION_FIELDS(X)                                                                    \
  X(std::string, model, "lenet5", "model", Plain, Always, "--model", "a network of the zoo")       \
  X(double, dropout, 0, "dropout", Plain, UnlessDefault, "--dropout",                                                          \
    "alexnet, vgg16: dropout probability before each hidden fc layer (0: none)")                   \
  X(std::string, model_file, "", "model_file", Plain, UnlessDefault, "--model-file",                                              \
    "a TorchScript file saved by PyTorch (instead of RunOptions::model): a scripted module, any forward, cut " \
    "before each weight layer; input C x 32 x 32, or C x S x S with DataOptions::image_size S > 32")  \
  X(int64_t, epochs, 10, "epochs", Plain, Always, "--epochs", "training epochs")                                       \
  X(int64_t, max_steps, 0, "max_steps", Plain, Always, "--max-steps", "end after this many mini-batches (0: no limit)")   \
  X(int64_t, stop_at_step, 0, "stop_at_step", Plain, Never, "--stop-at-step",                                               \
    "stop as if interrupted (checkpoint, resumable) after this many mini-batches (0: never)")      \
  X(uint64_t, seed, 1, "seed", Plain, Always, "--seed", "seed for initialisation, shuffling and augmentation")       \
  X(std::string, out, "", "out", Plain, Never, "--out", "run directory: config.json, metrics.jsonl, summary.json, checkpoint/") \
  X(int64_t, checkpoint_every, 0, "checkpoint_every", Plain, Always, "--checkpoint-every", "also checkpoint every N steps (0: at epoch ends only)") \
  X(int64_t, eval_every, 0, "eval_every", Plain, UnlessDefault, "--eval-every",                                                   \
    "also evaluate on the test set every N steps, for accuracy against training time (0: at epoch ends only)") \
  X(std::vector<double>, targets, {}, "targets", Plain, Never, "--targets",                                            \
    "test accuracies (%) whose first training time summary.json reports, e.g. 85,90,92")           \
  X(ProgressMode, progress, ProgressMode::kAuto, "progress", Name, Never, "--progress", "auto | bar | lines | none")    \
  X(std::string, trace, "", "trace", Plain, Never, "--trace",                                                        \
    "write a Chrome trace (Perfetto) of every op to FILE and its space-time SVG to FILE.svg")

#define SP_DECLARE_OPTION_FIELD(type, name, default_value, key, codec, hash, flag, help) \
  TORCH_ARG(type, name) = default_value;

struct DataOptions {
  SP_DATA_OPTION_FIELDS(SP_DECLARE_OPTION_FIELD)
};

struct PipelineOptions {
  SP_PIPELINE_OPTION_FIELDS(SP_DECLARE_OPTION_FIELD)
  // Where this process sits in a processes run (exec/processes.h; the CLI's --rank etc.).
  TORCH_ARG(exec::ProcessGroupOptions, group) = {};
};

struct OptimizerOptions {
  SP_OPTIMIZER_OPTION_FIELDS(SP_DECLARE_OPTION_FIELD)
  // The learning rate of global step t: lr_at(t) if set (a pure function: it runs on worker
  // threads), else lr_schedule over the run's steps. Not stored in config.json.
  TORCH_ARG(std::function<double(int64_t step)>, lr_at) = nullptr;
  // What counts as correct (train and test accuracy); by default top-1 where the target is
  // class indices. Where it scores no sample, no accuracy is reported. Not stored in config.json.
  TORCH_ARG(exec::MetricFn, metric) = exec::top1_accuracy;
};

struct RunOptions {
  SP_RUN_OPTION_FIELDS(SP_DECLARE_OPTION_FIELD)
};

struct Options {
  TORCH_ARG(DataOptions, data) = {};
  TORCH_ARG(PipelineOptions, pipeline) = {};
  TORCH_ARG(OptimizerOptions, optimizer) = {};
  TORCH_ARG(RunOptions, run) = {};
};

#undef SP_DECLARE_OPTION_FIELD

// Every stored field of the tree, for naming it: Field::micro_batches (option_fields.h says
// "PipelineOptions::micro_batches").
#define SP_FIELD_ENUMERATOR(type, name, default_value, key, codec, hash, flag, help) name,
enum class Field {
  SP_DATA_OPTION_FIELDS(SP_FIELD_ENUMERATOR) SP_PIPELINE_OPTION_FIELDS(SP_FIELD_ENUMERATOR)
  SP_OPTIMIZER_OPTION_FIELDS(SP_FIELD_ENUMERATOR) SP_RUN_OPTION_FIELDS(SP_FIELD_ENUMERATOR)
};
#undef SP_FIELD_ENUMERATOR

// "PipelineOptions::micro_batches": how messages name a field (the CLI shows its flag instead).
const std::string& field_name(Field field);

// Throws UsageError naming the first field (as "PipelineOptions::micro_batches") whose value
// is impossible on its own or with the others. Needs no model and no data.
void check_options(const Options& options);

// Names of enum values as config.json and the CLI spell them ("time", "1f1b-stash", ...), and
// back; from_name throws UsageError naming `field` and listing the allowed names.
std::string to_string(ProgressMode mode);
ProgressMode progress_from_name(const std::string& name,
                                const std::string& field = "RunOptions::progress");
std::string to_string(Layout layout);  // "auto", "nchw", "channels-last"
Layout layout_from_name(const std::string& name, const std::string& field = "PipelineOptions::layout");

// `asked` with kAuto decided (never kAuto): the zoo's choice for `zoo_model`
// (models::prefers_channels_last), NCHW where it names no zoo network (empty: a model file
// or the caller's own network). PipelineTrainer decides by the name of the model it is given;
// the second form by RunOptions::model, or NCHW for RunOptions::model_file, as train/ builds it.
Layout resolved_layout(Layout asked, const std::string& zoo_model);
Layout resolved_layout(const Options& options);

// The total intra-op thread count `threads` stands for (0: all cores), and each worker's
// (partitions x replicas share them).
int resolved_threads(const PipelineOptions& options);
int threads_per_worker(const PipelineOptions& options, int partitions);

// The replica this process runs: with the processes executor rank / (world size / replicas)
// (UsageError when replicas does not divide the world size), else 0 (local executors run
// every replica).
int own_replica(const PipelineOptions& options);

}  // namespace stalepipe
