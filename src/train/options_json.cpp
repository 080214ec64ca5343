#include "options_json.h"

#include <functional>
#include <sstream>

#include "stalepipe/common/error.h"

namespace stalepipe::train {

// One list of fields, used both ways, so that config.json and --resume cannot drift apart.
#define SP_TRAIN_FIELDS(X)                                                              \
  X(model) X(data) X(train_subset) X(test_subset) X(augment) X(drop_last) X(epochs)     \
  X(max_steps) X(batch_size) X(lr) X(momentum) X(weight_decay) X(nesterov)              \
  X(lr_schedule) X(lr_milestones) X(lr_gamma) X(warmup_epochs) X(seed) X(pipeline)      \
  X(schedule) X(hybrid_switch) X(executor) X(devices) X(threads) X(threads_per_worker)  \
  X(out) X(checkpoint_every) X(eval_batch_size) X(progress) X(partitions) X(balance)    \
  X(trace) X(micro_batches) X(delay_aware_lr) X(delay_lr_anneal_epochs)                 \
  X(weight_prediction) X(spike_compensation) X(fixed_weight_norm) X(hybrid_norm_reset)

nlohmann::json to_json(const TrainOptions& options) {
  nlohmann::json json;
#define SP_WRITE(name) json[#name] = options.name();
  SP_TRAIN_FIELDS(SP_WRITE)
#undef SP_WRITE
  return json;
}

TrainOptions options_from_json(const nlohmann::json& json, const std::string& source) {
  TrainOptions options;
  try {
    // A field missing from an older config keeps its default.
#define SP_READ(name)                                                              \
  if (json.contains(#name)) {                                                      \
    options.name(json.at(#name).get<std::decay_t<decltype(options.name())>>());    \
  }
    SP_TRAIN_FIELDS(SP_READ)
#undef SP_READ
  } catch (const nlohmann::json::exception& e) {
    throw RuntimeError(source + ": not a valid stalepipe config: " + e.what());
  }
  return options;
}

std::string config_hash(const TrainOptions& options) {
  nlohmann::json json = to_json(options);
  for (const char* key : {"out", "progress", "executor", "threads", "devices", "trace"}) json.erase(key);
  // Settings added later leave the hash of runs that do not use them unchanged, so that runs
  // checkpointed before they existed still resume.
  const nlohmann::json defaults = to_json(TrainOptions());
  for (const char* key : {"micro_batches", "delay_aware_lr", "delay_lr_anneal_epochs",
                          "weight_prediction", "spike_compensation", "fixed_weight_norm",
                          "hybrid_norm_reset"}) {
    if (json[key] == defaults[key]) json.erase(key);
  }
  std::ostringstream out;
  out << std::hex << std::hash<std::string>{}(json.dump());
  return out.str();
}

}  // namespace stalepipe::train
