// Signals for the commands that train (train, sweep). Ctrl-C and SIGTERM: the first asks the
// loop to drain and checkpoint (the run resumes later), a second Ctrl-C ends the process at
// once. Ctrl-Z and SIGTSTP: the process stops until SIGCONT, and the time stopped is not
// counted as training time.
#pragma once

#include <atomic>
#include <cstdint>

namespace stalepipe::cli {

// Installs the handlers and returns the flag they set (cleared now).
const std::atomic<bool>* install_stop_handlers();

// Installs the SIGTSTP handler and returns its count of nanoseconds spent stopped.
const std::atomic<int64_t>* install_suspend_handler();

}  // namespace stalepipe::cli
