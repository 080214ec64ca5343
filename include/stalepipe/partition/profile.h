// Per-unit cost profile: what `stalepipe profile` prints (as `caffe time` does) and what the
// balanced partitioner (balance.h) and the simulator (sim/simulate.h) read.
//
// Units are measured inside whole training steps, in training mode, on the device of the
// model's first parameter (CPU for the zoo): a forward through all units one after another,
// then one backward from a ones-like gradient of the last output. A unit's forward time is the
// wall time of its forward call; its backward time runs from the moment the gradient of its
// output is ready to the moment the gradient of its input is (tensor hooks on the outputs;
// the first unit's input is plain data, as exec::Stage feeds it, so its backward ends with
// the step). Times are steady_clock wall times in milliseconds, the median over `repeats`
// steps after `warmup` steps.
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
#include <string>
#include <vector>

namespace stalepipe::models {
class Model;
}

namespace stalepipe::partition {

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

  // A recomputed unit runs its forward once more, just before its backward.
  double backward_ms_with(bool recomputed) const { return backward_ms + (recomputed ? forward_ms : 0.0); }
};

struct Profile {
  std::string model;
  int64_t batch_size = 0;
  int threads = 0;
  int64_t channels = 0;          // input channels the model was built for
  int64_t input_bytes = 0;       // one input mini-batch
  std::vector<UnitProfile> units;
};

struct ProfileOptions {
  int64_t batch_size = 128;
  int threads = 1;  // intra-op threads while measuring (at::set_num_threads); 0 = leave as is
  int warmup = 2;
  int repeats = 5;
  torch::MemoryFormat memory_format = torch::MemoryFormat::Contiguous;  // of the input (as the units' weights)
};

// Measures every unit of `model`. Throws UsageError for batch_size < 1, repeats < 1, warmup < 0.
Profile profile_model(models::Model& model, const ProfileOptions& options = {});

// JSON text (the --json file of `stalepipe profile`) and back. from_json throws RuntimeError
// naming `source` if the text is not such a profile.
std::string to_json(const Profile& profile);
Profile from_json(const std::string& text, const std::string& source);

// Aligned table, one line per unit and a total line:
//   unit  name  layers  fwd ms  bwd ms  output MB  kept MB  params MB
// The header names the batch size, threads and what "kept" means. Ends with a newline.
std::string format_profile_table(const Profile& profile);

}  // namespace stalepipe::partition
