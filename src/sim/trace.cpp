#include "stalepipe/sim/trace.h"

#include <algorithm>

#include "stalepipe/common/clock.h"
#include "stalepipe/common/files.h"

namespace stalepipe::sim {

TraceRecorder::TraceRecorder()
    : origin_seconds_(steady_seconds()) {}

void TraceRecorder::record(int worker, const schedule::Op& op, double start_seconds,
                           double end_seconds) {
  OpEvent e;
  e.worker = worker;
  e.op = op;
  e.start_seconds = start_seconds - origin_seconds_;
  e.end_seconds = end_seconds - origin_seconds_;
  std::lock_guard<std::mutex> lock(mutex_);
  events_.push_back(e);
}

std::function<void(int, const schedule::Op&, double, double)> TraceRecorder::callback() {
  return [this](int worker, const schedule::Op& op, double start, double end) {
    record(worker, op, start, end);
  };
}

std::vector<OpEvent> TraceRecorder::events() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return events_;
}

void TraceRecorder::write(const std::string& path, const std::string& title) const {
  const auto all = events();
  int workers = 1;
  for (const auto& e : all) workers = std::max(workers, e.worker + 1);
  write_file_atomic(path, to_chrome_trace(all));
  write_file_atomic(path + ".svg", space_time_svg(all, workers, title));
}

}  // namespace stalepipe::sim
