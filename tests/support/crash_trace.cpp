#include "support/test_device.h"

#include <execinfo.h>
#include <signal.h>
#include <unistd.h>

#include <mutex>

namespace stalepipe::test {
namespace {

// Async-signal-safe: write(2) and backtrace_symbols_fd only. The symbols are the dynamic ones
// (LibTorch's, CUDA's); the packed test programs are stripped.
void print_trace(int signal_number) {
  static const char kHeader[] = "\n*** fatal signal; the stack (test_device.h, install_crash_trace):\n";
  (void)!::write(STDERR_FILENO, kHeader, sizeof kHeader - 1);
  void* frames[64];
  const int n = ::backtrace(frames, 64);
  ::backtrace_symbols_fd(frames, n, STDERR_FILENO);
  ::signal(signal_number, SIG_DFL);
  ::raise(signal_number);
}

}  // namespace

void install_crash_trace() {
  static std::once_flag once;
  std::call_once(once, [] {
    void* frame;
    ::backtrace(&frame, 1);  // loads libgcc's unwinder now, not inside the handler
    for (int signal_number : {SIGSEGV, SIGBUS, SIGABRT}) ::signal(signal_number, print_trace);
  });
}

}  // namespace stalepipe::test
