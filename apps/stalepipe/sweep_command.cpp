// `stalepipe sweep FILE`: trains the missing runs of an experiment, resumes the interrupted
// ones, skips the finished ones, and writes the results tables and plots.
#include <cstdio>

#include "commands.h"
#include "stalepipe/study/sweep.h"
#include "stalepipe/train/stop_signals.h"

namespace stalepipe::cli {

Command add_sweep(CLI::App& app) {
  auto file = std::make_shared<std::string>();
  auto dry_run = std::make_shared<bool>(false);
  auto collect = std::make_shared<bool>(false);
  auto seeds = std::make_shared<std::vector<uint64_t>>();
  auto names = std::make_shared<std::vector<std::string>>();
  auto overrides = std::make_shared<study::ExperimentOverrides>();
  app.add_option("file", *file, "experiment file (JSON; see docs/results.md)")->required();
  app.add_flag("--dry-run", *dry_run, "only list each run's state");
  app.add_flag("--collect", *collect, "only rebuild the tables and plots from finished runs");
  app.add_option("--seed", *seeds, "only the runs of this seed (repeatable); run one sweep per seed side by side")->delimiter(',');
  app.add_option("--run", *names, "only the runs of this name (repeatable)");
  app.add_option("--data", overrides->data, "every run on this data set instead (e.g. mnist:DIR, cifar10:DIR); needs --out");
  app.add_option("--out", overrides->out, "results folder instead of the file's \"out\"");
  return [file, dry_run, collect, seeds, names, overrides]() {
    const auto experiment = study::load_experiment(*file, *overrides);
    if (*collect) {
      study::write_results(experiment);
    } else {
      study::SweepOptions options;
      options.dry_run = *dry_run;
      options.seeds = *seeds;
      options.names = *names;
      const train::StopSignals signals(/*sigterm_too=*/true);
      options.stop = &signals.stop();
      options.suspended_ns = &signals.suspended_ns();
      const int trained = study::run_sweep(experiment, options);
      std::fprintf(stderr, "sweep: %d run(s) trained or resumed\n", trained);
      if (*options.stop) {
        std::fprintf(stderr, "sweep: stopped; the interrupted run is checkpointed: run the sweep again to resume it\n");
        return 130;
      }
    }
    if (!*dry_run) std::printf("results in %s/results.md\n", experiment.out.c_str());
    return 0;
  };
}

}  // namespace stalepipe::cli
