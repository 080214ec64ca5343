// One executed (or simulated) pipeline operation with its time span: what the simulator
// predicts, what TraceRecorder records, and what the space-time SVG and Chrome trace draw.
#pragma once

#include <string>
#include <vector>

#include "stalepipe/schedule/schedule.h"

namespace stalepipe::sim {

struct OpEvent {
  int worker = 0;          // 0-based
  schedule::Op op{schedule::OpKind::kForward, 0};
  double start_seconds = 0;
  double end_seconds = 0;
  // The wait for the sum of op.step's gradient with the other replicas (op is then that
  // step's update, which follows it).
  bool sum = false;
};

// Chrome trace JSON ({"traceEvents":[{"name":"F12","ph":"X","ts":us,"dur":us,"pid":1,
// "tid":worker+1}, ...]}; a replicas' gradient sum is "S12"), opens in Perfetto or
// chrome://tracing. Times are shifted so the earliest event starts at 0.
std::string to_chrome_trace(const std::vector<OpEvent>& events);

// Space-time diagram as standalone SVG text: one row per worker (worker 1 on top), time on the
// x axis, each forward a blue box and each backward an orange box labelled with its mini-batch
// number; updates are drawn as a thin dark mark at their time, and a wait for the replicas'
// gradient sum as a grey box. num_workers: rows to draw (at least 1 + the largest worker in
// events).
std::string space_time_svg(const std::vector<OpEvent>& events, int num_workers,
                           const std::string& title);

}  // namespace stalepipe::sim
