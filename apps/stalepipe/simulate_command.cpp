// `stalepipe simulate --model NAME --pipeline PPV | --partitions K --balance B [--replicas R]`:
// predicted throughput, bubbles and memory of a pipeline (or R replicas of it) from a profile,
// and its space-time SVG.
// `stalepipe simulate --paper-table5 DIR`: the paper's 2-GPU speedups beside the ones
// predicted from the profiles DIR/resnet56.json ... DIR/resnet362.json, per link preset.
#include <cstdio>
#include <optional>

#include "commands.h"
#include "flags.h"
#include "stalepipe/api/assemble.h"
#include "stalepipe/common/error.h"
#include "stalepipe/common/files.h"
#include "stalepipe/models/zoo.h"
#include "stalepipe/partition/balance.h"
#include "stalepipe/partition/plan.h"
#include "stalepipe/partition/profile.h"
#include "stalepipe/schedule/schedule.h"
#include "stalepipe/sim/simulate.h"
#include "stalepipe/sim/table5.h"

namespace stalepipe::cli {
namespace {

// The model, its cut, the batch size, the schedule and its micro-batches are the option
// tree's; --threads is each worker's (the tree's threads_per_worker), 1 by default here.
struct SimulateArgs {
  Options tree;
  TrainFlags text;
  std::string profile, svg, link, replica_link, table5;
  int threads = 1;
  int64_t channels = 1, steps = 40;
  double transfer_ms = 0;
};

// One pipeline's predicted throughput, bubbles and memory (and its SVG).
int print_prediction(SimulateArgs& a) {
  SP_CHECK_ARG(a.transfer_ms >= 0, "--transfer-ms must be >= 0, got ", a.transfer_ms);
  SP_CHECK_ARG(a.steps >= 1 && a.steps <= 100000, "--steps must be 1..100000, got ", a.steps);
  sim::SimulateOptions options;
  options.link = a.link.empty() ? sim::fixed_link(a.transfer_ms / 1e3) : sim::parse_link(a.link, "--link");
  if (!a.replica_link.empty()) options.replica_link = sim::parse_link(a.replica_link, "--replica-link");
  apply(a.text, a.tree);
  Options& o = a.tree;
  options.replicas = o.pipeline().replicas();
  SP_CHECK_ARG(options.replicas >= 1, flag_of(Field::replicas), " must be >= 1, got ", options.replicas);
  check_micro_batches(o.pipeline().micro_batches(), o.pipeline().schedule());  // before any profile
  const std::string& name = o.run().model();
  models::InputShape input;
  input.channels = a.channels;
  auto model = models::make_model(name, input);
  std::optional<partition::Profile> given;
  if (!a.profile.empty()) {
    given = partition::from_json(read_file(a.profile), a.profile);
    SP_CHECK_ARG(given->model == name && given->units.size() == model.units.size(),
                 "--profile ", a.profile, ": is a profile of ", given->model, " (",
                 given->units.size(), " units), not of ", name);
  }
  // The same cut as train chooses: one assembly path (api/assemble.h).
  o.pipeline().threads_per_worker(a.threads);
  const Assembly cut = plan_pipeline(model, o, /*want_profile=*/true, given ? &*given : nullptr);
  const auto& plan = cut.plan;
  const auto& profile = *cut.profile;
  const std::vector<int> ppv = plan.ppv;
  const std::string schedule_name = schedule::to_string(o.pipeline().schedule());
  if (o.pipeline().partitions() > 0) {
    std::printf("balanced by %s: --pipeline %s\n", partition::to_string(o.pipeline().balance()).c_str(),
                partition::format_ppv(ppv).c_str());
  }
  const auto costs = sim::partition_costs(profile, plan);
  const auto schedule = schedule::make_schedule(o.pipeline().schedule(), plan.num_partitions(), 0, a.steps,
                                                o.pipeline().micro_batches());
  options.batch_size = profile.batch_size * options.replicas;  // the profile is of one replica's slice
  const auto prediction = sim::simulate(schedule, costs, options);
  std::printf("model %s, batch %lld, %d thread(s) per worker, --pipeline %s, %s schedule, %lld steps, link %s%s\n",
              name.c_str(), static_cast<long long>(options.batch_size), profile.threads,
              partition::format_ppv(ppv).c_str(), schedule_name.c_str(), static_cast<long long>(a.steps),
              options.link.describe().c_str(),
              options.replicas > 1 ? c10::str(", ", options.replicas, " replicas (slices of ", profile.batch_size,
                                              ", replica link ", options.replica_link.describe(), ")").c_str()
                                   : "");
  std::fputs(sim::format_prediction(prediction, costs).c_str(), stdout);
  if (!a.svg.empty()) {
    write_file_atomic(a.svg, sim::space_time_svg(prediction.events, plan.num_partitions(),
                                                  c10::str("predicted: ", name, " --pipeline ",
                                                           partition::format_ppv(ppv), ", ", schedule_name)));
  }
  return 0;
}

// Every row of the paper's Table 5 from DIR/<model>.json, for every link preset.
int print_table5(const std::string& dir) {
  std::vector<sim::Table5Prediction> rows;
  for (const auto& paper : sim::paper_table5()) {
    const std::string path = dir + "/" + paper.model + ".json";
    const auto profile = partition::from_json(read_file(path), path);
    models::InputShape input;
    input.channels = profile.channels > 0 ? profile.channels : 1;
    const auto model = models::make_model(paper.model, input);
    const auto plan = partition::make_plan(model, {paper.ppv});
    rows.push_back(sim::predict_table5_row(profile, plan, paper, sim::link_presets()));
  }
  std::fputs(sim::format_table5(rows).c_str(), stdout);
  return 0;
}

}  // namespace

Command add_simulate(CLI::App& app) {
  auto a = std::make_shared<SimulateArgs>();
  auto field = [&](Field f, const std::string& help = "") { return add_field_flag(app, a->tree, a->text, f, help); };
  field(Field::model, zoo_model_choices());
  field(Field::ppv, "PPV, e.g. 7 or 7,13")->excludes(field(Field::partitions, "K partitions, PPV chosen by --balance"));
  field(Field::balance, "with --partitions: time | params | flops");
  app.add_option("--profile", a->profile, "profile JSON from `stalepipe profile --json` (default: measure now)");
  field(Field::batch_size, "mini-batch size when measuring");
  app.add_option("--threads", a->threads, "intra-op threads when measuring")->capture_default_str();
  app.add_option("--channels", a->channels, "input channels (1: MNIST-like, 3: CIFAR-10)")->capture_default_str();
  app.add_option("--steps", a->steps, "mini-batches in the simulated segment")->capture_default_str();
  field(Field::schedule, "stale | sequential | gpipe | 1f1b-stash");
  field(Field::micro_batches, "gpipe: micro-batches per mini-batch (each costs its share)");
  field(Field::replicas, "R copies of the pipeline, each on 1/R of every mini-batch (profiled at that slice)");
  app.add_option("--replica-link", a->replica_link, "link between a partition's replicas (their gradient sum): "
                 "as --link (default: ideal)");
  auto* transfer = app.add_option("--transfer-ms", a->transfer_ms, "fixed time per pipeline-register message");
  app.add_option("--link", a->link, "link between neighbouring workers: ideal | nvlink4 | pcie5 | pcie4 | pcie3 | "
                 "BANDWIDTH,LATENCY in bytes/s and s, e.g. 25e9,10e-6")->excludes(transfer);
  app.add_option("--paper-table5", a->table5, "predict the paper's 2-GPU Table 5 from DIR/resnet56.json ... "
                 "resnet362.json (profiles from one device)");
  app.add_option("--svg", a->svg, "write the space-time diagram to this file");
  return [a]() { return a->table5.empty() ? print_prediction(*a) : print_table5(a->table5); };
}

}  // namespace stalepipe::cli
