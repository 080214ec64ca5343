// stalepipe: pipelined CNN training with stale weights. `stalepipe --help` lists the commands.
#include <cstdio>
#include <map>

#include <c10/util/Exception.h>
#include <torch/version.h>

#include "commands.h"
#include "flags.h"
#include "stalepipe/common/error.h"
#include "stalepipe/common/malloc_tuning.h"
#include "stalepipe/stalepipe.h"

int main(int argc, char** argv) {
  stalepipe::keep_freed_memory();  // before any thread: a training step reuses what the last freed
  CLI::App app{"stalepipe: pipelined training of CNNs with stale weights (PPL-SGD)"};
  app.require_subcommand(1);
  app.set_version_flag("--version", c10::str("stalepipe ", STALEPIPE_VERSION_MAJOR, ".", STALEPIPE_VERSION_MINOR, ".",
                                             STALEPIPE_VERSION_PATCH, " (LibTorch ", TORCH_VERSION, ")"));
  // A flag given twice takes its last value, as in most Unix tools (and scripts that append).
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  using stalepipe::cli::Command;
  const struct {
    const char* name;
    const char* help;
    Command (*add)(CLI::App&);
  } subcommands[] = {
      {"train", "train a model, pipelined or not", stalepipe::cli::add_train},
      {"eval", "evaluate a run directory's last checkpoint", stalepipe::cli::add_eval},
      {"layers", "print a model's units, shapes, parameters and register positions", stalepipe::cli::add_layers},
      {"schedule", "print the per-worker operation order of a schedule", stalepipe::cli::add_schedule},
      {"sweep", "run an experiment file: train what is missing, resume, collect results", stalepipe::cli::add_sweep},
      {"profile", "per-unit forward/backward time and memory (as caffe time)", stalepipe::cli::add_profile},
      {"simulate", "predict a pipeline's throughput, bubbles and memory from a profile", stalepipe::cli::add_simulate},
      {"bench", "images/s: non-pipelined vs the stale pipeline vs the profile's bound, with targets", stalepipe::cli::add_bench},
      {"memory", "per-partition memory predicted from the schedule and measured; Table 9", stalepipe::cli::add_memory},
      {"data", "image folders: inspect one, export a data set as one, time the input pipeline", stalepipe::cli::add_data},
      {"launch", "start K local ranks of a command (--executor processes); -- then the command", stalepipe::cli::add_launch},
  };
  std::map<CLI::App*, Command> commands;
  for (const auto& sub : subcommands) {
    CLI::App* app_sub = app.add_subcommand(sub.name, sub.help);
    commands[app_sub] = sub.add(*app_sub);
  }

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "stalepipe: error: %s\n", e.what());
    return 2;
  }
  for (auto& [sub, run] : commands) {
    if (!sub->parsed()) continue;
    try {
      return run();
    } catch (const stalepipe::UsageError& e) {
      std::fprintf(stderr, "stalepipe: error: %s\n", stalepipe::cli::with_flags(e.what()).c_str());
      return 2;
    } catch (const stalepipe::RuntimeError& e) {
      std::fprintf(stderr, "stalepipe: error: %s\n", stalepipe::cli::with_flags(e.what()).c_str());
      return 1;
    } catch (const c10::Error& e) {
      std::fprintf(stderr, "stalepipe: error: %s\n", e.what_without_backtrace());
      return 1;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "stalepipe: error: %s\n", e.what());
      return 1;
    }
  }
  return 2;
}
