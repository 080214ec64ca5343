// `stalepipe schedule --partitions K --steps N`: what each worker runs, as a space-time table,
// with the staleness and in-flight counts derived from it.
#include <cstdio>

#include "commands.h"
#include "flags.h"
#include "stalepipe/api/options.h"
#include "stalepipe/common/error.h"
#include "stalepipe/schedule/schedule.h"

namespace stalepipe::cli {

Command add_schedule(CLI::App& app) {
  auto partitions = std::make_shared<int>(2);
  auto steps = std::make_shared<int64_t>(6);
  auto kind = std::make_shared<std::string>("stale");
  auto micro = std::make_shared<int>(1);
  app.add_option("--partitions", *partitions, "number of partitions K (workers)")->capture_default_str();
  app.add_option("--steps", *steps, "mini-batches")->capture_default_str();
  app.add_option("--schedule", *kind, "stale | sequential | gpipe | 1f1b-stash")->capture_default_str();
  app.add_option("--micro-batches", *micro, "gpipe: micro-batches per mini-batch")->capture_default_str();
  return [partitions, steps, kind, micro]() {
    SP_CHECK_ARG(*partitions >= 1 && *partitions <= 64, "--partitions must be 1..64, got ", *partitions);
    SP_CHECK_ARG(*steps >= 1 && *steps <= 100000, "--steps must be 1..100000, got ", *steps);
    const ScheduleKind k = schedule::schedule_from_name(*kind, field_name(Field::schedule));
    check_micro_batches(*micro, k);
    const auto s = schedule::make_schedule(k, *partitions, 0, *steps, *micro);
    std::fputs(schedule::format_schedule_table(s).c_str(), stdout);
    const auto stats = schedule::analyze(s);
    std::printf("\nworker\tstaleness d\tactivations in flight\tweight versions\n");
    for (size_t k = 0; k < stats.workers.size(); ++k) {
      const auto& w = stats.workers[k];
      std::printf("%zu\t%d\t%d\t%d\n", k + 1, w.staleness, w.max_in_flight, w.max_weight_versions);
    }
    return 0;
  };
}

}  // namespace stalepipe::cli
