// `stalepipe simulate --model NAME --pipeline PPV | --partitions K --balance B`: predicted
// throughput, bubbles and memory of a pipeline from a profile, and its space-time SVG.
#include <cstdio>
#include <optional>

#include "commands.h"
#include "stalepipe/api/assemble.h"
#include "stalepipe/common/error.h"
#include "stalepipe/common/files.h"
#include "stalepipe/models/zoo.h"
#include "stalepipe/partition/balance.h"
#include "stalepipe/partition/plan.h"
#include "stalepipe/partition/profile.h"
#include "stalepipe/schedule/schedule.h"
#include "stalepipe/sim/simulate.h"

namespace stalepipe::cli {

Command add_simulate(CLI::App& app) {
  struct Args {
    std::string model = "lenet5", pipeline = "none", balance = "time", profile, schedule = "stale", svg;
    int partitions = 0, threads = 1, micro_batches = 1;
    int64_t channels = 1, batch_size = 128, steps = 40;
    double transfer_ms = 0;
  };
  auto a = std::make_shared<Args>();
  app.add_option("--model", a->model, "lenet5 | alexnet | vgg16 | resnet<6n+2>")->capture_default_str();
  auto* pipeline = app.add_option("--pipeline", a->pipeline, "PPV, e.g. 7 or 7,13");
  auto* partitions = app.add_option("--partitions", a->partitions, "K partitions, PPV chosen by --balance");
  pipeline->excludes(partitions);
  app.add_option("--balance", a->balance, "with --partitions: time | params | flops")->capture_default_str();
  app.add_option("--profile", a->profile, "profile JSON from `stalepipe profile --json` (default: measure now)");
  app.add_option("--batch-size", a->batch_size, "mini-batch size when measuring")->capture_default_str();
  app.add_option("--threads", a->threads, "intra-op threads when measuring")->capture_default_str();
  app.add_option("--channels", a->channels, "input channels (1: MNIST-like, 3: CIFAR-10)")->capture_default_str();
  app.add_option("--steps", a->steps, "mini-batches in the simulated segment")->capture_default_str();
  app.add_option("--schedule", a->schedule, "stale | sequential | gpipe | 1f1b-stash")->capture_default_str();
  app.add_option("--micro-batches", a->micro_batches, "gpipe: micro-batches per mini-batch (each costs its share)")->capture_default_str();
  app.add_option("--transfer-ms", a->transfer_ms, "time per pipeline-register message")->capture_default_str();
  app.add_option("--svg", a->svg, "write the space-time diagram to this file");
  return [a]() {
    SP_CHECK_ARG(a->steps >= 1 && a->steps <= 100000, "--steps must be 1..100000, got ", a->steps);
    models::InputShape input;
    input.channels = a->channels;
    auto model = models::make_model(a->model, input);
    std::optional<partition::Profile> given;
    if (!a->profile.empty()) {
      given = partition::from_json(read_file(a->profile), a->profile);
      SP_CHECK_ARG(given->model == a->model && given->units.size() == model.units.size(),
                   "--profile ", a->profile, ": is a profile of ", given->model, " (",
                   given->units.size(), " units), not of ", a->model);
    }
    // The same cut as train chooses: one assembly path (api/assemble.h).
    Options o;
    o.data().batch_size(a->batch_size);
    o.run().model(a->model);  // the layout train would choose for it
    o.pipeline().ppv(partition::parse_ppv(a->pipeline, field_name(Field::ppv))).partitions(a->partitions)
        .balance(partition::balance_from_name(a->balance, field_name(Field::balance))).threads_per_worker(a->threads);
    const Assembly cut = plan_pipeline(model, o, /*want_profile=*/true, given ? &*given : nullptr);
    const auto& plan = cut.plan;
    const auto& profile = *cut.profile;
    const std::vector<int> ppv = plan.ppv;
    if (a->partitions > 0) {
      std::printf("balanced by %s: --pipeline %s\n", a->balance.c_str(), partition::format_ppv(ppv).c_str());
    }
    const auto costs = sim::partition_costs(profile, plan);
    const auto schedule = schedule::make_schedule(schedule::schedule_from_name(a->schedule, field_name(Field::schedule)),
                                                  plan.num_partitions(), 0, a->steps, a->micro_batches);
    sim::SimulateOptions options;
    options.batch_size = profile.batch_size;
    options.transfer_seconds = a->transfer_ms / 1e3;
    const auto prediction = sim::simulate(schedule, costs, options);
    std::printf("model %s, batch %lld, %d thread(s) per worker, --pipeline %s, %s schedule, %lld steps\n",
                a->model.c_str(), static_cast<long long>(profile.batch_size), profile.threads,
                partition::format_ppv(ppv).c_str(), a->schedule.c_str(), static_cast<long long>(a->steps));
    std::fputs(sim::format_prediction(prediction, costs).c_str(), stdout);
    if (!a->svg.empty()) {
      write_file_atomic(a->svg, sim::space_time_svg(prediction.events, plan.num_partitions(),
                                                    c10::str("predicted: ", a->model, " --pipeline ",
                                                             partition::format_ppv(ppv), ", ", a->schedule)));
    }
    return 0;
  };
}

}  // namespace stalepipe::cli
