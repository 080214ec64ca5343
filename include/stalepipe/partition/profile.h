// Per-unit cost profile: what `stalepipe profile` prints (as `caffe time` does) and what the
// balanced partitioner (balance.h) and the simulator (sim/simulate.h) read.
//
// Units are measured inside whole training steps, in training mode, on options.device (the
// model is moved there): a forward through all units one after another,
// then one backward from a ones-like gradient of the last output. A unit's forward time is the
// wall time of its forward call; its backward time runs from the moment the gradient of its
// output is ready to the moment the gradient of its input is (tensor hooks on the outputs;
// the first unit's input is plain data, as exec::Stage feeds it, so its backward ends with
// the step). Times are steady_clock wall times in milliseconds, the median over `repeats`
// steps after `warmup` steps. On a CUDA device the clock is read after torch::cuda::synchronize(),
// at every unit boundary, so a unit's time includes launching its kernels without overlap
// with the next unit's: measure_partitions times whole partitions to see what that costs.
//
// Memory, per mini-batch of batch_size samples:
//   output_bytes     - the unit's output tensor (what a pipeline register after it carries);
//   kept_bytes       - what the forward leaves alive until the backward: the heap growth across
//                      the forward while its output and graph are held (saved tensors, output,
//                      graph nodes), measured with glibc's mallinfo2 on CPU; never less than
//                      output_bytes (on other devices, or if the allocator hides it, it is
//                      output_bytes);
//   parameter_bytes  - trainable parameters (4 bytes each for float).
//
// Side effects: the forwards run in training mode, so batch-norm running statistics change,
// and gradients are accumulated and then zeroed. Profile a fresh model, not one being trained.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <torch/types.h>

namespace stalepipe::models {
class Model;
}

namespace stalepipe::partition {

struct Plan;

struct UnitProfile {
  int index = 0;             // position in model.units
  std::string name;          // unit name
  std::vector<int> weight_layers;
  double forward_ms = 0;     // median
  double backward_ms = 0;    // median
  int64_t output_bytes = 0;  // per mini-batch
  int64_t kept_bytes = 0;    // per mini-batch, >= output_bytes
  int64_t parameter_bytes = 0;
  double forward_mflops = 0;  // per sample (models::describe_units)
  // Per mini-batch: each skip tensor the unit stashes (models/skips.h), by name.
  std::map<std::string, int64_t> stash_bytes;

  // A recomputed unit runs its forward once more, just before its backward.
  double backward_ms_with(bool recomputed) const { return backward_ms + (recomputed ? forward_ms : 0.0); }
};

// One partition timed as a block: synchronised only at its boundaries, as a pipeline with a
// device per partition runs it.
struct PartitionTiming {
  size_t first_unit = 0, end_unit = 0;  // units [first_unit, end_unit)
  double forward_ms = 0;                // median
  double backward_ms = 0;               // median
};

struct Profile {
  std::string model;
  int64_t batch_size = 0;
  int threads = 0;
  int64_t channels = 0;          // input channels the model was built for
  int64_t input_bytes = 0;       // one input mini-batch
  std::string device = "cpu";    // where it was measured (ProfileOptions::device)
  std::vector<UnitProfile> units;
  std::vector<PartitionTiming> partitions;  // measure_partitions' result, if it was run
};

// Per mini-batch: the bytes of the skip tensor `name` that a unit of `profile` stashes (0 if
// none does, e.g. a profile written before skip tensors were recorded).
int64_t stash_bytes(const Profile& profile, const std::string& name);

struct ProfileOptions {
  int64_t batch_size = 128;
  int threads = 1;  // intra-op threads while measuring (at::set_num_threads); 0 = leave as is
  int warmup = 2;
  int repeats = 5;
  torch::MemoryFormat memory_format = torch::MemoryFormat::Contiguous;  // of the input (as the units' weights)
  torch::Device device = torch::kCPU;  // where the model is moved and measured
};

// Measures every unit of `model` (moved to options.device). Throws UsageError for
// batch_size < 1, repeats < 1, warmup < 0, or a device this machine does not have (a CUDA
// device with a CPU-only LibTorch).
Profile profile_model(models::Model& model, const ProfileOptions& options = {});

// Times each partition of `plan` (a cut of `model`) as one block inside whole training steps,
// the same way as profile_model times units, with the same options and checks.
std::vector<PartitionTiming> measure_partitions(models::Model& model, const Plan& plan,
                                                const ProfileOptions& options = {});

// JSON text (the --json file of `stalepipe profile`) and back. from_json throws RuntimeError
// naming `source` if the text is not such a profile.
std::string to_json(const Profile& profile);
Profile from_json(const std::string& text, const std::string& source);

// Aligned table, one line per unit and a total line:
//   unit  name  layers  fwd ms  bwd ms  output MB  kept MB  params MB
// The header names the batch size, threads and what "kept" means. Ends with a newline.
std::string format_profile_table(const Profile& profile);

// One line per measured partition (profile.partitions): its units, the sum of its units'
// forward and backward medians (the simulator's compute model, sim/simulate.h), the measured
// block times and model / measured. Ends with a newline.
std::string format_partition_check(const Profile& profile);

}  // namespace stalepipe::partition
