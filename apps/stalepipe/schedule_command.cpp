// `stalepipe schedule --partitions K --steps N`: what each worker runs, as a space-time table,
// with the staleness and in-flight counts derived from it. With --model and --pipeline, also
// the model's skip tensors that cross registers: where each goes and how long it is held.
#include <cstdio>

#include "commands.h"
#include "flags.h"
#include "stalepipe/api/options.h"
#include "stalepipe/common/error.h"
#include "stalepipe/models/zoo.h"
#include "stalepipe/partition/plan.h"
#include "stalepipe/schedule/schedule.h"

namespace stalepipe::cli {
namespace {

// The skip routes of `model` cut at `ppv_text`, with the mini-batches each holds in `s`.
void print_skip_routes(const std::string& model_name, int64_t channels, const std::string& ppv_text,
                       const schedule::Schedule& s) {
  models::InputShape input;
  input.channels = channels;
  const auto model = models::make_model(model_name, input);
  const auto plan = partition::make_plan(model, partition::parse_ppv(ppv_text, flag_of(Field::ppv)), 0, flag_of(Field::ppv));
  std::printf("\nskip tensors of %s cut at %s (forward of t -> forward of t; gradient: backward of t -> backward of t)\n",
              model_name.c_str(), partition::format_ppv(plan.ppv).c_str());
  if (plan.skips.empty()) std::printf("none cross a register\n");
  if (plan.skips.empty()) return;
  std::printf("skip\tfrom partition\tto partition\tmini-batches held\n");
  for (const auto& skip : plan.skips) {
    std::printf("%s\t%d\t%d\t%d\n", skip.name.c_str(), skip.from + 1, skip.to + 1,
                schedule::max_skip_in_flight(s, skip.from, skip.to));
  }
}

}  // namespace

Command add_schedule(CLI::App& app) {
  auto partitions = std::make_shared<int>(2);
  auto steps = std::make_shared<int64_t>(6);
  auto kind = std::make_shared<std::string>("stale");
  auto micro = std::make_shared<int>(1);
  auto model = std::make_shared<std::string>();
  auto ppv = std::make_shared<std::string>();
  auto channels = std::make_shared<int64_t>(1);
  auto* k_flag = app.add_option("--partitions", *partitions, "number of partitions K (workers)")->capture_default_str();
  auto* model_flag = app.add_option("--model", *model, "with --pipeline: show this model's skip tensors (" + zoo_model_choices() + ")");
  app.add_option("--pipeline", *ppv, "PPV of --model (K = registers + 1): its skip routes are shown")
      ->excludes(k_flag)
      ->needs(model_flag);
  model_flag->needs("--pipeline");
  app.add_option("--channels", *channels, "--model's input channels")->capture_default_str();
  app.add_option("--steps", *steps, "mini-batches")->capture_default_str();
  app.add_option("--schedule", *kind, "stale | sequential | gpipe | 1f1b-stash")->capture_default_str();
  app.add_option("--micro-batches", *micro, "gpipe: micro-batches per mini-batch")->capture_default_str();
  return [partitions, steps, kind, micro, model, ppv, channels]() {
    if (!ppv->empty()) *partitions = static_cast<int>(partition::parse_ppv(*ppv, flag_of(Field::ppv)).size()) + 1;
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
    if (!model->empty()) print_skip_routes(*model, *channels, *ppv, s);
    return 0;
  };
}

}  // namespace stalepipe::cli
