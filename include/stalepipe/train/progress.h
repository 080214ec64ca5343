// Live progress: on a terminal a bar rewritten in place (loss, images/s, ETA); otherwise
// nothing per step (the trainer logs one line per epoch).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "stalepipe/api/options.h"

namespace stalepipe::train {

class Progress {
 public:
  // kAuto: a bar if stderr is a terminal; kBar: always; kLines, kNone: no bar.
  Progress(ProgressMode mode, int64_t total_steps);
  // Called after each mini-batch's loss; rate-limited to ~10 redraws per second.
  void step(int64_t epoch, int64_t step, double loss, double images_per_second);
  // Clears the bar line before a log line is printed.
  void clear();

 private:
  bool bar_ = false;
  int64_t total_steps_;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

}  // namespace stalepipe::train
