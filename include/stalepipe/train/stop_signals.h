// Signals while a run trains, for the programs that train (the CLI, the Python extension).
// Ctrl-C (and SIGTERM where asked): the first asks the loop to drain and checkpoint (the run
// resumes later), a second Ctrl-C ends the process at once. Ctrl-Z and SIGTSTP: the process
// stops until SIGCONT, and the time stopped is not counted as training time.
#pragma once

#include <atomic>
#include <csignal>
#include <cstdint>

namespace stalepipe::train {

// Installs the handlers for its lifetime (one at a time in a process) and restores the ones
// before it when it ends.
class StopSignals {
 public:
  explicit StopSignals(bool sigterm_too);
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // Set by the first Ctrl-C (cleared when the scope begins); hooks.stop reads it.
  static const std::atomic<bool>& stop();
  // Nanoseconds spent stopped by Ctrl-Z; hooks.suspended_ns reads it.
  static const std::atomic<int64_t>& suspended_ns();

 private:
  bool sigterm_too_;
  struct sigaction previous_int_ {}, previous_term_ {}, previous_tstp_ {};
};

}  // namespace stalepipe::train
