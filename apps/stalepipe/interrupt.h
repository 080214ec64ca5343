// Ctrl-C and SIGTERM for the commands that train (train, sweep): the first asks the loop to
// drain and checkpoint (the run resumes later), a second Ctrl-C ends the process at once.
#pragma once

#include <atomic>

namespace stalepipe::cli {

// Installs the handlers and returns the flag they set (cleared now).
const std::atomic<bool>* install_stop_handlers();

}  // namespace stalepipe::cli
