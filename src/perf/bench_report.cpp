// The bench report as text (stdout) and JSON (--json).
#include <cmath>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "bench_impl.h"
#include "stalepipe/partition/plan.h"
#include "stalepipe/perf/bench.h"

namespace stalepipe::perf {

std::string format_bench_report(const BenchReport& r) {
  const auto& o = r.options;
  const PipelineOptions& p = o.training().pipeline();
  std::string s = c10::str("bench ", o.training().run().model(), ": batch ", o.training().data().batch_size(), ", ",
                           o.channels(), " channel(s), ", r.layout, ", PPV ", r.ppv, " (", r.partitions, " partitions",
                           p.ppv().empty() ? c10::str(", balanced by ", partition::to_string(p.balance())) : std::string(),
                           p.recompute() > 0 ? c10::str(", recomputing through layer ", p.recompute()) : std::string(),
                           "), ", r.threads, " cores, ", o.warmup_steps(), " warm-up + ", o.steps(),
                           " measured steps",
                           o.rounds() > 1 ? c10::str(", medians of ", o.rounds(), " alternated rounds")
                                          : std::string(),
                           "\n");
  s += "profile, forward+backward per partition (ms):";
  for (double ms : r.partition_ms) s += c10::str(" ", std::round(ms * 10) / 10);
  s += "\n\n";
  char line[256];
  auto list = [&line](const std::vector<double>& v) {  // "12.3 45.6"
    std::string out;
    for (double x : v) {
      std::snprintf(line, sizeof(line), " %.1f", x);
      out += line;
    }
    return out;
  };
  std::snprintf(line, sizeof(line), "%-48s %10s %10s %10s\n", "configuration", "images/s",
                "segment", "x 1 thread");
  s += line;
  for (const auto& m : r.measurements) {
    std::snprintf(line, sizeof(line), "%-48s %10.1f %10.1f %10.2f\n", m.label.c_str(),
                  m.images_per_second, m.segment_images_per_second,
                  ratio(m.images_per_second, r.rates.one_thread));
    s += line;
    if (m.round_images_per_second.size() > 1) s += c10::str("    rounds:", list(m.round_images_per_second), "\n");
  }
  auto extra = [&](const char* label, double value) {
    if (value <= 0) return;
    std::snprintf(line, sizeof(line), "%-48s %10.1f %10s %10.2f\n", label, value, "",
                  ratio(value, r.rates.one_thread));
    s += line;
  };
  extra("profile bound for the pipeline (slowest part.)", r.rates.bound);
  extra("simulator's prediction (stale, steady state)", r.rates.simulated);
  extra("simulator's prediction for the replicas", r.rates.simulated_replicas);
  extra("train, threads executor (K workers)", r.rates.threads_train);
  extra("train, processes executor (K ranks)", r.rates.processes);
  if (!r.rates.processes_runs.empty()) {
    s += c10::str("  (train: medians of ", r.rates.processes_runs.size(), " alternated runs; threads",
                  list(r.rates.threads_train_runs), ", processes", list(r.rates.processes_runs), ")\n");
  }
  if (r.rates.side_by_side > 0) {
    s += c10::str("\nceiling: the pipeline's ", r.partitions, " workers run side by side, without the pipeline, at ",
                  std::round(100 * r.ratios.side_by_side_vs_one_thread) / 100,
                  "x one thread; the pipeline reaches ",
                  std::round(1000 * r.ratios.pipeline_vs_side_by_side) / 10, "% of that\n");
  }
  if (r.rates.skip_free_cut > 0) {
    s += c10::str("\ncut: ", r.ppv, " (a skip tensor crosses a register) runs at ",
                  std::round(1000 * r.ratios.pipeline_vs_skip_free_cut) / 1000, "x the best cut no skip crosses, ",
                  r.skip_free_ppv, "\n");
  } else if (!r.skip_free_ppv.empty() && r.skip_free_ppv == r.ppv) {
    s += c10::str("\ncut: ", r.ppv, " has no skip tensor cross a register; it is also the best such cut\n");
  }
  s += c10::str("\ncheck: pipeline and emulated weights ",
                r.executors_agree ? "bit-identical" : "DIFFER (bug)", "\n\ntargets:\n");
  for (const auto& t : r.targets) {
    const std::string range = std::isinf(t.high) ? c10::str(">= ", t.low)
                                                 : c10::str(t.low, " .. ", t.high);
    std::snprintf(line, sizeof(line), "  %-42s %6.3f  (target %s)  %s\n", t.name.c_str(), t.value,
                  range.c_str(), !t.measured ? "not measured" : t.pass() ? "pass" : "MISS");
    s += line;
  }
  return s;
}

std::string to_json(const BenchReport& r) {
  const auto& o = r.options;
  nlohmann::json j;
  j["model"] = o.training().run().model();
  j["batch_size"] = o.training().data().batch_size();
  j["channels"] = o.channels();
  j["ppv"] = r.ppv;
  j["skip_free_ppv"] = r.skip_free_ppv;
  j["layout"] = r.layout;
  j["recompute"] = o.training().pipeline().recompute();
  j["pipeline_given"] = !o.training().pipeline().ppv().empty();
  j["balance"] = partition::to_string(o.training().pipeline().balance());
  j["partitions"] = r.partitions;
  j["threads"] = r.threads;
  j["threads_per_worker"] = r.threads_per_worker;
  j["warmup_steps"] = o.warmup_steps();
  j["steps"] = o.steps();
  j["rounds"] = o.rounds();
  j["seed"] = o.training().run().seed();
  j["partition_ms"] = r.partition_ms;
  j["executors_agree"] = r.executors_agree;
  j["rates"] = {{"one_thread", r.rates.one_thread},
                {"all_threads", r.rates.all_threads},
                {"pipeline", r.rates.pipeline},
                {"emulated", r.rates.emulated},
                {"non_pipelined_same_threads", r.rates.non_pipelined_same_threads},
                {"bound", r.rates.bound},
                {"simulated", r.rates.simulated},
                {"processes", r.rates.processes},
                {"threads_train", r.rates.threads_train},
                {"side_by_side", r.rates.side_by_side},
                {"skip_free_cut", r.rates.skip_free_cut},
                {"replicas", r.rates.replicas},
                {"simulated_replicas", r.rates.simulated_replicas},
                {"processes_runs", r.rates.processes_runs},
                {"threads_train_runs", r.rates.threads_train_runs}};
  j["ratios"] = {{"pipeline_vs_one_thread", r.ratios.pipeline_vs_one_thread},
                 {"pipeline_vs_all_threads", r.ratios.pipeline_vs_all_threads},
                 {"pipeline_vs_bound", r.ratios.pipeline_vs_bound},
                 {"emulated_vs_non_pipelined", r.ratios.emulated_vs_non_pipelined},
                 {"simulated_vs_measured", r.ratios.simulated_vs_measured},
                 {"processes_vs_threads", r.ratios.processes_vs_threads},
                 {"side_by_side_vs_one_thread", r.ratios.side_by_side_vs_one_thread},
                 {"pipeline_vs_side_by_side", r.ratios.pipeline_vs_side_by_side},
                 {"pipeline_vs_skip_free_cut", r.ratios.pipeline_vs_skip_free_cut},
                 {"replicas_vs_pipeline", r.ratios.replicas_vs_pipeline},
                 {"simulated_vs_measured_replicas", r.ratios.simulated_vs_measured_replicas}};
  auto& targets = j["targets"] = nlohmann::json::array();
  for (const auto& t : r.targets) {
    targets.push_back({{"name", t.name},
                       {"value", t.value},
                       {"low", t.low},
                       {"high", std::isinf(t.high) ? nlohmann::json(nullptr) : nlohmann::json(t.high)},
                       {"status", !t.measured ? "not measured" : t.pass() ? "pass" : "miss"}});
  }
  auto& ms = j["measurements"] = nlohmann::json::array();
  for (const auto& m : r.measurements) {
    ms.push_back({{"key", m.key},
                  {"label", m.label},
                  {"executor", m.executor},
                  {"partitions", m.partitions},
                  {"replicas", m.replicas},
                  {"threads_per_worker", m.threads_per_worker},
                  {"steps", m.steps},
                  {"images_per_second", m.images_per_second},
                  {"segment_images_per_second", m.segment_images_per_second},
                  {"final_loss", m.final_loss},
                  {"round_images_per_second", m.round_images_per_second}});
  }
  return j.dump(2) + "\n";
}

}  // namespace stalepipe::perf
