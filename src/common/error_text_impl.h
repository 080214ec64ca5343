// One line of what an exception says, for messages that must stay one line. Private to src/.
#pragma once

#include <exception>
#include <string>

namespace stalepipe {

// What `e` says, on one line (c10::Error's what() carries a backtrace). It may come from a
// c10d worker thread, handed over under a lock inside LibTorch that ThreadSanitizer does not
// see: under TSan the reads of it here are ignored (only these), and such an exception is
// never freed here (a failed group's works are abandoned with it).
std::string one_line_message(const std::exception& e);

}  // namespace stalepipe
