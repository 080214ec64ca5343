// `stalepipe profile --model NAME | --model-file FILE`: per-unit forward/backward time and memory, as `caffe time`.
// The --json file feeds `stalepipe simulate --profile` (and the partitioner's time costs).
// --pipeline PPV also times each partition of that cut as one block, beside the sum of its
// units (the simulator's compute model); --device cuda:N measures on a GPU.
#include <cstdio>
#include <optional>

#include "commands.h"
#include "flags.h"
#include "stalepipe/api/options_json.h"
#include "stalepipe/common/device.h"
#include "stalepipe/common/error.h"
#include "stalepipe/common/files.h"
#include "stalepipe/models/torchscript.h"
#include "stalepipe/models/zoo.h"
#include "stalepipe/partition/plan.h"
#include "stalepipe/partition/profile.h"

namespace stalepipe::cli {

Command add_profile(CLI::App& app) {
  // The model, batch size and PPV are the option tree's; the rest partition::ProfileOptions'
  // own (threads 1 by default, where the tree's 0 means all cores: a profile times one worker).
  auto tree = std::make_shared<Options>();
  auto text = std::make_shared<TrainFlags>();
  auto channels = std::make_shared<int64_t>(1);
  auto options = std::make_shared<partition::ProfileOptions>();
  auto json = std::make_shared<std::string>();
  auto device = std::make_shared<std::string>("cpu");
  add_field_flag(app, *tree, *text, Field::model, zoo_model_choices());
  add_field_flag(app, *tree, *text, Field::model_file);
  add_field_flag(app, *tree, *text, Field::image_size);
  add_field_flag(app, *tree, *text, Field::batch_size);
  add_field_flag(app, *tree, *text, Field::ppv, "also time each partition of this PPV as one block, e.g. 19");
  app.add_option("--threads", options->threads, "intra-op threads while measuring")->capture_default_str();
  app.add_option("--channels", *channels, "input channels (1: MNIST-like, 3: CIFAR-10)")->capture_default_str();
  app.add_option("--warmup", options->warmup, "unmeasured runs per unit")->capture_default_str();
  app.add_option("--repeats", options->repeats, "measured runs per unit (the median is shown)")->capture_default_str();
  app.add_option("--device", *device, "where to measure: cpu or cuda:N")->capture_default_str();
  app.add_option("--json", *json, "also write the profile as JSON to this file");
  return [tree, text, channels, options, json, device]() {
    apply(*text, *tree);
    const auto devices = devices_from_text(*device, "--device");
    SP_CHECK_ARG(devices.size() == 1, "--device ", *device, ": name one device, e.g. cuda:0");
    check_device(devices.front(), "--device");
    options->device = devices.front();
    options->batch_size = tree->data().batch_size();
    models::InputShape input;
    input.channels = *channels;
    if (const int64_t size = tree->data().image_size(); size > 0) input.height = input.width = size;
    const std::string& file = tree->run().model_file();
    auto m = file.empty() ? models::make_model(tree->run().model(), input) : models::load_torchscript(file, input);
    std::optional<partition::Plan> plan;
    const auto& ppv = tree->pipeline().ppv();
    if (!ppv.empty()) plan = partition::make_plan(m, ppv);
    auto profile = partition::profile_model(m, *options);
    std::fputs(partition::format_profile_table(profile).c_str(), stdout);
    if (plan) {
      profile.partitions = partition::measure_partitions(m, *plan, *options);
      std::printf("--pipeline %s on %s, each partition timed as one block:\n",
                  partition::format_ppv(plan->ppv).c_str(), device->c_str());
      std::fputs(partition::format_partition_check(profile).c_str(), stdout);
    }
    if (!json->empty()) write_file_atomic(*json, partition::to_json(profile));
    return 0;
  };
}

}  // namespace stalepipe::cli
