// The bench's arithmetic (bound, steady rate, ratios, targets) on given numbers, one short
// steady-state measurement, and the memory prediction on hand-computed partitions plus one
// small real measurement.
#include <cmath>
#include <map>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "stalepipe/common/error.h"
#include "stalepipe/perf/bench.h"
#include "stalepipe/perf/memory.h"
#include "stalepipe/perf/steady.h"
#include "stalepipe/sim/simulate.h"
#include "support/sanitizers.h"

namespace stalepipe::perf {
namespace {

sim::PartitionCosts costs(std::vector<double> f, std::vector<double> b) {
  sim::PartitionCosts c;
  c.forward_seconds = std::move(f);
  c.backward_seconds = std::move(b);
  return c;
}

TEST(Bench, BoundIsThePaceOfTheSlowestPartition) {
  // Partition 2 takes 0.1 + 0.3 = 0.4 s per mini-batch of 128: 320 images/s.
  EXPECT_DOUBLE_EQ(pipeline_bound(costs({0.1, 0.1}, {0.2, 0.3}), 128), 320.0);
  EXPECT_DOUBLE_EQ(pipeline_bound(costs({0.5}, {1.5}), 10), 5.0);
  EXPECT_THROW(pipeline_bound(costs({}, {}), 128), UsageError);
  EXPECT_THROW(pipeline_bound(costs({0.1, 0.1}, {0.2}), 128), UsageError);
  EXPECT_THROW(pipeline_bound(costs({0, 0}, {0, 0}), 128), UsageError);
  EXPECT_THROW(pipeline_bound(costs({0.1}, {0.1}), 0), UsageError);
}

TEST(Bench, SteadyRateSkipsFillAndDrain) {
  // K = 2: completions 0..3 (fill) and 16..19 (drain) are ignored. Between completion 4 and 15
  // there are 11 intervals of 0.5 s: 11 x 128 / 5.5 = 256 images/s, whatever the fill did.
  std::vector<double> t;
  for (int i = 0; i < 20; ++i) t.push_back(100.0 + 0.5 * i);
  t[0] = 90.0;
  t[1] = 99.0;
  t[19] = 200.0;
  EXPECT_DOUBLE_EQ(steady_images_per_second(t, 2, 128), 256.0);
  t.resize(9);  // fewer than 4K + 2 = 10
  EXPECT_THROW(steady_images_per_second(t, 2, 128), UsageError);
  EXPECT_THROW(steady_images_per_second(std::vector<double>(10, 1.0), 2, 128), UsageError);
}

BenchRates good_rates() {
  BenchRates r;
  r.one_thread = 50;
  r.all_threads = 90;
  r.pipeline = 95;
  r.emulated = 49;
  r.non_pipelined_same_threads = 50;
  r.bound = 100;
  r.simulated = 98;
  r.processes = 90;
  r.threads_train = 95;
  r.side_by_side = 100;
  r.replicas = 180;
  r.simulated_replicas = 190;
  return r;
}

BenchOptions tiny_steady(double seconds) {
  BenchOptions o;
  o.training().run().model("lenet5");
  o.training().data().batch_size(8);
  o.training().pipeline().threads(2);
  o.warmup_steps(2).seconds(seconds);
  return o;
}

TEST(Bench, SteadyStateTimesWholeStepsForTheSecondsAskedAndStatesTheSwitches) {
  BenchOptions o = tiny_steady(0.15);
  o.training().pipeline().precision(exec::Precision::kBf16);  // TF32 on, as the peer sets it for bf16
  const SteadyReport r = run_steady(o);
  EXPECT_EQ(r.partitions, 2);
  EXPECT_GE(r.timed_seconds, 0.15);
  ASSERT_GT(r.timed_steps, 0);
  EXPECT_GE(r.segments, 1);
  EXPECT_NEAR(r.images_per_second, static_cast<double>(r.timed_steps * 8) / r.timed_seconds, 1e-6);
  EXPECT_TRUE(std::isfinite(r.final_loss));
  EXPECT_EQ(r.precision, "bf16");
  EXPECT_TRUE(r.switches.tf32_cublas && r.switches.tf32_cudnn);
  EXPECT_FALSE(r.switches.cudnn_benchmark);
  ASSERT_EQ(r.passes.size(), 2u);
  for (const auto& p : r.passes) EXPECT_EQ(p.graphed_passes + p.eager_passes, 0) << p.device;  // no graphs
  EXPECT_TRUE(r.memory.empty());  // no CUDA device
  const auto j = nlohmann::json::parse(to_json(r));
  EXPECT_EQ(j.at("switches").at("matmul_tf32"), true);
  EXPECT_EQ(j.at("partitions").size(), 2u);
  EXPECT_TRUE(j.at("peak_reserved_bytes").is_null());

  o = tiny_steady(0.05);
  o.training().pipeline().partitions(1);  // fp32: TF32 off
  const SteadyReport one = run_steady(o);
  EXPECT_EQ(one.partitions, 1);
  EXPECT_FALSE(one.switches.tf32_cublas || one.switches.tf32_cudnn);
}

TEST(Bench, SteadyStateRefusesWhatItCannotTime) {
  EXPECT_THROW(run_steady(tiny_steady(0)), UsageError);
  EXPECT_THROW(run_steady(tiny_steady(1).rounds(2)), UsageError);
  BenchOptions o = tiny_steady(1);
  o.training().pipeline().replicas(2);
  EXPECT_THROW(run_steady(o), UsageError);
  o = tiny_steady(1);
  o.training().pipeline().schedule(ScheduleKind::kHybrid);
  EXPECT_THROW(run_steady(o), UsageError);
  // And the configuration set refuses what only the steady state reads.
  o = tiny_steady(0);
  o.training().pipeline().cuda_graphs(true);
  EXPECT_THROW(run_bench(o), UsageError);
  EXPECT_THROW(run_bench(tiny_steady(1)), UsageError);
}

TEST(Bench, RatiosOfGivenRates) {
  const auto q = compute_ratios(good_rates());
  EXPECT_DOUBLE_EQ(q.pipeline_vs_one_thread, 1.9);
  EXPECT_DOUBLE_EQ(q.pipeline_vs_all_threads, 95.0 / 90.0);
  EXPECT_DOUBLE_EQ(q.pipeline_vs_bound, 0.95);
  EXPECT_DOUBLE_EQ(q.emulated_vs_non_pipelined, 0.98);
  EXPECT_DOUBLE_EQ(q.simulated_vs_measured, 98.0 / 95.0);
  EXPECT_DOUBLE_EQ(q.processes_vs_threads, 90.0 / 95.0);
  EXPECT_DOUBLE_EQ(q.side_by_side_vs_one_thread, 2.0);
  EXPECT_DOUBLE_EQ(q.pipeline_vs_side_by_side, 0.95);
  EXPECT_DOUBLE_EQ(q.replicas_vs_pipeline, 180.0 / 95.0);
  EXPECT_DOUBLE_EQ(q.simulated_vs_measured_replicas, 190.0 / 180.0);
  for (const auto& t : check_targets(q)) EXPECT_TRUE(t.pass()) << t.name << " " << t.value;
}

TEST(Bench, TargetsMissAndNotMeasured) {
  auto r = good_rates();
  r.pipeline = 80;    // 1.6 x one thread, 0.8 of the bound, below all threads
  r.emulated = 44;    // 12% slower than non-pipelined
  r.simulated = 100;  // 25% above the measured 80
  r.processes = 0;    // not measured
  r.simulated_replicas = 240;  // 33% above the measured 180
  std::map<std::string, TargetCheck> by_name;
  for (const auto& t : check_targets(compute_ratios(r))) by_name[t.name] = t;
  ASSERT_EQ(by_name.size(), 7u);
  EXPECT_FALSE(by_name["simulated / measured replicas"].pass());
  EXPECT_TRUE(by_name["simulated / measured replicas"].measured);
  EXPECT_FALSE(by_name["pipeline / non-pipelined 1 thread"].pass());
  EXPECT_FALSE(by_name["pipeline / profile bound"].pass());
  EXPECT_FALSE(by_name["pipeline / non-pipelined all threads"].pass());
  EXPECT_FALSE(by_name["emulated / non-pipelined same threads"].pass());
  EXPECT_FALSE(by_name["simulated / measured pipeline"].pass());
  const auto& processes = by_name["processes / threads executor (train)"];
  EXPECT_FALSE(processes.measured);
  EXPECT_FALSE(processes.pass());
  EXPECT_DOUBLE_EQ(processes.value, 0.0);
  // Two-sided: 6% faster than non-pipelined also misses.
  r.emulated = 53;
  for (const auto& t : check_targets(compute_ratios(r))) {
    if (t.name == "emulated / non-pipelined same threads") EXPECT_FALSE(t.pass()) << t.value;
  }
}

TEST(Memory, PredictionByHand) {
  // Two partitions, batch 10: A = 1000 and 300 bytes per mini-batch, W = 50 and 20 bytes,
  // in flight 2 and 1 (the stale K = 2 schedule), momentum on (gradient + momentum = 2W).
  const auto t = predict_memory({1000, 300}, {50, 20}, {2, 1}, true, 10);
  ASSERT_EQ(t.partitions.size(), 2u);
  EXPECT_EQ(t.partitions[0].predicted_bytes, 2 * 1000 + 50 + 100);
  EXPECT_EQ(t.partitions[0].optimizer_bytes, 100);
  EXPECT_EQ(t.partitions[0].stash_bytes, 50);
  EXPECT_EQ(t.partitions[1].predicted_bytes, 300 + 20 + 40);
  EXPECT_EQ(t.partitions[1].stash_bytes, 0);
  EXPECT_EQ(t.non_pipelined_bytes, 1370);  // W + A = 70 + 1300
  EXPECT_EQ(t.scheme_added_bytes, 1000);
  EXPECT_EQ(t.stash_added_bytes, 1050);
  EXPECT_DOUBLE_EQ(t.scheme_percent, 100.0 * 1000 / 1370);
  EXPECT_DOUBLE_EQ(t.stash_percent, 100.0 * 1050 / 1370);
  EXPECT_DOUBLE_EQ(t.activation_mb_per_sample, 1300 / 1e6 / 10);
  EXPECT_DOUBLE_EQ(t.weight_mb, 70 / 1e6);
  // Without momentum the optimizer keeps only the gradient.
  EXPECT_EQ(predict_memory({1000}, {50}, {1}, false, 10).partitions[0].predicted_bytes, 1100);
  EXPECT_THROW(predict_memory({1000, 300}, {50}, {2, 1}, true, 10), UsageError);
  EXPECT_THROW(predict_memory({1000}, {50}, {0}, true, 10), UsageError);
  EXPECT_THROW(predict_memory({1000}, {50}, {1}, true, 0), UsageError);
  // Recomputation: 600 of partition 1's 1000 bytes are kept for one mini-batch, not two, and
  // while they are, that mini-batch's other 400 are gone.
  const auto r = predict_memory({1000, 300}, {50, 20}, {2, 1}, true, 10, {600, 0});
  EXPECT_EQ(r.partitions[0].predicted_bytes, 400 + 600 + 50 + 100);
  EXPECT_EQ(predict_memory({1000}, {50}, {2}, true, 10, {300}).partitions[0].predicted_bytes, 700 + 700 + 150);
  EXPECT_EQ(r.partitions[1].predicted_bytes, 300 + 20 + 40);
  EXPECT_EQ(r.scheme_added_bytes, 1000);  // Table 9 is the paper's scheme, without it
  EXPECT_THROW(predict_memory({1000, 300}, {50, 20}, {2, 1}, true, 10, {1001, 0}), UsageError);
  EXPECT_THROW(predict_memory({1000, 300}, {50, 20}, {2, 1}, true, 10, {0}), UsageError);
}

TEST(Memory, MeasuredPeaksHoldWeightsStateAndInFlightInputs) {
  // LeNet-5 cut after conv2, batch 8. Partition 1 (conv1, conv2: 2,572 parameters) holds two
  // mini-batches in flight, so at least weights + gradient + momentum and two 8x1x32x32 float
  // inputs; partition 2 (fc1..fc3: 59,134 parameters) at least its weights three times.
  MemoryOptions o;
  o.training.run().model("lenet5");
  o.training.data().batch_size(8);
  const auto peaks = measure_partition_peaks(o, {2});
  ASSERT_EQ(peaks.size(), 2u);
  EXPECT_GE(peaks[0], 3 * 2572 * 4 + 2 * 8 * 32 * 32 * 4);
  EXPECT_GE(peaks[1], 3 * 59134 * 4);
  // The whole model as one partition holds one mini-batch: less than the two parts together.
  const auto whole = measure_partition_peaks(o, {});
  ASSERT_EQ(whole.size(), 1u);
  EXPECT_LT(whole[0], peaks[0] + peaks[1]);
  EXPECT_GE(whole[0], 3 * (2572 + 59134) * 4);
}

TEST(Memory, TheReportMeasuresTheLayoutTrainRunsAndThePeakRatio) {
  MemoryOptions o;
  o.training.run().model("resnet8");
  o.training.pipeline().ppv({3});
  o.training.data().batch_size(8);
  const auto auto_layout = memory_report(o);  // the ResNets train channels-last by default
  EXPECT_EQ(auto_layout.layout, "channels-last");
  int64_t sum = 0;
  for (const auto& p : auto_layout.predicted.partitions) sum += p.measured_peak_bytes;
  EXPECT_DOUBLE_EQ(auto_layout.measured_peak_ratio,
                   static_cast<double>(sum) / static_cast<double>(auto_layout.measured_non_pipelined_bytes));
  EXPECT_GT(auto_layout.measured_peak_ratio, 1.0);  // partition 1 holds 2 mini-batches in flight
  EXPECT_NE(format_memory_report(auto_layout).find("the non-pipelined peak"), std::string::npos);
  o.training.pipeline().layout(Layout::kNchw);
  const auto nchw = memory_report(o);
  EXPECT_EQ(nchw.layout, "nchw");
  EXPECT_EQ(nchw.predicted.weight_mb, auto_layout.predicted.weight_mb);
}

// ResNet-8 cut inside its second block (after layer 4): the block's input, 16x32x32 floats per
// sample, goes to partition 2 and is held there with the register's activation.
TEST(Memory, TheReportCountsSkipTensorsWithThePartitionThatPopsThem) {
  MemoryOptions o;
  o.training.run().model("resnet8");
  o.training.pipeline().ppv({4});
  o.training.data().batch_size(8);
  const auto r = memory_report(o);
  ASSERT_EQ(r.skips.size(), 1u);
  EXPECT_EQ(r.skips[0].name, "block2_1");
  EXPECT_EQ(r.skips[0].from, 0);
  EXPECT_EQ(r.skips[0].to, 1);
  EXPECT_EQ(r.skips[0].bytes, 8 * 16 * 32 * 32 * 4);
  EXPECT_EQ(r.skips[0].held, 2);  // from partition 1's forward of t to partition 2's backward of t
  // The register (32x16x16 after block2_1's first, strided convolution) and the skip.
  EXPECT_GE(r.predicted.partitions[1].activation_bytes, 8 * 32 * 16 * 16 * 4 + r.skips[0].bytes);
  EXPECT_NE(format_memory_report(r).find("block2_1: partition 1 -> 2, 0.524288 MB per mini-batch, held for 2"),
            std::string::npos)
      << format_memory_report(r);
}

// ResNet-8 cut after its first block (layer 3), two mini-batches in flight in partition 1.
MemoryOptions resnet8_cut_after_its_first_block(int64_t batch_size) {
  MemoryOptions o;
  o.training.run().model("resnet8");
  o.training.pipeline().ppv({3});
  o.training.data().batch_size(batch_size);
  return o;
}

TEST(Memory, RecomputationKeepsTheRecomputedActivationsOfOneMiniBatch) {
  MemoryOptions o = resnet8_cut_after_its_first_block(16);
  const auto plain = memory_report(o);
  o.training.pipeline().recompute(3);  // all of partition 1
  const auto recomputed = memory_report(o);
  const auto& before = plain.predicted.partitions;
  const auto& after = recomputed.predicted.partitions;
  // Partition 1 keeps its input and output per mini-batch in flight, its units' activations once.
  EXPECT_LT(after[0].measured_peak_bytes, before[0].measured_peak_bytes);
  EXPECT_LT(after[0].predicted_bytes, before[0].predicted_bytes);
  EXPECT_GT(after[0].recomputed_bytes, 0);
  // Partition 2 and the non-pipelined baseline do not recompute.
  EXPECT_EQ(after[1].measured_peak_bytes, before[1].measured_peak_bytes);
  EXPECT_EQ(after[1].recomputed_bytes, 0);
  EXPECT_EQ(recomputed.measured_non_pipelined_bytes, plain.measured_non_pipelined_bytes);
  EXPECT_LT(recomputed.measured_peak_ratio, plain.measured_peak_ratio);
  EXPECT_NE(format_memory_report(recomputed).find("recomputing through layer 3"), std::string::npos);
  if (test::kSanitizer) {
    GTEST_SKIP() << "the saving's size: a sanitizer's build measures another one (AddressSanitizer: about "
                    "5x the prediction); the normal build measures it within 25%";
  }
  // The saving is the second mini-batch's recomputed activations: the prediction within 25%.
  const double saved = static_cast<double>(before[0].measured_peak_bytes - after[0].measured_peak_bytes);
  EXPECT_NEAR(saved / static_cast<double>(after[0].recomputed_bytes), 1.0, 0.25);
}

int64_t sum_of_measured_peaks(const MemoryReport& report) {
  int64_t sum = 0;
  for (const auto& p : report.predicted.partitions) sum += p.measured_peak_bytes;
  return sum;
}

TEST(Memory, TheReportShowsTheStalePipelineAndItsRecomputationSideBySide) {
  MemoryOptions o = resnet8_cut_after_its_first_block(8);
  // Without --recompute, the recomputing point is all of partition 1 (through the register's layer).
  const auto plain = memory_report(o);
  EXPECT_EQ(plain.recompute_layer, 3);
  EXPECT_EQ(plain.measured_stale_bytes, sum_of_measured_peaks(plain));
  EXPECT_LT(plain.measured_recompute_bytes, plain.measured_stale_bytes);
  EXPECT_GT(plain.measured_stale_bytes, plain.measured_non_pipelined_bytes);
  // With it, the same two points: the run's own peaks are the recomputing one.
  o.training.pipeline().recompute(3);
  const auto recomputed = memory_report(o);
  EXPECT_EQ(recomputed.recompute_layer, 3);
  EXPECT_EQ(recomputed.measured_recompute_bytes, sum_of_measured_peaks(recomputed));
  EXPECT_EQ(recomputed.measured_recompute_bytes, plain.measured_recompute_bytes);
  EXPECT_EQ(recomputed.measured_stale_bytes, plain.measured_stale_bytes);
  const std::string text = format_memory_report(plain);
  for (const char* row : {"  non-pipelined ", "  stale pipeline ", "  stale pipeline, --recompute 3 "}) {
    EXPECT_NE(text.find(row), std::string::npos) << row << "\n" << text;
  }
  const auto j = nlohmann::json::parse(to_json(plain));
  EXPECT_EQ(j.at("stale_peak_bytes").get<int64_t>(), plain.measured_stale_bytes);
  EXPECT_EQ(j.at("recompute_layer").get<int>(), 3);
  EXPECT_EQ(j.at("recompute_peak_bytes").get<int64_t>(), plain.measured_recompute_bytes);
}

}  // namespace
}  // namespace stalepipe::perf
