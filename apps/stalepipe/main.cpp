// stalepipe: pipelined CNN training with stale weights. `stalepipe --help` lists the commands.
#include <cstdio>
#include <map>

#include <c10/util/Exception.h>

#include "commands.h"
#include "stalepipe/common/error.h"

int main(int argc, char** argv) {
  CLI::App app{"stalepipe: pipelined training of CNNs with stale weights (PPL-SGD)"};
  app.require_subcommand(1);
  // A flag given twice takes its last value, as in most Unix tools (and scripts that append).
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  std::map<CLI::App*, stalepipe::cli::Command> commands;
  auto* train = app.add_subcommand("train", "train a model, pipelined or not");
  commands[train] = stalepipe::cli::add_train(*train);
  auto* eval = app.add_subcommand("eval", "evaluate a run directory's last checkpoint");
  commands[eval] = stalepipe::cli::add_eval(*eval);
  auto* layers = app.add_subcommand("layers", "print a model's units, shapes, parameters and register positions");
  commands[layers] = stalepipe::cli::add_layers(*layers);
  auto* schedule = app.add_subcommand("schedule", "print the per-worker operation order of a schedule");
  commands[schedule] = stalepipe::cli::add_schedule(*schedule);
  auto* profile = app.add_subcommand("profile", "per-unit forward/backward time and memory (as caffe time)");
  commands[profile] = stalepipe::cli::add_profile(*profile);
  auto* simulate = app.add_subcommand("simulate", "predict a pipeline's throughput, bubbles and memory from a profile");
  commands[simulate] = stalepipe::cli::add_simulate(*simulate);

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
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
      std::fprintf(stderr, "stalepipe: error: %s\n", e.what());
      return 2;
    } catch (const stalepipe::RuntimeError& e) {
      std::fprintf(stderr, "stalepipe: error: %s\n", e.what());
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
