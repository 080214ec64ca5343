#include "stalepipe/api/options_json.h"

#include <cstdio>
#include <functional>
#include <sstream>

#include "common/json_number_impl.h"
#include "stalepipe/common/error.h"
#include "stalepipe/partition/plan.h"

namespace stalepipe {
namespace {

using nlohmann::json;

// How a field is written in config.json: as is, or in the text the CLI uses.
struct Plain {
  template <typename T>
  static json write(const T& v) { return v; }
  template <typename T>
  static void read(const json& j, T& v, const std::string&) { v = json_get<T>(j); }
};
struct PpvText {
  static json write(const std::vector<int>& v) { return partition::format_ppv(v); }
  static void read(const json& j, std::vector<int>& v, const std::string&) {
    v = partition::parse_ppv(j.get<std::string>());
  }
};
struct PointText {
  static json write(const TrainingPoint& p) { return to_text(p); }
  static void read(const json& j, TrainingPoint& p, const std::string& field) {
    p = training_point_from_text(j.get<std::string>(), field);
  }
};
struct DevicesText {
  static json write(const std::vector<torch::Device>& d) { return to_text(d); }
  static void read(const json& j, std::vector<torch::Device>& d, const std::string& field) {
    d = devices_from_text(j.get<std::string>(), field);
  }
};
// A loss by its name; a function of the caller's is written as its name ("custom"), which a
// later read refuses, naming the field.
struct LossName {
  static json write(const exec::Loss& v) { return v.name(); }
  static void read(const json& j, exec::Loss& v, const std::string& field) {
    try {
      v = exec::Loss(j.get<std::string>());
    } catch (const UsageError& e) {
      throw UsageError(field + ": " + e.what());
    }
  }
};
// Enums by name.
struct Name {
  template <typename E>
  static json write(E v) { return to_string(v); }
  static void read(const json& j, Balance& v, const std::string& f) { v = partition::balance_from_name(j.get<std::string>(), f); }
  static void read(const json& j, ScheduleKind& v, const std::string& f) { v = schedule::schedule_from_name(j.get<std::string>(), f); }
  static void read(const json& j, ExecutorKind& v, const std::string& f) { v = exec::executor_from_name(j.get<std::string>(), f); }
  static void read(const json& j, LrScheduleKind& v, const std::string& f) { v = optim::lr_schedule_from_name(j.get<std::string>(), f); }
  static void read(const json& j, ProgressMode& v, const std::string& f) { v = progress_from_name(j.get<std::string>(), f); }
  static void read(const json& j, Layout& v, const std::string& f) { v = layout_from_name(j.get<std::string>(), f); }
};

// Every stored field once: (part, field, config.json key, how it is written).
#define SP_OPTION_FIELDS(X)                                                                      \
  X(run, model, "model", Plain) X(data, dataset, "data", Plain)                                   \
  X(data, train_subset, "train_subset", Plain) X(data, test_subset, "test_subset", Plain)         \
  X(data, augment, "augment", Plain) X(data, drop_last, "drop_last", Plain)                       \
  X(run, epochs, "epochs", Plain) X(run, max_steps, "max_steps", Plain)                           \
  X(data, batch_size, "batch_size", Plain) X(optimizer, lr, "lr", Plain)                          \
  X(optimizer, momentum, "momentum", Plain) X(optimizer, weight_decay, "weight_decay", Plain)     \
  X(optimizer, nesterov, "nesterov", Plain) X(optimizer, lr_schedule, "lr_schedule", Name)       \
  X(optimizer, lr_milestones, "lr_milestones", Plain) X(optimizer, lr_gamma, "lr_gamma", Plain)  \
  X(optimizer, warmup_epochs, "warmup_epochs", Plain) X(run, seed, "seed", Plain)                 \
  X(pipeline, ppv, "pipeline", PpvText) X(pipeline, schedule, "schedule", Name)                  \
  X(pipeline, hybrid_switch, "hybrid_switch", PointText)                                         \
  X(pipeline, executor, "executor", Name) X(pipeline, devices, "devices", DevicesText)           \
  X(pipeline, threads, "threads", Plain) X(pipeline, threads_per_worker, "threads_per_worker", Plain) \
  X(run, out, "out", Plain) X(run, checkpoint_every, "checkpoint_every", Plain)                  \
  X(data, eval_batch_size, "eval_batch_size", Plain) X(run, progress, "progress", Name)          \
  X(pipeline, partitions, "partitions", Plain) X(pipeline, balance, "balance", Name)             \
  X(run, trace, "trace", Plain) X(pipeline, micro_batches, "micro_batches", Plain)               \
  X(optimizer, delay_aware_lr, "delay_aware_lr", Plain)                                          \
  X(optimizer, delay_lr_anneal_epochs, "delay_lr_anneal_epochs", Plain)                          \
  X(optimizer, weight_prediction, "weight_prediction", Plain)                                    \
  X(optimizer, spike_compensation, "spike_compensation", Plain)                                  \
  X(optimizer, fixed_weight_norm, "fixed_weight_norm", Plain)                                    \
  X(pipeline, hybrid_norm_reset, "hybrid_norm_reset", Plain)                                     \
  X(run, stop_at_step, "stop_at_step", Plain) X(pipeline, profile_batch, "profile_batch", Plain) \
  X(pipeline, segment_steps, "segment_steps", Plain) X(run, dropout, "dropout", Plain)         \
  X(optimizer, loss, "loss", LossName) X(run, model_file, "model_file", Plain)                  \
  X(run, eval_every, "eval_every", Plain) X(run, targets, "targets", Plain)                      \
  X(pipeline, layout, "layout", Name) X(pipeline, recompute, "recompute", Plain)

// What does not change the trained weights.
const char* const kNotHashed[] = {"out", "progress", "executor", "threads", "devices", "trace",
                                  "stop_at_step", "profile_batch", "targets", "recompute"};
// Fields added after 0.1: left out of the hash while at their default, so that older runs
// keep their hash.
const char* const kHashedWhenSet[] = {"micro_batches", "delay_aware_lr", "delay_lr_anneal_epochs",
                                      "weight_prediction", "spike_compensation", "fixed_weight_norm",
                                      "hybrid_norm_reset", "segment_steps", "dropout", "loss",
                                      "model_file", "eval_every"};
// Not in the files of 0.2 (the legacy hash's JSON).
const char* const kNewIn03[] = {"stop_at_step", "profile_batch", "segment_steps", "model_file"};

json hashed_json(const Options& options) {
  json j = to_json(options);
  for (const char* key : kNotHashed) j.erase(key);
  const json defaults = to_json(Options());
  for (const char* key : kHashedWhenSet) {
    if (j[key] == defaults[key]) j.erase(key);
  }
  // The layout as it runs, under the earlier key "channels_last" (present only when true), so
  // that "auto" and the layout it stands for hash alike, and so do runs written before.
  j.erase("layout");
  if (resolved_layout(options) == Layout::kChannelsLast) j["channels_last"] = true;
  return j;
}

}  // namespace

json to_json(const Options& options) {
  json j;
#define SP_WRITE(part, field, key, codec) j[key] = codec::write(options.part().field());
  SP_OPTION_FIELDS(SP_WRITE)
#undef SP_WRITE
  return j;
}

Options options_from_json(const json& j, const std::string& source) {
  Options options;
  try {
#define SP_READ(part, field, key, codec)                                                  \
  if (j.contains(key)) codec::read(j.at(key), options.part().field(), source + ": " + key);
    SP_OPTION_FIELDS(SP_READ)
#undef SP_READ
    // Files without a layout were written before it had a default per model: NCHW, or the
    // earlier "channels_last": true.
    if (!j.contains("layout")) {
      const bool channels_last = j.contains("channels_last") && j.at("channels_last").get<bool>();
      options.pipeline().layout(channels_last ? Layout::kChannelsLast : Layout::kNchw);
    }
  } catch (const json::exception& e) {
    throw RuntimeError(source + ": not a valid stalepipe config: " + e.what());
  }
  return options;
}

std::string config_hash(const Options& options) {
  uint64_t h = 14695981039346656037ULL;  // FNV-1a 64: offset basis, then prime per byte
  for (unsigned char c : hashed_json(options).dump()) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(h));
  return text;
}

std::string legacy_config_hash(const Options& options) {
  json j = hashed_json(options);
  for (const char* key : kNewIn03) j.erase(key);
  std::ostringstream out;
  out << std::hex << std::hash<std::string>{}(j.dump());
  return out.str();
}

TrainingPoint training_point_from_text(const std::string& text, const std::string& field) {
  if (text.empty()) return {};
  const bool in_steps = text.back() == 's';
  const std::string number = in_steps ? text.substr(0, text.size() - 1) : text;
  size_t used = 0;
  int64_t value = -1;
  try {
    value = std::stoll(number, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  SP_CHECK_ARG(used == number.size() && !number.empty() && value >= 0, field, " ", text,
               ": expected a number of epochs (3) or of steps (250s)");
  return {value, in_steps};
}

std::string to_text(const TrainingPoint& point) {
  if (!point.set()) return "";
  return std::to_string(point.count) + (point.in_steps ? "s" : "");
}

std::vector<torch::Device> devices_from_text(const std::string& text, const std::string& field) {
  std::vector<torch::Device> devices;
  std::stringstream in(text);
  std::string item;
  while (!text.empty() && std::getline(in, item, ',')) {
    try {
      devices.emplace_back(item);
    } catch (const c10::Error&) {
      throw UsageError(field + " " + text + ": '" + item + "' is not a device; expected cpu or cuda:N");
    }
  }
  return devices;
}

std::string to_text(const std::vector<torch::Device>& devices) {
  std::string text;
  for (const auto& d : devices) text += (text.empty() ? "" : ",") + d.str();
  return text;
}

}  // namespace stalepipe
