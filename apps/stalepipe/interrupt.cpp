#include "interrupt.h"

#include <csignal>

namespace stalepipe::cli {
namespace {

std::atomic<bool> g_stop{false};

extern "C" void on_interrupt(int) {
  if (g_stop.exchange(true)) {
    std::signal(SIGINT, SIG_DFL);  // a second Ctrl-C ends the process at once
    std::raise(SIGINT);
  }
}

}  // namespace

const std::atomic<bool>* install_stop_handlers() {
  g_stop = false;
  // Also where the shell ignored SIGINT (a job started in the background with &).
  std::signal(SIGINT, on_interrupt);
  std::signal(SIGTERM, on_interrupt);
  return &g_stop;
}

}  // namespace stalepipe::cli
