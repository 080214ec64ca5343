// Records what the executors really ran: plug TraceRecorder::callback() into
// exec::SegmentContext::on_op, then write a Chrome trace (Perfetto) and the same space-time
// SVG the simulator draws. `stalepipe train --trace FILE` does this for every segment.
#pragma once

#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "stalepipe/schedule/schedule.h"
#include "stalepipe/sim/events.h"

namespace stalepipe::sim {

class TraceRecorder {
 public:
  // The origin of recorded times is the moment of construction (steady_clock).
  TraceRecorder();

  // Thread-safe. start/end on the steady_clock's scale, as SegmentContext::on_op passes them.
  void record(int worker, const schedule::Op& op, double start_seconds, double end_seconds);

  // A callback for SegmentContext::on_op that records into this recorder (which must outlive
  // the segments it is used in).
  std::function<void(int, const schedule::Op&, double, double)> callback();

  // The events so far, times relative to the origin, in recording order.
  std::vector<OpEvent> events() const;

  // Writes the Chrome trace JSON to `path` and the space-time SVG to `path` + ".svg".
  // Throws RuntimeError if a file cannot be written.
  void write(const std::string& path, const std::string& title) const;

 private:
  double origin_seconds_;
  mutable std::mutex mutex_;
  std::vector<OpEvent> events_;
};

}  // namespace stalepipe::sim
