#include "stalepipe/partition/profile.h"

#include <malloc.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

#include <ATen/Parallel.h>
#include <nlohmann/json.hpp>
#include <torch/autograd.h>
#include <torch/cuda.h>

#include "common/json_number_impl.h"
#include "stalepipe/common/error.h"
#include "stalepipe/common/median.h"
#include "stalepipe/models/layer_table.h"
#include "stalepipe/models/model.h"

namespace stalepipe::partition {
namespace {

using Clock = std::chrono::steady_clock;

double ms_between(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double, std::milli>(to - from).count();
}

double ms_since(Clock::time_point start) { return ms_between(start, Clock::now()); }

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
  std::vector<std::vector<double>> forward_ms, backward_ms;  // [unit] -> one per recorded step
};

// One whole training step, timed at the unit boundaries: forwards between consecutive units'
// outputs, backwards between the moments the gradient hooks of consecutive outputs fire.
// Timing each unit on its own, on fresh memory, instead summed to 8% (ResNet-110) and 15%
// (ResNet-56) more than a measured step, over-charging the first units, which put the
// balanced cut off (docs/performance.md). With `record`, adds the times to `times` and the
// memory to `rows`.
void time_step(models::Model& model, const torch::Tensor& x, bool record, std::vector<UnitProfile>& rows,
               StepTimes& times) {
  const size_t U = model.units.size();
  const bool cpu = x.device().is_cpu();
  auto sync = [cpu] {
    if (!cpu) torch::cuda::synchronize();
  };
  std::vector<Clock::time_point> grad_ready(U);
  std::vector<torch::Tensor> outs;
  torch::Tensor h = x.detach();
  for (size_t u = 0; u < U; ++u) {
    const int64_t heap_before = heap_in_use();
    const auto start = Clock::now();
    torch::Tensor out = model.units[u].module.forward(h);
    sync();
    const double f_ms = ms_since(start);
    const int64_t kept = heap_in_use() - heap_before;
    if (out.requires_grad()) {
      out.register_hook([&grad_ready, &sync, u](const torch::Tensor&) {
        sync();
        grad_ready[u] = Clock::now();
      });
    }
    if (record) {
      times.forward_ms[u].push_back(f_ms);
      auto& row = rows[u];
      row.output_bytes = tensor_bytes(out);
      row.kept_bytes = std::max(row.kept_bytes, cpu ? std::max(kept, row.output_bytes) : row.output_bytes);
    }
    outs.push_back(out);
    h = out;
  }
  const auto backward_start = Clock::now();
  if (h.requires_grad()) h.backward(torch::ones_like(h));
  sync();
  const auto backward_end = Clock::now();
  if (!record) return;
  for (size_t u = 0; u < U; ++u) {
    double b_ms = 0;  // a unit before the first one with weights has no backward
    if (outs[u].requires_grad()) {
      const auto from = u + 1 == U ? backward_start : grad_ready[u];
      const auto to = u > 0 && outs[u - 1].requires_grad() ? grad_ready[u - 1] : backward_end;
      b_ms = ms_between(from, to);
    }
    times.backward_ms[u].push_back(b_ms);
  }
}

}  // namespace

Profile profile_model(models::Model& model, const ProfileOptions& options) {
  SP_CHECK_ARG(options.batch_size >= 1, "ProfileOptions::batch_size must be >= 1, got ", options.batch_size);
  SP_CHECK_ARG(options.repeats >= 1, "ProfileOptions::repeats must be >= 1, got ", options.repeats);
  SP_CHECK_ARG(options.warmup >= 0, "ProfileOptions::warmup must be >= 0, got ", options.warmup);
  SP_CHECK_ARG(options.threads >= 0, "ProfileOptions::threads must be >= 0, got ", options.threads);
  const int threads_before = at::get_num_threads();
  if (options.threads > 0) at::set_num_threads(options.threads);

  Profile profile;
  profile.model = model.name;
  profile.batch_size = options.batch_size;
  profile.threads = at::get_num_threads();
  profile.channels = model.input.channels;
  profile.units = unit_rows(model);
  const torch::Tensor x = profile_input(model, options.batch_size, options.memory_format);
  profile.input_bytes = tensor_bytes(x);

  const size_t U = model.units.size();
  StepTimes times{std::vector<std::vector<double>>(U), std::vector<std::vector<double>>(U)};
  for (int r = 0; r < options.warmup + options.repeats; ++r) {
    time_step(model, x, r >= options.warmup, profile.units, times);
  }
  for (auto& unit : model.units) {
    for (auto& p : unit.module.ptr()->parameters()) {
      if (p.grad().defined()) p.mutable_grad() = torch::Tensor();
    }
  }
  for (size_t u = 0; u < U; ++u) {
    profile.units[u].forward_ms = median(times.forward_ms[u]);
    profile.units[u].backward_ms = median(times.backward_ms[u]);
  }
  at::set_num_threads(threads_before);
  return profile;
}

std::string to_json(const Profile& profile) {
  nlohmann::json units = nlohmann::json::array();
  for (const auto& u : profile.units) {
    units.push_back({{"index", u.index}, {"name", u.name}, {"weight_layers", u.weight_layers},
                     {"forward_ms", u.forward_ms}, {"backward_ms", u.backward_ms},
                     {"output_bytes", u.output_bytes}, {"kept_bytes", u.kept_bytes},
                     {"parameter_bytes", u.parameter_bytes}, {"forward_mflops", u.forward_mflops}});
  }
  nlohmann::json j = {{"model", profile.model},     {"batch_size", profile.batch_size},
                      {"threads", profile.threads}, {"channels", profile.channels},
                      {"input_bytes", profile.input_bytes}, {"units", units}};
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
      p.units.push_back(row);
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
