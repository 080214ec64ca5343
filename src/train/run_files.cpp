#include "run_files.h"

#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <sys/resource.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "common/json_file_impl.h"
#include "stalepipe/api/options_json.h"
#include "stalepipe/common/error.h"
#include "stalepipe/common/files.h"
#include "stalepipe/common/machine.h"

namespace stalepipe::train {
namespace fs = std::filesystem;
namespace {

std::string in_dir(const std::string& run_dir, const char* name) { return (fs::path(run_dir) / name).string(); }

// Accuracy keys only where the metric scored samples (not for a regression target).
nlohmann::json metrics_json(const EpochSummary& m) {
  nlohmann::json j = {{"type", "epoch"}, {"epoch", m.epoch}, {"step", m.end_step}, {"lr", m.lr},
                      {"train_loss", m.train_loss}};
  if (m.train_accuracy) j["train_accuracy"] = *m.train_accuracy;
  if (m.evaluated) j["test_loss"] = m.test_loss;
  if (m.test_accuracy) j["test_accuracy"] = *m.test_accuracy;
  j["images_per_second"] = m.images_per_second;
  j["wall_seconds"] = m.wall_seconds;
  return j;
}

std::optional<double> optional_number(const nlohmann::json& j, const char* key) {
  if (!j.contains(key)) return std::nullopt;
  return j.at(key).get<double>();
}

nlohmann::json metrics_json(const EvalPoint& p) {
  nlohmann::json j = {{"type", "eval"}, {"step", p.step}, {"epoch", p.epoch}, {"wall_seconds", p.wall_seconds},
                      {"test_loss", p.result.loss}};
  if (p.result.accuracy) j["test_accuracy"] = *p.result.accuracy;
  return j;
}

EvalPoint eval_from_json(const nlohmann::json& j) {
  EvalPoint p;
  p.step = j.value("step", int64_t{0});
  p.epoch = j.value("epoch", 0.0);
  p.wall_seconds = j.value("wall_seconds", 0.0);
  p.result.loss = j.value("test_loss", 0.0);
  p.result.accuracy = optional_number(j, "test_accuracy");
  return p;
}

// The evaluation an epoch line records.
EvalPoint epoch_evaluation(const EpochSummary& m) {
  EvalPoint p;
  p.step = m.end_step;
  p.epoch = static_cast<double>(m.epoch);
  p.wall_seconds = m.wall_seconds;
  p.epoch_end = true;
  p.result.loss = m.test_loss;
  p.result.accuracy = m.test_accuracy;
  return p;
}

EpochSummary metrics_from_json(const nlohmann::json& j) {
  EpochSummary m;
  m.epoch = j.value("epoch", int64_t{0});
  m.end_step = j.value("step", int64_t{0});
  m.lr = j.value("lr", 0.0);
  m.train_loss = j.value("train_loss", 0.0);
  m.train_accuracy = optional_number(j, "train_accuracy");
  m.evaluated = j.contains("test_loss");
  m.test_loss = j.value("test_loss", 0.0);
  m.test_accuracy = optional_number(j, "test_accuracy");
  m.images_per_second = j.value("images_per_second", 0.0);
  m.wall_seconds = j.value("wall_seconds", 0.0);
  return m;
}

}  // namespace

void write_config(const std::string& run_dir, const Options& options, const std::optional<ModelFile>& model_file,
                  const std::optional<DataFolder>& folder, bool data_from_caller) {
  nlohmann::json config = to_json(options);
  if (model_file) add_model_file(config, *model_file);
  if (folder) add_data_folder(config, *folder);
  if (data_from_caller) config["data_from_caller"] = true;
  write_file_atomic(in_dir(run_dir, "config.json"), config.dump(2) + "\n");
}

bool data_from_caller(const std::string& run_dir) {
  const std::string path = in_dir(run_dir, "config.json");
  const nlohmann::json config = read_json_file(path);
  const auto held = config.find("data_from_caller");
  if (held == config.end()) return false;
  SP_CHECK(held->is_boolean(), path, ": \"data_from_caller\" must be true or false, not ", held->dump());
  return held->get<bool>();
}

void start_metrics(const std::string& run_dir) { write_file_atomic(in_dir(run_dir, "metrics.jsonl"), ""); }

void append_metrics(const std::string& run_dir, const EpochSummary& epoch) {
  std::ofstream(in_dir(run_dir, "metrics.jsonl"), std::ios::app) << metrics_json(epoch).dump() << "\n";
}

void append_metrics(const std::string& run_dir, const EvalPoint& evaluation) {
  std::ofstream(in_dir(run_dir, "metrics.jsonl"), std::ios::app) << metrics_json(evaluation).dump() << "\n";
}

MetricsHistory reload_metrics(const std::string& run_dir, int64_t epochs, int64_t step) {
  const std::string path = in_dir(run_dir, "metrics.jsonl");
  MetricsHistory kept;
  std::string text;
  std::ifstream in(path);
  std::string line;
  for (int64_t number = 1; std::getline(in, line); ++number) {
    const auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    SP_CHECK(j.is_object(), path, ": line ", number, " is not a JSON object");
    if (j.value("step", int64_t{0}) > step) break;  // written after the checkpoint resumed from
    text += line + "\n";
    if (j.value("type", std::string("epoch")) == "eval") {
      kept.evaluations.push_back(eval_from_json(j));
      continue;
    }
    const EpochSummary m = metrics_from_json(j);
    kept.epochs.push_back(m);
    if (m.evaluated) kept.evaluations.push_back(epoch_evaluation(m));
  }
  SP_CHECK(static_cast<int64_t>(kept.epochs.size()) == epochs, path, ": has ", kept.epochs.size(),
           " epoch lines up to step ", step, " but the checkpoint is after epoch ", epochs);
  write_file_atomic(path, text);
  return kept;
}

std::vector<std::string> record_sitting(const std::string& run_dir, int64_t step, bool fresh) {
  const std::string path = in_dir(run_dir, "sittings.jsonl");
  std::vector<std::string> machines;
  auto add = [&machines](const std::string& m) {
    if (std::find(machines.begin(), machines.end(), m) == machines.end()) machines.push_back(m);
  };
  if (fresh) {
    write_file_atomic(path, "");
  } else if (!fs::exists(path)) {
    add("unknown");
  }
  std::ifstream in(path);
  std::string line;
  for (int64_t number = 1; std::getline(in, line); ++number) {
    const auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    SP_CHECK(j.is_object() && j.contains("machine") && j.at("machine").is_string(), path, ": line ", number,
             " is not a sitting (a JSON object with a \"machine\")");
    add(j.at("machine").get<std::string>());
  }
  const std::string here = machine_description();
  std::ofstream(path, std::ios::app) << nlohmann::json({{"step", step}, {"machine", here}}).dump() << "\n";
  add(here);
  return machines;
}

nlohmann::json time_to_target_json(const std::vector<TargetTime>& times) {
  nlohmann::json list = nlohmann::json::array();
  for (const TargetTime& t : times) {
    nlohmann::json j = {{"target", t.target}, {"reached", t.reached.has_value()}};
    if (t.reached) {
      j["step"] = t.reached->step;
      j["epoch"] = t.reached->epoch;
      j["wall_seconds"] = t.reached->wall_seconds;
      j["test_accuracy"] = t.reached->result.accuracy.value_or(0);
    }
    list.push_back(j);
  }
  return list;
}

nlohmann::json staleness_json(const PipelineInfo& info) {
  return {{"staleness", info.staleness},
          {"staleness_max_ran", info.ran.max_delay},
          {"forwards", info.ran.forwards},
          {"forwards_at_full_staleness", info.ran.forwards_at_full}};
}

void write_summary(const std::string& run_dir, const nlohmann::json& summary) {
  write_file_atomic(in_dir(run_dir, "summary.json"), summary.dump(2) + "\n");
}

// The reset can only go down to the memory still resident, and glibc keeps what the previous
// run freed; malloc_trim hands that back first (without it, five runs in a row of one sweep
// all reported the 1076 MB the run before them left).
void reset_peak_rss() {
#ifdef __GLIBC__
  malloc_trim(0);
#endif
  std::ofstream("/proc/self/clear_refs") << "5";
}

double peak_rss_mb() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;  // kB
  }
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB on Linux
}

}  // namespace stalepipe::train
