// Experiment files and the sweep runner behind `stalepipe sweep FILE`.
//
// An experiment file is JSON:
//   {
//     "out": "results/lenet5",              // run folders go to <out>/<run>-s<seed>
//                                           // (a comma of <run> as '_'); relative
//                                           // paths are relative to the experiment file
//     "seeds": [1, 2],                      // every run is trained once per seed
//     "defaults": {"model": "lenet5", "epochs": 15, ...},   // any train option (config.json names)
//     "runs": [
//       {"name": "baseline", "pipeline": "none", "baseline": true},
//       {"name": "one-thread", "pipeline": "none", "threads": 1, "time_reference": true},
//       {"name": "ppv2", "pipeline": "2"},
//       {"name": "ppv2-hybrid", "pipeline": "2", "schedule": "hybrid", "hybrid_switch": "10"}
//     ]
//   }
// Each (run, seed) is finished (summary.json exists: skipped), diverged (diverged.json exists:
// its loss became non-finite; skipped, and reported as such), interrupted (a checkpoint
// exists: resumed), or missing (trained). Then every summary is collected into
// <out>/results.csv and <out>/results.md (per run and seed, and per run over seeds with the
// accuracy drop against the baseline run, and the training time to each of the runs'
// RunOptions::targets with its speed-up against the baseline and each time_reference run),
// and the plots <out>/accuracy.svg (test accuracy per epoch, one line per run,
// seed-averaged), <out>/accuracy_vs_time.svg (test accuracy against training seconds at
// every evaluation, seeds as a band) and <out>/drop_vs_stale.svg.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "stalepipe/api/options.h"

namespace stalepipe::study {

struct PlannedRun {
  std::string name;      // run name from the file
  uint64_t seed = 0;
  bool baseline = false;
  bool time_reference = false;  // times to accuracy are also compared with this run's
  Options options;  // run().out() is the run folder
};

struct Experiment {
  std::string path;      // of the file
  std::string out;       // resolved results folder
  std::vector<PlannedRun> runs;
};

// What the command line may change in an experiment file, so that the same file runs on
// other data (e.g. data "cifar10:/dir" with out "results/cifar"). Empty: as in the file.
struct ExperimentOverrides {
  std::string data;  // every run's data set; needs `out`, so the results do not mix
  std::string out;   // the results folder (relative to the working directory)
};

// Parses and validates an experiment file. Throws UsageError naming the file and the bad
// entry (unknown option name, wrong type, duplicate run name, no runs, no seeds).
Experiment load_experiment(const std::string& path, const ExperimentOverrides& overrides = {});

enum class RunState { kMissing, kInterrupted, kFinished, kDiverged };
// Throws UsageError if the run folder holds a run of other settings than `run` (its
// config.json hashes differently): the experiment file changed since, and skipping or
// resuming that folder would report results the file no longer describes.
RunState run_state(const PlannedRun& run);

struct SweepOptions {
  bool dry_run = false;   // only report the states
  ProgressMode progress = ProgressMode::kLines;
  // Only the runs of these seeds (empty: all). Sweeps of different seeds of one experiment
  // may run at the same time, e.g. one per core; `--collect` then tabulates them together.
  std::vector<uint64_t> seeds;
  // Only the runs of these names (empty: all); a name the file lacks is a usage error.
  std::vector<std::string> names;
  // Set to true (e.g. from a SIGINT handler) to stop: the run in progress drains and
  // checkpoints (train::TrainHooks::stop), and no further run starts.
  const std::atomic<bool>* stop = nullptr;
  // Time suspended so far, not training time (train::TrainHooks::suspended_ns).
  const std::atomic<int64_t>* suspended_ns = nullptr;
};

// Runs what is missing or interrupted (in file order), then writes the tables and plots.
// Returns the number of runs trained or resumed. A diverging run is recorded and the sweep
// goes on; any other failure stops the sweep (its checkpoint remains, so the next sweep
// resumes it).
int run_sweep(const Experiment& experiment, const SweepOptions& options);

// Collects the finished runs' summaries and metrics into the tables and plots.
void write_results(const Experiment& experiment);

}  // namespace stalepipe::study
