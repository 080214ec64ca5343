#include "stalepipe/perf/steady.h"

#include "bench_impl.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>

#include <ATen/Context.h>
#include <nlohmann/json.hpp>
#include <torch/cuda.h>

#ifdef STALEPIPE_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

#include "stalepipe/api/assemble.h"
#include "stalepipe/common/clock.h"
#include "stalepipe/common/error.h"
#include "stalepipe/exec/executor.h"
#include "stalepipe/exec/pipeline.h"
#include "stalepipe/exec/precision.h"
#include "stalepipe/models/zoo.h"
#include "stalepipe/partition/plan.h"
#include "stalepipe/schedule/schedule.h"

namespace stalepipe::perf {
namespace {

using Clock = SteadyClock;

// The training tree measured: the caller's, with bench's constant lr.
Options steady_options(const BenchOptions& o) {
  Options x = o.training();
  x.optimizer().lr(kBenchLr).lr_schedule(LrScheduleKind::kConstant);
  return x;
}

void check_steady(const BenchOptions& o, const Options& x) {
  SP_CHECK_ARG(o.seconds() > 0 && o.seconds() <= 3600, "BenchOptions::seconds must be in (0, 3600], got ", o.seconds());
  SP_CHECK_ARG(o.rounds() == 1, "BenchOptions::rounds ", o.rounds(), ": with BenchOptions::seconds bench times one run; "
               "alternate runs from outside (scripts/gpu-check.sh speed does)");
  SP_CHECK_ARG(o.warmup_steps() >= 0, "BenchOptions::warmup_steps must be >= 0, got ", o.warmup_steps());
  SP_CHECK_ARG(o.channels() >= 1 && o.channels() <= 64, "BenchOptions::channels must be 1..64, got ", o.channels());
  const PipelineOptions& p = x.pipeline();
  SP_CHECK_ARG(p.replicas() == 1, field_name(Field::replicas), " ", p.replicas(),
               ": BenchOptions::seconds times one pipeline; give 1");
  SP_CHECK_ARG(p.schedule() != ScheduleKind::kHybrid, field_name(Field::schedule),
               " hybrid: BenchOptions::seconds times one schedule; give stale, sequential, gpipe or 1f1b-stash");
  SP_CHECK_ARG(p.executor() != ExecutorKind::kProcesses, field_name(Field::executor),
               " processes: BenchOptions::seconds times this process's partitions; give threads or emulated");
  stalepipe::check_options(x);
}

// The distinct CUDA devices of `stages`, in partition order, each with its index ("cuda" is
// LibTorch's current device, which this program leaves at 0).
std::vector<torch::Device> cuda_devices(const std::vector<exec::Stage*>& stages) {
  std::vector<torch::Device> devices;
  for (const exec::Stage* s : stages) {
    if (!s->device().is_cuda()) continue;
    const torch::Device d(torch::kCUDA, s->device().has_index() ? s->device().index() : 0);
    if (std::find(devices.begin(), devices.end(), d) == devices.end()) devices.push_back(d);
  }
  return devices;
}

// Waits until every kernel queued on `devices` has run: a timed part ends when the work does.
void synchronize(const std::vector<torch::Device>& devices) {
  for (const torch::Device& d : devices) torch::cuda::synchronize(d.index());
}

// The CUDA caching allocator's statistics, kept per device; there are none on the CPU.
#ifdef STALEPIPE_CUDA
// The statistics' first slot aggregates the small and the large pool (StatType::AGGREGATE).
constexpr size_t kAllPools = 0;

void reset_peak_memory(const std::vector<torch::Device>& devices) {
  for (const torch::Device& d : devices) c10::cuda::CUDACachingAllocator::resetPeakStats(d.index());
}

std::vector<DeviceMemory> peak_memory(const std::vector<torch::Device>& devices) {
  std::vector<DeviceMemory> out;
  for (const torch::Device& d : devices) {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(d.index());
    out.push_back({d.str(), static_cast<int64_t>(stats.reserved_bytes[kAllPools].peak)});
  }
  return out;
}
#else
void reset_peak_memory(const std::vector<torch::Device>&) {}
std::vector<DeviceMemory> peak_memory(const std::vector<torch::Device>&) { return {}; }
#endif

// The fixed batch: N(0, 1) pixels and uniform labels on the first partition's device, in the
// layout the partitions take.
exec::Input fixed_batch(const Options& x, const models::InputShape& shape, const torch::Device& device) {
  const int64_t B = x.data().batch_size();
  const auto format = memory_format(x);
  exec::Input in;
  in.x = torch::randn({B, shape.channels, shape.height, shape.width}).to(device).contiguous(format);
  in.target = torch::randint(0, shape.num_classes, {B}, torch::kLong).to(device);
  return in;
}

// Trains segments from step `first` until `seconds` have passed; fills the report's steps,
// segments, seconds, rate and last loss. `rate`: images/s so far (the warm-up's), which sizes
// the first segment.
void run_timed(SteadyReport& r, exec::Executor& executor, std::vector<exec::Stage*>& stages,
               exec::SegmentContext context, int64_t first, double rate) {
  const BenchOptions& o = r.options;
  const PipelineOptions& p = o.training().pipeline();
  const int K = static_cast<int>(stages.size());
  const int64_t B = o.training().data().batch_size();
  const auto devices = cuda_devices(stages);
  std::atomic<bool> stop{false};
  const auto start = Clock::now();
  const auto deadline = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.seconds()));
  context.stop = &stop;
  const auto on_step = context.on_step;
  context.on_step = [&](int64_t t, const exec::StepLoss& s) {
    on_step(t, s);
    if (Clock::now() >= deadline) stop = true;
  };
  int64_t step = first;
  while (!stop && seconds_since(start) < o.seconds()) {
    const double left = o.seconds() - seconds_since(start);
    // 10% more steps than the rate so far needs; `stop` ends the segment at the deadline.
    const int64_t n = rate > 0 ? std::clamp<int64_t>(static_cast<int64_t>(std::ceil(1.1 * left * rate / B)), 4 * K + 2, 1 << 20)
                               : 4 * K + 2;
    const auto segment_start = Clock::now();
    const auto result = executor.run(schedule::make_schedule(p.schedule(), K, step, step + n, p.micro_batches()),
                                     stages, context);
    synchronize(devices);
    SP_CHECK(result.end_step > step, "bench: a timed segment from mini-batch ", step, " trained nothing");
    r.timed_steps += result.end_step - step;
    r.segments += 1;
    rate = static_cast<double>((result.end_step - step) * B) / seconds_since(segment_start);
    step = result.end_step;
  }
  r.timed_seconds = seconds_since(start);
  r.images_per_second = static_cast<double>(r.timed_steps * B) / r.timed_seconds;
}

}  // namespace

BackendSwitches read_backend_switches() {
  const auto& c = at::globalContext();
  return {c.benchmarkCuDNN(), c.allowTF32CuBLAS(), c.allowTF32CuDNN()};
}

SteadyReport run_steady(const BenchOptions& o, const std::function<void(const std::string&)>& log) {
  const Options x = steady_options(o);
  check_steady(o, x);
  // What exec::Pipeline sets for a GPU partition, set on the CPU too, as bench/gpu_peer.py
  // sets it whatever the device: a dry run then states the switches the peer states.
  exec::set_tf32(x.pipeline().precision());
  SteadyReport r;
  r.options = o;
  models::InputShape shape;
  shape.channels = o.channels();
  torch::manual_seed(x.run().seed());  // the weights, then the batch
  auto model = models::make_model(x.run().model(), shape);
  const Assembly a = assemble(model, x);
  exec::Pipeline& pipeline = *a.pipeline;
  std::vector<exec::Stage*>& stages = pipeline.stages();
  const int K = pipeline.num_stages();
  r.ppv = partition::format_ppv(a.plan.ppv);
  r.layout = to_string(resolved_layout(x));
  r.precision = exec::to_string(x.pipeline().precision());
  r.partitions = K;
  r.cuda_graphs = x.pipeline().cuda_graphs();

  const exec::Input batch = fixed_batch(x, model.input, stages.front()->device());
  auto executor = exec::make_executor(x.pipeline().executor());
  exec::SegmentContext context;
  context.input = [&batch](int64_t) { return batch; };
  context.lr = [](int64_t) { return kBenchLr; };
  context.on_step = [&r](int64_t, const exec::StepLoss& s) { r.final_loss = s.loss; };
  context.threads_per_worker = a.threads_per_worker;
  context.read_losses_every = exec::default_read_losses_every(stages.back()->device());
  const auto devices = cuda_devices(stages);

  const int64_t W = o.warmup_steps();
  double warm_rate = 0;
  if (W > 0) {
    if (log) log(c10::str("warm-up: ", W, " steps"));
    const auto start = Clock::now();
    executor->run(schedule::make_schedule(x.pipeline().schedule(), K, 0, W, x.pipeline().micro_batches()), stages, context);
    synchronize(devices);
    warm_rate = static_cast<double>(W * x.data().batch_size()) / seconds_since(start);
  }
  std::vector<PartitionPasses> before;
  for (const exec::Stage* s : stages) before.push_back({s->device().str(), s->graphed_passes(), s->eager_passes()});
  reset_peak_memory(devices);
  if (log) log(c10::str("timing whole steps for ", o.seconds(), " s"));
  run_timed(r, *executor, stages, context, W, warm_rate);
  r.memory = peak_memory(devices);
  r.switches = read_backend_switches();
  for (int k = 0; k < K; ++k) {
    r.passes.push_back({before[k].device, stages[k]->graphed_passes() - before[k].graphed_passes,
                        stages[k]->eager_passes() - before[k].eager_passes});
  }
  return r;
}

std::string format_steady_report(const SteadyReport& r) {
  const Options& t = r.options.training();
  const char* on_off[] = {"off", "on"};
  std::string s = c10::str("bench ", t.run().model(), ": batch ", t.data().batch_size(), ", ", r.layout, ", ", r.precision,
                           ", PPV ", r.ppv, " (", r.partitions, " partition(s)), CUDA graphs ", on_off[r.cuda_graphs], "\n");
  char line[256];
  std::snprintf(line, sizeof(line), "steady state: %.1f images/s, %lld whole steps in %.2f s (%d segment(s)) after %lld warm-up steps\n",
                r.images_per_second, static_cast<long long>(r.timed_steps), r.timed_seconds, r.segments,
                static_cast<long long>(r.options.warmup_steps()));
  s += line;
  s += c10::str("switches: cuDNN benchmark ", on_off[r.switches.cudnn_benchmark], ", TF32 cuBLAS ",
                on_off[r.switches.tf32_cublas], ", TF32 cuDNN ", on_off[r.switches.tf32_cudnn], "\n");
  for (size_t k = 0; k < r.passes.size(); ++k) {
    s += c10::str("partition ", k + 1, " on ", r.passes[k].device, ": ", r.passes[k].graphed_passes, " passes as CUDA graphs, ",
                  r.passes[k].eager_passes, " eager while graphs were on\n");
  }
  for (const DeviceMemory& m : r.memory) {
    std::snprintf(line, sizeof(line), "%s: peak reserved %.1f MiB over the timed part\n", m.device.c_str(),
                  static_cast<double>(m.peak_reserved_bytes) / (1 << 20));
    s += line;
  }
  return s;
}

std::string to_json(const SteadyReport& r) {
  const Options& t = r.options.training();
  nlohmann::json j;
  j["model"] = t.run().model();
  j["batch_size"] = t.data().batch_size();
  j["channels"] = r.options.channels();
  j["ppv"] = r.ppv;
  j["num_partitions"] = r.partitions;
  j["layout"] = r.layout;
  j["precision"] = r.precision;
  j["cuda_graphs"] = r.cuda_graphs;
  j["seed"] = t.run().seed();
  j["warmup_steps"] = r.options.warmup_steps();
  j["seconds"] = r.options.seconds();
  j["timed_steps"] = r.timed_steps;
  j["timed_seconds"] = r.timed_seconds;
  j["segments"] = r.segments;
  j["images_per_second"] = r.images_per_second;
  j["final_loss"] = r.final_loss;
  // The keys bench/gpu_peer.py gives PyTorch's (torch.backends' names).
  j["switches"] = {{"cudnn_benchmark", r.switches.cudnn_benchmark},
                   {"matmul_tf32", r.switches.tf32_cublas},
                   {"cudnn_tf32", r.switches.tf32_cudnn}};
  auto& parts = j["partitions"] = nlohmann::json::array();
  for (const PartitionPasses& p : r.passes) {
    parts.push_back({{"device", p.device}, {"graphed_passes", p.graphed_passes}, {"eager_passes", p.eager_passes}});
  }
  auto& memory = j["memory"] = nlohmann::json::array();
  int64_t total = 0;
  for (const DeviceMemory& m : r.memory) {
    memory.push_back({{"device", m.device}, {"peak_reserved_bytes", m.peak_reserved_bytes}});
    total += m.peak_reserved_bytes;
  }
  j["peak_reserved_bytes"] = r.memory.empty() ? nlohmann::json(nullptr) : nlohmann::json(total);
  return j.dump(2) + "\n";
}

}  // namespace stalepipe::perf
