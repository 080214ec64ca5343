// The files of a run directory besides the checkpoint: config.json, metrics.jsonl (in step
// order, a line of "type" "epoch" per epoch, with its evaluation, and of "type" "eval" per
// evaluation within an epoch), sittings.jsonl (a line per sitting: the step it started at and
// the machine) and summary.json; and the peak memory the summary reports.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model_file.h"
#include "stalepipe/train/run_data.h"
#include "stalepipe/api/pipeline_trainer.h"
#include "stalepipe/train/time_to_target.h"

namespace stalepipe::train {

// The options, and where a model file is trained, its absolute path and digest (model_file.h).
// With an image folder, its absolute path and fingerprint (train/run_data.h); with data held
// by the caller (CallerData), that it was.
void write_config(const std::string& run_dir, const Options& options, const std::optional<ModelFile>& model_file,
                  const std::optional<DataFolder>& folder, bool data_from_caller);
// Whether config.json in run_dir says the caller held the data (false where it does not say).
bool data_from_caller(const std::string& run_dir);
// metrics.jsonl starts empty.
void start_metrics(const std::string& run_dir);
void append_metrics(const std::string& run_dir, const EpochSummary& epoch);
void append_metrics(const std::string& run_dir, const EvalPoint& evaluation);

struct MetricsHistory {
  std::vector<EpochSummary> epochs;
  std::vector<EvalPoint> evaluations;  // the eval lines and the epoch lines' evaluations
};
// Keeps the lines of metrics.jsonl up to global step `step` (a resumed run rewrites the rest;
// lines without a type, as 0.2 wrote them, are epochs) and returns them. Throws RuntimeError
// if a line is not JSON or the epoch lines kept are not `epochs`.
MetricsHistory reload_metrics(const std::string& run_dir, int64_t epochs, int64_t step);
// A line in sittings.jsonl for the sitting that starts now at `step` on this machine (a
// fresh run first empties the file), and the machines of all the run's sittings, distinct, in
// order: "unknown" first where a resumed run has no sittings.jsonl (an earlier version wrote it).
// Throws RuntimeError naming the file and line if a line is not a sitting.
std::vector<std::string> record_sitting(const std::string& run_dir, int64_t step, bool fresh);
// summary.json's "time_to_target": per target, reached or not, and where.
nlohmann::json time_to_target_json(const std::vector<TargetTime>& times);
// The staleness the schedule implies and the staleness as it ran, for summary.json.
nlohmann::json staleness_json(const PipelineInfo& info);
void write_summary(const std::string& run_dir, const nlohmann::json& summary);

// Peak resident memory of this run: a sweep trains many runs in one process, so the peak is
// reset when a run starts (Linux: clear_refs 5 resets VmHWM) and read from VmHWM.
void reset_peak_rss();
double peak_rss_mb();

}  // namespace stalepipe::train
