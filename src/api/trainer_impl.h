// PipelineTrainer's step interface state, shared by its source files.
#pragma once

#include <condition_variable>
#include <cstdio>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "stalepipe/api/pipeline_trainer.h"
#include "trainer_workers_impl.h"

namespace stalepipe {

// A warning to the caller's hook, or to stderr where none is given: a library caller who set
// no hook still sees it.
inline void warn(const std::function<void(const std::string&)>& on_warning, const std::string& line) {
  if (on_warning) {
    on_warning(line);
  } else {
    std::fprintf(stderr, "%s\n", line.c_str());
  }
}

// Inputs travel to the executor's first worker through a queue that its input callback blocks
// on; losses come back from the last worker through a map.
struct PipelineTrainer::Feeder {
  std::mutex mutex;
  std::condition_variable changed;
  std::deque<exec::Input> inputs;
  bool end_of_input = false;  // flush(): the next input request ends the segment
  bool aborted = false;       // a worker failed: release the input callback
  bool done = false;          // the segment thread has returned
  std::exception_ptr error;  // the segment's failure
  detail::SegmentRun run;     // the segment's schedule and result, without a failure
  std::map<int64_t, StepLoss> losses;  // arrived, not yet returned
  int64_t segment_end = 0;
  std::thread thread;
};

}  // namespace stalepipe
