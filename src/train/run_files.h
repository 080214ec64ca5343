// The files of a run directory besides the checkpoint: config.json, metrics.jsonl (one line
// per epoch) and summary.json; and the peak memory the summary reports.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "stalepipe/api/pipeline_trainer.h"

namespace stalepipe::train {

void write_config(const std::string& run_dir, const Options& options);
// metrics.jsonl starts empty.
void start_metrics(const std::string& run_dir);
void append_metrics(const std::string& run_dir, const EpochSummary& epoch);
// Keeps the first `epochs` lines of metrics.jsonl (a resumed run rewrites the rest) and
// returns them. Throws RuntimeError if there are fewer or a line is not JSON.
std::vector<EpochSummary> reload_metrics(const std::string& run_dir, int64_t epochs);
// The staleness the schedule implies and the staleness as it ran, for summary.json.
nlohmann::json staleness_json(const PipelineInfo& info);
void write_summary(const std::string& run_dir, const nlohmann::json& summary);

// Peak resident memory of this run: a sweep trains many runs in one process, so the peak is
// reset when a run starts (Linux: clear_refs 5 resets VmHWM) and read from VmHWM.
void reset_peak_rss();
double peak_rss_mb();

}  // namespace stalepipe::train
