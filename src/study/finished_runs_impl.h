// The finished runs of an experiment as the tables and plots read them: each run's
// summary.json and metrics.jsonl, grouped by run name over the seeds.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "stalepipe/study/sweep.h"

namespace stalepipe::study::detail {

// One test evaluation from metrics.jsonl (an epoch line with a test accuracy, or an eval line).
struct Evaluation {
  int64_t step = 0;
  double wall_seconds = 0;  // training seconds when evaluated
  double accuracy = 0;      // %
};

struct Finished {
  const PlannedRun* run;
  nlohmann::json summary;  // null for a diverged run
  std::vector<double> test_accuracy_per_epoch;
  std::vector<Evaluation> evaluations;  // every evaluation with an accuracy, in step order
  // summary.json's "machines"; empty for a diverged run and for runs from before the field.
  std::vector<std::string> machines;
  bool diverged() const { return summary.is_null(); }
};

struct Spread {
  double mean = 0, std = 0;  // sample standard deviation; 0 for one value
  size_t n = 0;
};

Spread spread(const std::vector<double>& v);
std::string fixed(double v, int digits);

// The runs of an experiment that have a result (summary.json, or diverged.json).
std::vector<Finished> read_finished(const Experiment& experiment);

// The finished runs by name, in file order, and what the tables read of each name's seeds.
struct ByName {
  std::vector<std::string> order;
  std::map<std::string, std::vector<const Finished*>> runs;
  std::string baseline;  // the run marked baseline, if any
  std::vector<std::string> time_references;  // the baseline, then the runs marked time_reference

  explicit ByName(const std::vector<Finished>& done) {
    for (const auto& f : done) {
      if (!runs.count(f.run->name)) order.push_back(f.run->name);
      runs[f.run->name].push_back(&f);
    }
    for (const auto& name : order) {
      if (runs[name].front()->run->baseline) baseline = name;
    }
    if (!baseline.empty()) time_references.push_back(baseline);
    for (const auto& name : order) {
      if (runs[name].front()->run->time_reference && name != baseline) time_references.push_back(name);
    }
  }
  // Test accuracies (%) of the seeds that did not diverge.
  std::vector<double> accuracies(const std::string& name) {
    std::vector<double> v;
    for (const auto* f : runs[name]) {
      if (!f->diverged() && f->summary.contains("test_accuracy")) {
        v.push_back(100 * f->summary.at("test_accuracy").get<double>());
      }
    }
    return v;
  }
  // The run's first seed that did not diverge describes its settings; null if all diverged.
  const Finished* described(const std::string& name) {
    for (const auto* f : runs[name]) {
      if (!f->diverged()) return f;
    }
    return nullptr;
  }
  size_t diverged_count(const std::string& name) {
    size_t n = 0;
    for (const auto* f : runs[name]) n += f->diverged();
    return n;
  }
};

}  // namespace stalepipe::study::detail
