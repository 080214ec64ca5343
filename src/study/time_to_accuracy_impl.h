// The sweep's time-to-accuracy report: how soon each run reached each accuracy target
// (summary.json's time_to_target) and its test accuracy against training time.
#pragma once

#include <string>
#include <vector>

#include "finished_runs_impl.h"
#include "svg_chart_impl.h"

namespace stalepipe::study::detail {

// A results.md section: per run, the mean training time to each target over the seeds and the
// speed-ups against the baseline run and the runs marked time_reference; "" when no run has
// targets.
std::string time_to_target_markdown(ByName& runs);

// Test accuracy (%) against training seconds, one line per run: the mean over seeds of each
// evaluation, with the seeds' standard deviation as the band.
std::vector<Series> accuracy_time_curves(ByName& runs);

}  // namespace stalepipe::study::detail
