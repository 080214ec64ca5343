#include "stalepipe/perf/memory.h"

#include <algorithm>
#include <cstdio>
#include <memory>

#include <ATen/Parallel.h>
#include <c10/core/Allocator.h>
#include <c10/util/ThreadLocalDebugInfo.h>
#include <nlohmann/json.hpp>
#include <torch/nn/modules/container/sequential.h>

#include "stalepipe/api/assemble.h"
#include "stalepipe/common/error.h"
#include "stalepipe/exec/pipeline.h"
#include "stalepipe/models/memory_format.h"
#include "stalepipe/models/zoo.h"
#include "stalepipe/partition/plan.h"
#include "stalepipe/partition/profile.h"
#include "stalepipe/schedule/schedule.h"
#include "stalepipe/sim/simulate.h"

namespace stalepipe::perf {
namespace {

// The type of reportMemoryUsage's running totals: int64_t in LibTorch 1.13, size_t in 2.x.
template <typename F>
struct TotalArgument;
template <typename C, typename R, typename Size, typename Total>
struct TotalArgument<R (C::*)(void*, Size, Total, Total, c10::Device)> {
  using type = Total;
};
using Total = TotalArgument<decltype(&c10::MemoryReportingInfoBase::reportMemoryUsage)>::type;

// Receives every CPU allocation and free of the thread it is installed on (c10's
// ProfiledCPUMemoryReporter calls it while memoryProfilingEnabled() is true there).
class AllocationCounter final : public c10::MemoryReportingInfoBase {
 public:
  void reportMemoryUsage(void* /*ptr*/, int64_t alloc_size, Total /*total_allocated*/,
                         Total /*total_reserved*/, c10::Device device) override {
    if (!device.is_cpu()) return;
    live_ += alloc_size;
    peak_ = std::max(peak_, live_);
    ++events_;
  }
  bool memoryProfilingEnabled() const override { return true; }
  int64_t peak() const { return peak_; }
  int64_t events() const { return events_; }

 private:
  int64_t live_ = 0, peak_ = 0, events_ = 0;
};

constexpr double kMb = 1e6;

models::InputShape input_shape(const MemoryOptions& o) {
  models::InputShape input;
  input.channels = o.channels;
  return input;
}

// The shapes of what each partition takes and gives (its main tensor first, then its skip
// tensors in the stage's order), from an evaluation forward of a 1-sample batch.
struct PartitionShapes {
  std::vector<std::vector<int64_t>> in, out;
};
std::vector<PartitionShapes> partition_shapes(const MemoryOptions& o, const std::vector<int>& ppv) {
  torch::manual_seed(o.training.run().seed());
  auto model = models::make_model(o.training.run().model(), input_shape(o));
  const auto plan = partition::make_plan(model, ppv);
  exec::Pipeline pipeline(model, plan, std::vector<torch::Device>(plan.num_partitions(), torch::kCPU), optim::UpdateOptions());
  auto shapes_of = [](const exec::StageTensors& t) {
    std::vector<std::vector<int64_t>> shapes = {t.main.sizes().vec()};
    for (const auto& skip : t.skips) shapes.push_back(skip.sizes().vec());
    return shapes;
  };
  std::vector<PartitionShapes> shapes;
  for (const auto& [in, out] : pipeline.trace(torch::zeros({1, o.channels, 32, 32}))) {
    shapes.push_back({shapes_of(in), shapes_of(out)});
  }
  return shapes;
}

std::vector<int64_t> with_batch(std::vector<int64_t> shape, int64_t batch) {
  shape[0] = batch;
  return shape;
}

torch::MemoryFormat memory_format(const MemoryOptions& o) {
  return resolved_layout(o.training.pipeline().layout(), o.training.run().model()) == Layout::kChannelsLast ? torch::MemoryFormat::ChannelsLast
                                                                     : torch::MemoryFormat::Contiguous;
}

int64_t sum_of(const std::vector<int64_t>& bytes) {
  int64_t sum = 0;
  for (int64_t b : bytes) sum += b;
  return sum;
}

}  // namespace

MemoryTable predict_memory(const std::vector<int64_t>& activation_bytes,
                           const std::vector<int64_t>& weight_bytes,
                           const std::vector<int>& max_in_flight, bool momentum,
                           int64_t batch_size, const std::vector<int64_t>& recomputed_bytes) {
  SP_CHECK_ARG(!activation_bytes.empty() && activation_bytes.size() == weight_bytes.size() &&
                   activation_bytes.size() == max_in_flight.size() &&
                   (recomputed_bytes.empty() || recomputed_bytes.size() == activation_bytes.size()),
               "memory prediction: need one activation size, weight size and in-flight count (and "
               "recomputed size, if any) per partition, got ", activation_bytes.size(), ", ",
               weight_bytes.size(), ", ", max_in_flight.size(), " and ", recomputed_bytes.size());
  SP_CHECK_ARG(batch_size >= 1, "memory prediction: batch size must be >= 1, got ", batch_size);
  MemoryTable t;
  t.batch_size = batch_size;
  int64_t A = 0, W = 0, added_activations = 0, added_weights = 0;
  for (size_t k = 0; k < activation_bytes.size(); ++k) {
    SP_CHECK_ARG(activation_bytes[k] >= 0 && weight_bytes[k] >= 0 && max_in_flight[k] >= 1,
                 "memory prediction, partition ", k + 1, ": expected sizes >= 0 and in-flight >= 1, got ",
                 activation_bytes[k], ", ", weight_bytes[k], ", ", max_in_flight[k]);
    PartitionMemory p;
    p.max_in_flight = max_in_flight[k];
    p.activation_bytes = activation_bytes[k];
    p.weight_bytes = weight_bytes[k];
    p.optimizer_bytes = weight_bytes[k] * (momentum ? 2 : 1);
    p.recomputed_bytes = recomputed_bytes.empty() ? 0 : recomputed_bytes[k];
    SP_CHECK_ARG(p.recomputed_bytes >= 0 && p.recomputed_bytes <= p.activation_bytes, "memory prediction, partition ",
                 k + 1, ": recomputed bytes must be 0..", p.activation_bytes, ", got ", p.recomputed_bytes);
    // The mini-batch being recomputed has already freed the rest of its activations.
    const int64_t rest = p.activation_bytes - p.recomputed_bytes;
    p.predicted_bytes = (p.max_in_flight - 1) * rest + std::max(rest, p.recomputed_bytes) +
                        p.weight_bytes + p.optimizer_bytes;
    p.stash_bytes = (p.max_in_flight - 1) * p.weight_bytes;
    t.partitions.push_back(p);
    A += p.activation_bytes;
    W += p.weight_bytes;
    added_activations += (p.max_in_flight - 1) * p.activation_bytes;
    added_weights += p.stash_bytes;
  }
  t.activation_mb_per_sample = static_cast<double>(A) / kMb / static_cast<double>(batch_size);
  t.weight_mb = static_cast<double>(W) / kMb;
  t.non_pipelined_bytes = W + A;
  t.scheme_added_bytes = added_activations;
  t.stash_added_bytes = added_activations + added_weights;
  if (t.non_pipelined_bytes > 0) {
    t.scheme_percent = 100.0 * static_cast<double>(t.scheme_added_bytes) / t.non_pipelined_bytes;
    t.stash_percent = 100.0 * static_cast<double>(t.stash_added_bytes) / t.non_pipelined_bytes;
  }
  return t;
}

std::vector<int64_t> measure_partition_peaks(const MemoryOptions& o, const std::vector<int>& ppv) {
  SP_CHECK_ARG(o.training.data().batch_size() >= 1, field_name(Field::batch_size), " must be >= 1, got ", o.training.data().batch_size());
  SP_CHECK_ARG(o.channels >= 1 && o.channels <= 64, "MemoryOptions::channels must be 1..64, got ", o.channels);
  const auto shapes = partition_shapes(o, ppv);
  const int K = static_cast<int>(ppv.size()) + 1;
  // Long enough for every worker to reach its largest in-flight count and drain.
  const auto schedule = schedule::make_schedule(
      K == 1 ? schedule::ScheduleKind::kSequential : schedule::ScheduleKind::kStale, K, 0, 4 * K);
  const auto format = memory_format(o);
  const int threads_before = at::get_num_threads();
  at::set_num_threads(1);
  std::vector<int64_t> peaks;
  for (int k = 0; k < K; ++k) {
    auto counter = std::make_shared<AllocationCounter>();
    {
      c10::DebugInfoGuard guard(c10::DebugInfoKind::PROFILER_STATE, counter);
      torch::manual_seed(o.training.run().seed());
      std::unique_ptr<exec::Stage> stage;
      {
        // Build inside the scope so the weights count; the other partitions' units are freed
        // with the model at the end of this block.
        auto model = models::make_model(o.training.run().model(), input_shape(o));
        const auto plan = partition::make_plan(model, ppv, o.training.pipeline().recompute(), field_name(Field::ppv), field_name(Field::recompute));
        exec::StageUnits units = exec::stage_units(model, plan, k);
        stage = std::make_unique<exec::Stage>(units.module, exec::StageOptions(k, K)
                                                                .update(update_options(OptimizerOptions(), 0))
                                                                .seed(o.training.run().seed())
                                                                .first_unit(plan.unit_ranges.at(k).first)
                                                                .memory_format(format)
                                                                .recompute_units(plan.recomputed_units(k))
                                                                .skips(std::move(units.skips)));
      }
      stage->begin_segment(schedule, [](int64_t) { return 0.01; });
      const int64_t batch = o.training.data().batch_size();
      // The loader's batch (NCHW) or the messages from other workers (in the stage's layout).
      auto random = [&](const std::vector<std::vector<int64_t>>& sizes, torch::MemoryFormat first_format) {
        exec::StageTensors t;
        for (size_t i = 0; i < sizes.size(); ++i) {
          const auto tensor = torch::randn(with_batch(sizes[i], batch),
                                           torch::TensorOptions().memory_format(i == 0 ? first_format : format));
          (i == 0 ? t.main : t.skips.emplace_back()) = tensor;
        }
        return t;
      };
      for (const auto& op : schedule.worker_ops[k]) {
        switch (op.kind) {
          case schedule::OpKind::kForward: {
            const auto x = random(shapes[k].in, k == 0 ? torch::MemoryFormat::Contiguous : format);
            if (stage->is_last()) {
              auto target = with_batch(shapes[k].out[0], batch);
              target.erase(target.begin() + 1);  // the classes: [B] or, per pixel, [B, H, W]
              stage->forward_loss(op.step, x, torch::randint(0, input_shape(o).num_classes, target, torch::kLong));
            } else {
              stage->forward(op.step, x);
            }
            break;
          }
          case schedule::OpKind::kBackward:
            stage->backward(op.step, stage->is_last() ? exec::StageTensors() : random(shapes[k].out, format));
            break;
          case schedule::OpKind::kUpdate:
            stage->update(op.step, 0.01);
            break;
        }
      }
    }
    SP_CHECK(counter->events() > 0,
             "memory: LibTorch's CPU allocator reported no allocation to the memory hook; "
             "this build cannot measure memory this way");
    peaks.push_back(counter->peak());
  }
  at::set_num_threads(threads_before);
  return peaks;
}

MemoryReport memory_report(const MemoryOptions& o) {
  MemoryReport r;
  r.options = o;
  const auto& ppv = o.training.pipeline().ppv();
  SP_CHECK_ARG(!ppv.empty(), field_name(Field::ppv), ": the memory table compares a pipeline with non-pipelined "
               "training; give at least one register, e.g. 2");
  SP_CHECK_ARG(o.training.data().batch_size() >= 1, field_name(Field::batch_size), " must be >= 1, got ", o.training.data().batch_size());
  SP_CHECK_ARG(o.channels >= 1 && o.channels <= 64, "MemoryOptions::channels must be 1..64, got ", o.channels);
  torch::manual_seed(o.training.run().seed());
  auto model = models::make_model(o.training.run().model(), input_shape(o));
  for (auto& unit : model.units) {  // profile_model keeps the weights' layout
    models::to_memory_format(*unit.module.ptr(), memory_format(o));
  }
  const auto plan = partition::make_plan(model, ppv, o.training.pipeline().recompute(), field_name(Field::ppv), field_name(Field::recompute));
  const int K = plan.num_partitions();

  // Only the kept bytes are needed: one unmeasured-time run per unit.
  partition::ProfileOptions p;
  p.batch_size = o.training.data().batch_size();
  p.threads = 1;
  p.warmup = 0;
  p.repeats = 1;
  p.memory_format = memory_format(o);
  r.layout = to_string(resolved_layout(o.training.pipeline().layout(), o.training.run().model()));
  const auto profile = partition::profile_model(model, p);
  const auto costs = sim::partition_costs(profile, plan);
  const auto stale = schedule::make_schedule(schedule::ScheduleKind::kStale, K, 0, 4 * K + 4);
  const auto stats = schedule::analyze(stale);
  for (const auto& skip : plan.skips) {
    r.skips.push_back({skip.name, skip.from, skip.to, partition::stash_bytes(profile, skip.name),
                       schedule::max_skip_in_flight(stale, skip.from, skip.to)});
  }
  std::vector<int> in_flight;
  for (const auto& w : stats.workers) in_flight.push_back(w.max_in_flight);
  r.predicted = predict_memory(costs.activation_bytes, costs.parameter_bytes, in_flight,
                               /*momentum=*/true, o.training.data().batch_size(), costs.recomputed_bytes);

  const auto peaks = measure_partition_peaks(o, ppv);
  int64_t sum = 0;
  for (int k = 0; k < K; ++k) {
    r.predicted.partitions[k].measured_peak_bytes = peaks[k];
    sum += peaks[k];
  }
  // The other operating point: without recomputation when it recomputes, and the reverse.
  const int recompute = o.training.pipeline().recompute();
  MemoryOptions other = o;
  other.training.pipeline().recompute(recompute > 0 ? 0 : ppv.front());
  const int64_t other_sum = sum_of(measure_partition_peaks(other, ppv));
  r.recompute_layer = recompute > 0 ? recompute : other.training.pipeline().recompute();
  r.measured_stale_bytes = recompute > 0 ? other_sum : sum;
  r.measured_recompute_bytes = recompute > 0 ? sum : other_sum;
  MemoryOptions plain = o;  // the baseline: non-pipelined training as it is usually done
  plain.training.pipeline().recompute(0);
  r.measured_non_pipelined_bytes = measure_partition_peaks(plain, {})[0];
  r.measured_scheme_added_bytes = sum - r.measured_non_pipelined_bytes;
  r.measured_peak_ratio = static_cast<double>(sum) / static_cast<double>(r.measured_non_pipelined_bytes);
  // Same base as the computed column (weights + activations): the gradient and momentum
  // buffers, present in both runs alike, are taken out of the measured non-pipelined peak.
  int64_t optimizer = 0;
  for (const auto& part : r.predicted.partitions) optimizer += part.optimizer_bytes;
  const int64_t base = r.measured_non_pipelined_bytes - optimizer;
  if (base > 0) {
    r.measured_scheme_percent = 100.0 * static_cast<double>(r.measured_scheme_added_bytes) / base;
  }
  return r;
}

std::string format_memory_report(const MemoryReport& r) {
  const auto& t = r.predicted;
  auto mb = [](int64_t bytes) { return static_cast<double>(bytes) / kMb; };
  const int recompute = r.options.training.pipeline().recompute();
  std::string s = c10::str("memory ", r.options.training.run().model(), ": pipeline ", partition::format_ppv(r.options.training.pipeline().ppv()),
                           recompute > 0 ? c10::str(" recomputing through layer ", recompute) : std::string(),
                           ", batch ", t.batch_size, ", ", r.options.channels, " channel(s), ", r.layout,
                           "; MB = 1e6 bytes\n");
  char line[256];
  std::snprintf(line, sizeof(line), "%-10s %9s %12s %10s %12s %12s %9s %12s\n", "partition",
                "in flight", "act/batch", "weights", "predicted", "measured", "meas/pred",
                "+stashing");
  s += line;
  for (size_t k = 0; k < t.partitions.size(); ++k) {
    const auto& p = t.partitions[k];
    std::snprintf(line, sizeof(line), "%-10zu %9d %12.2f %10.3f %12.2f %12.2f %9.2f %12.3f\n", k + 1,
                  p.max_in_flight, mb(p.activation_bytes), mb(p.weight_bytes), mb(p.predicted_bytes),
                  mb(p.measured_peak_bytes),
                  p.predicted_bytes > 0 ? static_cast<double>(p.measured_peak_bytes) / p.predicted_bytes : 0,
                  mb(p.stash_bytes));
    s += line;
  }
  if (!r.skips.empty()) s += "skip tensors crossing registers (in act/batch of the partition that pops them):\n";
  for (const auto& skip : r.skips) {
    s += c10::str("  ", skip.name, ": partition ", skip.from + 1, " -> ", skip.to + 1, ", ", mb(skip.bytes),
                  " MB per mini-batch, held for ", skip.held, " mini-batches\n");
  }
  s += c10::str("\nTable 9 (4-stage increase over non-pipelined = weights + one mini-batch's activations):\n");
  char summary[768];
  std::snprintf(summary, sizeof(summary),
                "  activations/sample %.3f MB, weights %.3f MB, non-pipelined %.2f MB\n"
                "  this scheme +%.0f%% (computed), +%.0f%% (measured: non-pipelined peak %.2f MB, partition\n"
                "  peaks add %.2f MB; %% of the peak less gradient and momentum)\n"
                "  with weight stashing (PipeDream) +%.0f%% (computed)\n"
                "  the partitions' peaks together: %.3fx the non-pipelined peak (measured)\n",
                t.activation_mb_per_sample, t.weight_mb, mb(t.non_pipelined_bytes), t.scheme_percent,
                r.measured_scheme_percent, mb(r.measured_non_pipelined_bytes),
                mb(r.measured_scheme_added_bytes), t.stash_percent, r.measured_peak_ratio);
  s += summary;
  if (recompute > 0) s += "  (the partitions recompute; the non-pipelined peak is of training without recomputation)\n";
  // Partition 1 of the stale schedule holds two mini-batches' activations, whatever the
  // executor: recomputation, not a better implementation, is what lowers that peak.
  const double base = static_cast<double>(r.measured_non_pipelined_bytes);
  std::snprintf(summary, sizeof(summary),
                "\nMeasured peaks side by side (the partitions' peaks summed):\n"
                "  %-34s %10.2f MB  1.000x\n  %-34s %10.2f MB  %.3fx\n  %-34s %10.2f MB  %.3fx\n",
                "non-pipelined", mb(r.measured_non_pipelined_bytes), "stale pipeline",
                mb(r.measured_stale_bytes), r.measured_stale_bytes / base,
                c10::str("stale pipeline, --recompute ", r.recompute_layer).c_str(),
                mb(r.measured_recompute_bytes), r.measured_recompute_bytes / base);
  s += summary;
  return s;
}

std::string to_json(const MemoryReport& r) {
  const auto& t = r.predicted;
  nlohmann::json j;
  j["model"] = r.options.training.run().model();
  j["ppv"] = partition::format_ppv(r.options.training.pipeline().ppv());
  j["batch_size"] = t.batch_size;
  j["channels"] = r.options.channels;
  j["activation_mb_per_sample"] = t.activation_mb_per_sample;
  j["weight_mb"] = t.weight_mb;
  j["non_pipelined_bytes"] = t.non_pipelined_bytes;
  j["scheme_added_bytes"] = t.scheme_added_bytes;
  j["stash_added_bytes"] = t.stash_added_bytes;
  j["scheme_percent"] = t.scheme_percent;
  j["stash_percent"] = t.stash_percent;
  j["measured_non_pipelined_bytes"] = r.measured_non_pipelined_bytes;
  j["measured_scheme_added_bytes"] = r.measured_scheme_added_bytes;
  j["measured_scheme_percent"] = r.measured_scheme_percent;
  j["measured_peak_ratio"] = r.measured_peak_ratio;
  j["layout"] = r.layout;
  j["recompute"] = r.options.training.pipeline().recompute();
  j["stale_peak_bytes"] = r.measured_stale_bytes;
  j["recompute_layer"] = r.recompute_layer;
  j["recompute_peak_bytes"] = r.measured_recompute_bytes;
  auto& skips = j["skips"] = nlohmann::json::array();
  for (const auto& skip : r.skips) {
    skips.push_back({{"name", skip.name}, {"from", skip.from + 1}, {"to", skip.to + 1}, {"bytes", skip.bytes},
                     {"held", skip.held}});
  }
  auto& parts = j["partitions"] = nlohmann::json::array();
  for (const auto& p : t.partitions) {
    parts.push_back({{"max_in_flight", p.max_in_flight},
                     {"activation_bytes", p.activation_bytes},
                     {"weight_bytes", p.weight_bytes},
                     {"optimizer_bytes", p.optimizer_bytes},
                     {"recomputed_bytes", p.recomputed_bytes},
                     {"predicted_bytes", p.predicted_bytes},
                     {"measured_peak_bytes", p.measured_peak_bytes},
                     {"stash_bytes", p.stash_bytes}});
  }
  return j.dump(2) + "\n";
}

}  // namespace stalepipe::perf
