#include "interrupt.h"

#include <cerrno>
#include <csignal>
#include <ctime>

namespace stalepipe::cli {
namespace {

std::atomic<bool> g_stop{false};
std::atomic<int64_t> g_suspended_ns{0};
static_assert(std::atomic<int64_t>::is_always_lock_free, "a signal handler updates g_suspended_ns");

extern "C" void on_interrupt(int) {
  if (g_stop.exchange(true)) {
    std::signal(SIGINT, SIG_DFL);  // a second Ctrl-C ends the process at once
    std::raise(SIGINT);
  }
}

int64_t monotonic_ns() {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);  // async-signal-safe, unlike std::chrono's clocks
  return static_cast<int64_t>(t.tv_sec) * 1000000000 + t.tv_nsec;
}

// Stops the process as SIGTSTP's default action would (SIGSTOP stops every thread), and
// once SIGCONT resumes it here, counts the time stopped.
extern "C" void on_suspend(int) {
  const int saved_errno = errno;
  const int64_t stopped_at = monotonic_ns();
  std::raise(SIGSTOP);
  g_suspended_ns.fetch_add(monotonic_ns() - stopped_at);
  errno = saved_errno;
}

}  // namespace

const std::atomic<bool>* install_stop_handlers() {
  g_stop = false;
  // Also where the shell ignored SIGINT (a job started in the background with &).
  std::signal(SIGINT, on_interrupt);
  std::signal(SIGTERM, on_interrupt);
  return &g_stop;
}

const std::atomic<int64_t>* install_suspend_handler() {
  struct sigaction action{};
  action.sa_handler = on_suspend;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // a read or write that the stop interrupted goes on
  sigaction(SIGTSTP, &action, nullptr);
  return &g_suspended_ns;
}

}  // namespace stalepipe::cli
