// `stalepipe profile --model NAME`: per-unit forward/backward time and memory, as `caffe time`.
// The --json file feeds `stalepipe simulate --profile` (and the partitioner's time costs).
// --pipeline PPV also times each partition of that cut as one block, beside the sum of its
// units (the simulator's compute model); --device cuda:N measures on a GPU.
#include <cstdio>
#include <optional>

#include "commands.h"
#include "stalepipe/api/options_json.h"
#include "stalepipe/common/device.h"
#include "stalepipe/common/error.h"
#include "stalepipe/common/files.h"
#include "stalepipe/models/zoo.h"
#include "stalepipe/partition/plan.h"
#include "stalepipe/partition/profile.h"

namespace stalepipe::cli {

Command add_profile(CLI::App& app) {
  struct Args {
    std::string model = "lenet5", json, device = "cpu", pipeline;
    int64_t channels = 1;
    partition::ProfileOptions options;
  };
  auto a = std::make_shared<Args>();
  app.add_option("--model", a->model, "lenet5 | alexnet | vgg16 | resnet<6n+2>")->capture_default_str();
  app.add_option("--batch-size", a->options.batch_size, "mini-batch size")->capture_default_str();
  app.add_option("--threads", a->options.threads, "intra-op threads while measuring")->capture_default_str();
  app.add_option("--channels", a->channels, "input channels (1: MNIST-like, 3: CIFAR-10)")->capture_default_str();
  app.add_option("--warmup", a->options.warmup, "unmeasured runs per unit")->capture_default_str();
  app.add_option("--repeats", a->options.repeats, "measured runs per unit (the median is shown)")->capture_default_str();
  app.add_option("--device", a->device, "where to measure: cpu or cuda:N")->capture_default_str();
  app.add_option("--pipeline", a->pipeline, "also time each partition of this PPV as one block, e.g. 19");
  app.add_option("--json", a->json, "also write the profile as JSON to this file");
  return [a]() {
    const auto devices = devices_from_text(a->device, "--device");
    SP_CHECK_ARG(devices.size() == 1, "--device ", a->device, ": name one device, e.g. cuda:0");
    check_device(devices.front(), "--device");
    a->options.device = devices.front();
    models::InputShape input;
    input.channels = a->channels;
    auto m = models::make_model(a->model, input);
    std::optional<partition::Plan> plan;
    if (!a->pipeline.empty()) plan = partition::make_plan(m, partition::parse_ppv(a->pipeline));
    auto profile = partition::profile_model(m, a->options);
    std::fputs(partition::format_profile_table(profile).c_str(), stdout);
    if (plan) {
      profile.partitions = partition::measure_partitions(m, *plan, a->options);
      std::printf("--pipeline %s on %s, each partition timed as one block:\n",
                  partition::format_ppv(plan->ppv).c_str(), a->device.c_str());
      std::fputs(partition::format_partition_check(profile).c_str(), stdout);
    }
    if (!a->json.empty()) write_file_atomic(a->json, partition::to_json(profile));
    return 0;
  };
}

}  // namespace stalepipe::cli
