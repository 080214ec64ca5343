#include "stalepipe/partition/profile.h"

#include <malloc.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>

#include <ATen/Parallel.h>
#include <c10/core/DeviceGuard.h>
#include <nlohmann/json.hpp>
#include <torch/autograd.h>
#ifdef STALEPIPE_CUDA
#include <ATen/cuda/CUDAEvent.h>
#endif

#include "common/backward_impl.h"
#include "common/json_number_impl.h"
#include "stalepipe/common/device.h"
#include "stalepipe/common/error.h"
#include "stalepipe/common/median.h"
#include "stalepipe/models/layer_table.h"
#include "stalepipe/models/model.h"
#include "stalepipe/models/skips.h"
#include "stalepipe/partition/plan.h"

namespace stalepipe::partition {
namespace {

// Points in one step's time, read after the step: on the CPU the clock when marked; on a GPU
// an event recorded on the device's current stream when marked, so that the step runs with no
// synchronisation between its units, as a partition runs. Synchronising at every unit's
// boundary instead exposed each unit's kernel launches: the units' sum came out 9-30% above
// their partition's time timed as one block (ResNet-56..362 on an H200). The events are made
// once, before the first step, and recorded again at each: making one is host work that
// would delay the kernels queued after it.
class StepClock {
 public:
  // `marks`: the most points a step marks. The caller keeps `device` current (a DeviceGuard)
  // while it marks.
  StepClock(const torch::Device& device, size_t marks) : cuda_(device.is_cuda()) {
#ifdef STALEPIPE_CUDA
    if (cuda_) {
      for (size_t i = 0; i < marks; ++i) events_.push_back(std::make_unique<at::cuda::CUDAEvent>(cudaEventDefault));
    }
#else
    SP_CHECK(!cuda_, "profile: timing on a GPU needs LibTorch with CUDA");
#endif
    times_.reserve(marks);
  }

  void begin_step() {
    used_ = 0;
    times_.clear();
  }

  // The index of a new point. Called by one thread: the backward's hooks run on the thread
  // that runs the step (common/backward_impl.h).
  size_t mark() {
#ifdef STALEPIPE_CUDA
    if (cuda_) {
      SP_CHECK(used_ < events_.size(), "profile: a step marked more than the ", events_.size(), " points it was given");
      events_[used_]->record();
      return used_++;
    }
#endif
    times_.push_back(std::chrono::steady_clock::now());
    return times_.size() - 1;
  }

  // Waits for the device's work up to the last point: every point marked so far can then be read.
  void finish() const {
#ifdef STALEPIPE_CUDA
    if (cuda_ && used_ > 0) events_[used_ - 1]->synchronize();
#endif
  }

  double ms_between(size_t from, size_t to) const {
#ifdef STALEPIPE_CUDA
    if (cuda_) return events_.at(from)->elapsed_time(*events_.at(to));
#endif
    return std::chrono::duration<double, std::milli>(times_.at(to) - times_.at(from)).count();
  }

 private:
  bool cuda_;
  size_t used_ = 0;
  std::vector<std::chrono::steady_clock::time_point> times_;
#ifdef STALEPIPE_CUDA
  std::vector<std::unique_ptr<at::cuda::CUDAEvent>> events_;
#endif
};

// Bytes the process holds from malloc (all arenas) plus mmapped blocks: LibTorch's CPU
// allocator is posix_memalign underneath, so tensors show up here.
int64_t heap_in_use() {
  const struct mallinfo2 info = mallinfo2();
  return static_cast<int64_t>(info.uordblks + info.hblkhd);
}

int64_t tensor_bytes(const torch::Tensor& t) {
  return static_cast<int64_t>(t.numel()) * static_cast<int64_t>(t.element_size());
}

std::string layers_text(const std::vector<int>& layers) {
  if (layers.empty()) return "-";
  if (layers.size() == 1) return std::to_string(layers.front());
  return std::to_string(layers.front()) + "-" + std::to_string(layers.back());
}

}  // namespace

namespace {

// Random input of `batch` samples on the device and dtype of the model's first parameter.
torch::Tensor profile_input(const models::Model& model, int64_t batch, torch::MemoryFormat memory_format) {
  auto tensor_options = torch::TensorOptions().dtype(torch::kFloat32);
  for (const auto& unit : model.units) {
    const auto params = unit.module.ptr()->parameters();
    if (!params.empty()) {
      tensor_options = tensor_options.device(params.front().device()).dtype(params.front().dtype());
      break;
    }
  }
  return torch::randn({batch, model.input.channels, model.input.height, model.input.width}, tensor_options)
      .contiguous(memory_format);
}

// One row per unit with what needs no timing; puts every unit in training mode.
std::vector<UnitProfile> unit_rows(models::Model& model) {
  const auto info = models::describe_units(model);
  std::vector<UnitProfile> rows;
  for (size_t u = 0; u < model.units.size(); ++u) {
    auto& unit = model.units[u];
    unit.module.ptr()->train();
    UnitProfile row;
    row.index = static_cast<int>(u);
    row.name = unit.name;
    row.weight_layers = unit.weight_layers;
    row.forward_mflops = info[u].forward_mflops;
    for (const auto& p : unit.module.ptr()->parameters()) {
      if (p.requires_grad()) row.parameter_bytes += tensor_bytes(p);
    }
    rows.push_back(row);
  }
  return rows;
}

struct StepTimes {
  std::vector<std::vector<double>> forward_ms, backward_ms;  // [group] -> one per recorded step
};

// Units timed as one: [first, end) each, in order, covering the model.
using Groups = std::vector<std::pair<size_t, size_t>>;

// One whole training step, timed at the boundaries of the groups: forwards between
// consecutive groups' outputs, backwards between the moments the gradient hooks of
// consecutive outputs fire. Timing each unit on its own, on fresh memory, instead summed to
// 8% (ResNet-110) and 15% (ResNet-56) more than a measured step, over-charging the first
// units, which put the balanced cut off (docs/performance.md). With `record`, adds the times
// to `times` and, when `rows` is given (one group per unit), the memory to `rows`.
void time_step(models::Model& model, const torch::Tensor& x, const Groups& groups, bool record,
               std::vector<UnitProfile>* rows, StepClock& clock, StepTimes& times) {
  const size_t G = groups.size();
  // The heap is read only where it holds the tensors, and only for the rows.
  const bool heap = x.device().is_cpu() && record && rows;
  clock.begin_step();
  std::vector<size_t> forward_start(G), forward_end(G), grad_ready(G);
  std::vector<torch::Tensor> outs;
  torch::Tensor h = x.detach();
  models::SkipTable skips;
  for (size_t g = 0; g < G; ++g) {
    const int64_t heap_before = heap ? heap_in_use() : 0;
    forward_start[g] = clock.mark();
    for (size_t u = groups[g].first; u < groups[g].second; ++u) {
      models::Unit& unit = model.units[u];
      h = models::forward_unit(unit.module, unit.name, unit.skips, h, skips);
      if (record && rows) {
        for (const std::string& name : unit.skips.stashes) (*rows)[u].stash_bytes[name] = tensor_bytes(skips.at(name));
      }
    }
    forward_end[g] = clock.mark();
    const int64_t kept = heap ? heap_in_use() - heap_before : 0;
    if (h.requires_grad()) {
      h.register_hook([&grad_ready, &clock, g](const torch::Tensor&) { grad_ready[g] = clock.mark(); });
    }
    if (record && rows) {
      auto& row = (*rows)[g];
      row.output_bytes = tensor_bytes(h);
      row.kept_bytes = std::max(row.kept_bytes, heap ? std::max(kept, row.output_bytes) : row.output_bytes);
    }
    outs.push_back(h);
  }
  const size_t backward_start = clock.mark();
  if (h.requires_grad()) backward_on_this_thread({h}, {torch::ones_like(h)});  // as the stages run it
  const size_t backward_end = clock.mark();
  clock.finish();
  if (!record) return;
  for (size_t g = 0; g < G; ++g) {
    times.forward_ms[g].push_back(clock.ms_between(forward_start[g], forward_end[g]));
    double b_ms = 0;  // a group before the first one with weights has no backward
    if (outs[g].requires_grad()) {
      const size_t from = g + 1 == G ? backward_start : grad_ready[g];
      const size_t to = g > 0 && outs[g - 1].requires_grad() ? grad_ready[g - 1] : backward_end;
      b_ms = clock.ms_between(from, to);
    }
    times.backward_ms[g].push_back(b_ms);
  }
}

void check_options(const ProfileOptions& options) {
  SP_CHECK_ARG(options.batch_size >= 1, "ProfileOptions::batch_size must be >= 1, got ", options.batch_size);
  SP_CHECK_ARG(options.repeats >= 1, "ProfileOptions::repeats must be >= 1, got ", options.repeats);
  SP_CHECK_ARG(options.warmup >= 0, "ProfileOptions::warmup must be >= 0, got ", options.warmup);
  SP_CHECK_ARG(options.threads >= 0, "ProfileOptions::threads must be >= 0, got ", options.threads);
  check_device(options.device, "ProfileOptions::device");
}

// Moves the model to options.device and runs warm-up and measured steps timed by `groups`;
// returns the times and, through `rows` (may be null), the memory. Leaves no gradients.
StepTimes run_steps(models::Model& model, const ProfileOptions& options, const Groups& groups,
                    std::vector<UnitProfile>* rows, int64_t* input_bytes) {
  const int threads_before = at::get_num_threads();
  if (options.threads > 0) at::set_num_threads(options.threads);
  // Events and kernels go to the profiled device's current stream, whichever device is current.
  c10::OptionalDeviceGuard on_device;
  if (!options.device.is_cpu()) on_device.reset_device(options.device);
  for (auto& unit : model.units) unit.module.ptr()->to(options.device);
  const torch::Tensor x = profile_input(model, options.batch_size, options.memory_format);
  if (input_bytes) *input_bytes = tensor_bytes(x);
  StepTimes times{std::vector<std::vector<double>>(groups.size()), std::vector<std::vector<double>>(groups.size())};
  StepClock clock(options.device, 3 * groups.size() + 2);  // each group's 2 and hook, the backward's 2
  for (int r = 0; r < options.warmup + options.repeats; ++r) {
    time_step(model, x, groups, r >= options.warmup, rows, clock, times);
  }
  for (auto& unit : model.units) {
    for (auto& p : unit.module.ptr()->parameters()) {
      if (p.grad().defined()) p.mutable_grad() = torch::Tensor();
    }
  }
  at::set_num_threads(threads_before);
  return times;
}

}  // namespace

Profile profile_model(models::Model& model, const ProfileOptions& options) {
  check_options(options);
  Profile profile;
  profile.model = model.name;
  profile.batch_size = options.batch_size;
  profile.threads = options.threads > 0 ? options.threads : at::get_num_threads();
  profile.channels = model.input.channels;
  profile.device = options.device.str();
  profile.units = unit_rows(model);
  Groups units;
  for (size_t u = 0; u < model.units.size(); ++u) units.emplace_back(u, u + 1);
  const StepTimes times = run_steps(model, options, units, &profile.units, &profile.input_bytes);
  for (size_t u = 0; u < units.size(); ++u) {
    profile.units[u].forward_ms = median(times.forward_ms[u]);
    profile.units[u].backward_ms = median(times.backward_ms[u]);
  }
  return profile;
}

std::vector<PartitionTiming> measure_partitions(models::Model& model, const Plan& plan,
                                                const ProfileOptions& options) {
  check_options(options);
  SP_CHECK_ARG(!plan.unit_ranges.empty() && plan.unit_ranges.back().second == model.units.size(),
               "measure_partitions: the plan does not cut the ", model.units.size(), " units of ", model.name);
  for (auto& unit : model.units) unit.module.ptr()->train();  // as profile_model measures
  const StepTimes times = run_steps(model, options, plan.unit_ranges, nullptr, nullptr);
  std::vector<PartitionTiming> partitions;
  for (size_t k = 0; k < plan.unit_ranges.size(); ++k) {
    partitions.push_back({plan.unit_ranges[k].first, plan.unit_ranges[k].second, median(times.forward_ms[k]),
                          median(times.backward_ms[k])});
  }
  return partitions;
}

int64_t stash_bytes(const Profile& profile, const std::string& name) {
  int64_t bytes = 0;
  for (const auto& unit : profile.units) {
    const auto it = unit.stash_bytes.find(name);
    if (it != unit.stash_bytes.end()) bytes += it->second;
  }
  return bytes;
}

std::string to_json(const Profile& profile) {
  nlohmann::json units = nlohmann::json::array();
  for (const auto& u : profile.units) {
    nlohmann::json stashes = nlohmann::json::object();
    for (const auto& [name, bytes] : u.stash_bytes) stashes[name] = bytes;
    units.push_back({{"index", u.index}, {"name", u.name}, {"weight_layers", u.weight_layers},
                     {"forward_ms", u.forward_ms}, {"backward_ms", u.backward_ms},
                     {"output_bytes", u.output_bytes}, {"kept_bytes", u.kept_bytes},
                     {"parameter_bytes", u.parameter_bytes}, {"forward_mflops", u.forward_mflops},
                     {"stash_bytes", stashes}});
  }
  nlohmann::json j = {{"model", profile.model},     {"batch_size", profile.batch_size},
                      {"threads", profile.threads}, {"channels", profile.channels},
                      {"input_bytes", profile.input_bytes}, {"device", profile.device},
                      {"units", units}};
  if (!profile.partitions.empty()) {
    nlohmann::json partitions = nlohmann::json::array();
    for (const auto& t : profile.partitions) {
      partitions.push_back({{"first_unit", t.first_unit}, {"end_unit", t.end_unit},
                            {"forward_ms", t.forward_ms}, {"backward_ms", t.backward_ms}});
    }
    j["partitions"] = partitions;
  }
  return j.dump(2) + "\n";
}

Profile from_json(const std::string& text, const std::string& source) {
  Profile p;
  try {
    const auto j = nlohmann::json::parse(text);
    p.model = j.at("model").get<std::string>();
    p.batch_size = json_get<int64_t>(j.at("batch_size"));
    p.threads = json_get<int>(j.at("threads"));
    p.channels = j.value("channels", int64_t{0});
    p.input_bytes = j.value("input_bytes", int64_t{0});
    p.device = j.value("device", std::string("cpu"));
    for (const auto& u : j.at("units")) {
      UnitProfile row;
      row.index = json_get<int>(u.at("index"));
      row.name = u.at("name").get<std::string>();
      row.weight_layers = u.at("weight_layers").get<std::vector<int>>();
      row.forward_ms = u.at("forward_ms").get<double>();
      row.backward_ms = u.at("backward_ms").get<double>();
      row.output_bytes = json_get<int64_t>(u.at("output_bytes"));
      row.kept_bytes = json_get<int64_t>(u.at("kept_bytes"));
      row.parameter_bytes = json_get<int64_t>(u.at("parameter_bytes"));
      row.forward_mflops = u.value("forward_mflops", 0.0);
      const nlohmann::json stashes = u.value("stash_bytes", nlohmann::json::object());
      for (const auto& [name, bytes] : stashes.items()) row.stash_bytes[name] = json_get<int64_t>(bytes);
      p.units.push_back(row);
    }
    for (const auto& t : j.value("partitions", nlohmann::json::array())) {
      p.partitions.push_back({json_get<size_t>(t.at("first_unit")), json_get<size_t>(t.at("end_unit")),
                              t.at("forward_ms").get<double>(), t.at("backward_ms").get<double>()});
    }
  } catch (const nlohmann::json::exception& e) {
    throw RuntimeError(source + ": not a stalepipe profile: " + e.what());
  }
  return p;
}

std::string format_profile_table(const Profile& p) {
  std::string out = c10::str("model ", p.model, ", batch ", p.batch_size, ", ", p.threads,
                             " thread(s); median ms; MB = 1e6 bytes per mini-batch; kept = what "
                             "the forward leaves alive for the backward (output + saved tensors)\n");
  char line[256];
  std::snprintf(line, sizeof line, "%4s  %-12s %7s %9s %9s %10s %10s %10s\n", "unit", "name",
                "layers", "fwd ms", "bwd ms", "output MB", "kept MB", "params MB");
  out += line;
  double f = 0, b = 0, kept = 0, params = 0;
  for (const auto& u : p.units) {
    std::snprintf(line, sizeof line, "%4d  %-12s %7s %9.3f %9.3f %10.3f %10.3f %10.3f\n", u.index,
                  u.name.c_str(), layers_text(u.weight_layers).c_str(), u.forward_ms,
                  u.backward_ms, u.output_bytes / 1e6, u.kept_bytes / 1e6, u.parameter_bytes / 1e6);
    out += line;
    f += u.forward_ms;
    b += u.backward_ms;
    kept += static_cast<double>(u.kept_bytes);
    params += static_cast<double>(u.parameter_bytes);
  }
  std::snprintf(line, sizeof line, "%4s  %-12s %7s %9.3f %9.3f %10s %10.3f %10.3f\n", "", "total",
                "", f, b, "", kept / 1e6, params / 1e6);
  out += line;
  return out;
}

}  // namespace stalepipe::partition

namespace stalepipe::partition {

std::string format_partition_check(const Profile& p) {
  std::string out = "partition  units      model fwd  measured  ratio   model bwd  measured  ratio   (ms; model = sum of units)\n";
  char line[256];
  for (size_t k = 0; k < p.partitions.size(); ++k) {
    const auto& t = p.partitions[k];
    double f = 0, b = 0;
    for (size_t u = t.first_unit; u < t.end_unit && u < p.units.size(); ++u) {
      f += p.units[u].forward_ms;
      b += p.units[u].backward_ms;
    }
    std::snprintf(line, sizeof line, "%9zu  %4zu-%-4zu %10.3f %9.3f %6.3f %11.3f %9.3f %6.3f\n", k + 1,
                  t.first_unit, t.end_unit - 1, f, t.forward_ms, t.forward_ms > 0 ? f / t.forward_ms : 0.0, b,
                  t.backward_ms, t.backward_ms > 0 ? b / t.backward_ms : 0.0);
    out += line;
  }
  return out;
}

}  // namespace stalepipe::partition
