#include "stalepipe/study/sweep.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <set>

#include <nlohmann/json.hpp>

#include "common/json_file_impl.h"
#include "stalepipe/common/error.h"
#include "stalepipe/common/files.h"
#include "stalepipe/api/options_json.h"
#include "stalepipe/exec/checkpoint.h"
#include "stalepipe/train/trainer.h"

namespace stalepipe::study {
namespace fs = std::filesystem;
namespace {

// Keys of the file's runs that are not train options.
const std::set<std::string> kRunKeys = {"name", "baseline", "time_reference"};

void merge_options(nlohmann::json& into, const nlohmann::json& from, const std::string& where,
                   const nlohmann::json& known) {
  SP_CHECK_ARG(from.is_object(), where, ": expected an object of train options");
  for (const auto& [key, value] : from.items()) {
    if (kRunKeys.count(key)) continue;
    SP_CHECK_ARG(known.contains(key), where, ": unknown option '", key,
                 "' (use the names of config.json, e.g. batch_size, pipeline, hybrid_switch)");
    into[key] = value;
  }
}

// A run's folder, <out>/<run>-s<seed>, with each comma of the run's name (a PPV such as
// "6stage-ppv1,2") written '_', since a comma in a path breaks common tools. Runs trained
// before kept the commas; where only such a folder exists, it is still the run's.
std::string run_folder(const fs::path& out, const std::string& name, uint64_t seed) {
  const std::string legacy = name + "-s" + std::to_string(seed);
  std::string folder = legacy;
  std::replace(folder.begin(), folder.end(), ',', '_');
  if (folder != legacy && !fs::exists(out / folder) && fs::exists(out / legacy)) folder = legacy;
  return (out / folder).string();
}

}  // namespace

Experiment load_experiment(const std::string& path, const ExperimentOverrides& overrides) {
  SP_CHECK_ARG(fs::exists(path), "sweep ", path, ": no such file");
  SP_CHECK_ARG(overrides.data.empty() || !overrides.out.empty(), "ExperimentOverrides::data ", overrides.data,
               " needs ExperimentOverrides::out: results on other data must not share ", path, "'s results folder");
  nlohmann::json file;
  try {
    file = read_json_file(path);
  } catch (const RuntimeError& e) {
    throw UsageError(e.what());  // the experiment file is the user's input
  }
  Experiment ex;
  ex.path = path;
  try {
    const fs::path base = fs::path(path).parent_path();
    const std::string out = file.at("out").get<std::string>();
    ex.out = !overrides.out.empty()      ? overrides.out
             : fs::path(out).is_absolute() ? out
                                           : (base / out).lexically_normal().string();
    const auto seeds = file.value("seeds", std::vector<uint64_t>{1});
    SP_CHECK_ARG(!seeds.empty(), path, ": \"seeds\" is empty");
    const nlohmann::json known = to_json(Options());
    nlohmann::json defaults = known;
    if (file.contains("defaults")) merge_options(defaults, file["defaults"], path + ": defaults", known);
    const auto& runs = file.at("runs");
    SP_CHECK_ARG(runs.is_array() && !runs.empty(), path, ": \"runs\" must be a non-empty list");
    std::set<std::string> names;
    for (const auto& run : runs) {
      const std::string name = run.at("name").get<std::string>();
      SP_CHECK_ARG(!name.empty() && name.find('/') == std::string::npos, path, ": bad run name '", name, "'");
      SP_CHECK_ARG(names.insert(name).second, path, ": run name '", name, "' appears twice");
      nlohmann::json options = defaults;
      merge_options(options, run, path + ": run " + name, known);
      if (!overrides.data.empty()) options["data"] = overrides.data;
      for (uint64_t seed : seeds) {
        PlannedRun planned;
        planned.name = name;
        planned.seed = seed;
        planned.baseline = run.value("baseline", false);
        planned.time_reference = run.value("time_reference", false);
        options["seed"] = seed;
        options["out"] = run_folder(ex.out, name, seed);
        planned.options = options_from_json(options, path + ": run " + name);
        ex.runs.push_back(planned);
      }
    }
  } catch (const nlohmann::json::exception& e) {
    throw UsageError(path + ": " + e.what());
  } catch (const RuntimeError& e) {
    throw UsageError(e.what());
  }
  return ex;
}

RunState run_state(const PlannedRun& run) {
  const std::string& out = run.options.run().out();
  const fs::path config = fs::path(out) / "config.json";
  if (fs::exists(config)) {
    const auto trained = options_from_json(read_json_file(config.string()), config.string());
    Options planned = run.options;
    // A balanced run records the cut it chose; the experiment file gives only K.
    if (planned.pipeline().ppv().empty() && planned.pipeline().partitions() > 1) {
      planned.pipeline().ppv(trained.pipeline().ppv());
    }
    // A run on an image folder records the normalisation it measured.
    if (planned.data().norm_mean().empty()) {
      planned.data().norm_mean(trained.data().norm_mean()).norm_std(trained.data().norm_std());
    }
    SP_CHECK_ARG(config_hash(trained) == config_hash(planned), out,
                 " holds a run with other settings than the experiment file now gives for ",
                 run.name, " seed ", run.seed, "; move that folder away (or restore the file)");
  }
  if (fs::exists(fs::path(out) / "summary.json")) return RunState::kFinished;
  if (fs::exists(fs::path(out) / "diverged.json")) return RunState::kDiverged;
  if (exec::has_checkpoint(out)) return RunState::kInterrupted;
  return RunState::kMissing;
}

namespace {

template <typename T>
bool selected(const std::vector<T>& only, const T& value) {
  return only.empty() || std::find(only.begin(), only.end(), value) != only.end();
}

// Each value of `only` must be some run's `of(run)`: a selection the experiment cannot meet is
// an error, not a sweep of nothing.
template <typename T, typename Of>
void check_selection(const Experiment& experiment, const std::vector<T>& only, Of of, const char* field,
                     const std::string& fault) {
  for (const T& value : only) {
    SP_CHECK_ARG(std::any_of(experiment.runs.begin(), experiment.runs.end(),
                             [&](const PlannedRun& run) { return of(run) == value; }),
                 field, " ", value, ": ", fault);
  }
}

}  // namespace

int run_sweep(const Experiment& experiment, const SweepOptions& options) {
  check_selection(experiment, options.names, [](const PlannedRun& run) { return run.name; }, "SweepOptions::names",
                  "the experiment has no run of that name");
  check_selection(experiment, options.seeds, [](const PlannedRun& run) { return run.seed; }, "SweepOptions::seeds",
                  "not among the seeds of " + experiment.path);
  int trained = 0;
  size_t index = 0;
  for (const auto& run : experiment.runs) {
    ++index;
    if (!selected(options.seeds, run.seed) || !selected(options.names, run.name)) continue;
    const RunState state = run_state(run);
    const bool done = state == RunState::kFinished || state == RunState::kDiverged;
    const char* label = state == RunState::kFinished    ? "finished"
                        : state == RunState::kDiverged    ? "diverged"
                        : state == RunState::kInterrupted ? "interrupted"
                                                           : "missing";
    const char* action = options.dry_run || done ? ""
                         : state == RunState::kInterrupted               ? ", resuming"
                                                                          : ", training";
    std::fprintf(stderr, "sweep [%zu/%zu] %s seed %llu: %s%s\n", index, experiment.runs.size(),
                 run.name.c_str(), static_cast<unsigned long long>(run.seed), label, action);
    if (options.dry_run || done) continue;
    auto o = run.options;
    o.run().progress(options.progress);
    train::TrainHooks hooks;
    hooks.stop = options.stop;
    hooks.suspended_ns = options.suspended_ns;
    try {
      if (state == RunState::kInterrupted) {
        train::resume(o.run().out(), hooks);
      } else {
        // A folder without a checkpoint holds nothing worth keeping (a run that died before
        // its first checkpoint): start it again.
        std::error_code ignored;
        fs::remove_all(o.run().out(), ignored);
        train::train(o, hooks);
      }
    } catch (const train::DivergedError& e) {
      // Divergence under staleness is a result of the study, not a failure of the sweep.
      std::fprintf(stderr, "sweep: %s seed %llu diverged: %s\n", run.name.c_str(),
                   static_cast<unsigned long long>(run.seed), e.what());
      write_file_atomic((fs::path(o.run().out()) / "diverged.json").string(),
                        nlohmann::json{{"diverged", true}, {"message", e.what()}}.dump(2) + "\n");
    }
    ++trained;
    if (options.stop && *options.stop) break;  // the run drained and checkpointed
  }
  if (!options.dry_run) write_results(experiment);
  return trained;
}

}  // namespace stalepipe::study
