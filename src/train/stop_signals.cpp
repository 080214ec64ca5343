#include "stalepipe/train/stop_signals.h"

#include <cerrno>
#include <ctime>

namespace stalepipe::train {
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

void install(int signal, void (*handler)(int), int flags, struct sigaction* previous) {
  struct sigaction action {};
  action.sa_handler = handler;
  action.sa_flags = flags;
  sigemptyset(&action.sa_mask);
  sigaction(signal, &action, previous);
}

}  // namespace

StopSignals::StopSignals(bool sigterm_too) : sigterm_too_(sigterm_too) {
  g_stop = false;
  // Also where the shell ignored SIGINT (a job started in the background with &). SA_RESTART:
  // a read or write that a signal interrupts goes on (as std::signal's handlers do in glibc).
  install(SIGINT, on_interrupt, SA_RESTART, &previous_int_);
  if (sigterm_too_) install(SIGTERM, on_interrupt, SA_RESTART, &previous_term_);
  install(SIGTSTP, on_suspend, SA_RESTART, &previous_tstp_);
}

StopSignals::~StopSignals() {
  sigaction(SIGINT, &previous_int_, nullptr);
  if (sigterm_too_) sigaction(SIGTERM, &previous_term_, nullptr);
  sigaction(SIGTSTP, &previous_tstp_, nullptr);
}

const std::atomic<bool>& StopSignals::stop() { return g_stop; }
const std::atomic<int64_t>& StopSignals::suspended_ns() { return g_suspended_ns; }

}  // namespace stalepipe::train
