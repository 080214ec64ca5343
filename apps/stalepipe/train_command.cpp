// `stalepipe train`: every field of the option tree as a flag; Ctrl-C drains and checkpoints.
#include <atomic>
#include <csignal>
#include <cstdio>

#include "commands.h"
#include "flags.h"
#include "stalepipe/train/trainer.h"

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

Command add_train(CLI::App& app) {
  auto o = std::make_shared<Options>();  // defaults: the option tree's
  auto text = std::make_shared<TrainFlags>();
  auto resume = std::make_shared<std::string>();
  add_option_flags(app, *o, *text);
  app.add_option("--resume", *resume, "continue the run in this directory from its last checkpoint (its config.json applies)");
  return [o, text, resume]() {
    apply(*text, *o);
    g_stop = false;
    std::signal(SIGINT, on_interrupt);
    std::signal(SIGTERM, on_interrupt);
    train::TrainHooks hooks;
    hooks.stop = &g_stop;
    const auto result = resume->empty() ? train::train(*o, hooks)
                                        : train::resume(*resume, hooks, o->pipeline().group());
    if (result.interrupted) return 130;
    if (result.test_accuracy) {
      std::printf("test_accuracy %.4f\n", *result.test_accuracy);
    } else {
      std::printf("test_loss %.6f\n", result.test_loss);
    }
    return 0;
  };
}

}  // namespace stalepipe::cli
