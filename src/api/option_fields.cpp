#include "stalepipe/api/option_fields.h"

#include <regex>

#include <c10/util/StringUtil.h>

#include "common/json_number_impl.h"
#include "stalepipe/api/options_json.h"
#include "stalepipe/common/error.h"
#include "stalepipe/data/registry.h"
#include "stalepipe/models/zoo.h"
#include "stalepipe/partition/plan.h"

namespace stalepipe {
namespace {

using nlohmann::json;

// How a field is stored: as is, or as the text the CLI takes (kText).
struct Plain {
  static constexpr bool kText = false;
  template <typename T>
  static json write(const T& v) { return v; }
  template <typename T>
  static void read(const json& j, T& v, const std::string&) { v = json_get<T>(j); }
};
struct PpvText {
  static constexpr bool kText = true;
  static json write(const std::vector<int>& v) { return partition::format_ppv(v); }
  static void read(const json& j, std::vector<int>& v, const std::string& where) {
    v = partition::parse_ppv(j.get<std::string>(), where);
  }
};
struct PointText {
  static constexpr bool kText = true;
  static json write(const TrainingPoint& p) { return to_text(p); }
  static void read(const json& j, TrainingPoint& p, const std::string& where) {
    p = training_point_from_text(j.get<std::string>(), where);
  }
};
struct DevicesText {
  static constexpr bool kText = true;
  static json write(const std::vector<torch::Device>& d) { return to_text(d); }
  static void read(const json& j, std::vector<torch::Device>& d, const std::string& where) {
    d = devices_from_text(j.get<std::string>(), where);
  }
};
// A loss by its name; a function of the caller's is written as its name ("custom"), which a
// later read refuses, naming the field.
struct LossName {
  static constexpr bool kText = true;
  static json write(const exec::Loss& v) { return v.name(); }
  static void read(const json& j, exec::Loss& v, const std::string& where) {
    try {
      v = exec::Loss(j.get<std::string>());
    } catch (const UsageError& e) {
      throw UsageError(where + " " + e.what());  // "'hinge' is not a loss ..."
    }
  }
};
// Enums by name.
struct Name {
  static constexpr bool kText = true;
  template <typename E>
  static json write(E v) { return to_string(v); }
  static void read(const json& j, Balance& v, const std::string& f) { v = partition::balance_from_name(j.get<std::string>(), f); }
  static void read(const json& j, ScheduleKind& v, const std::string& f) { v = schedule::schedule_from_name(j.get<std::string>(), f); }
  static void read(const json& j, ExecutorKind& v, const std::string& f) { v = exec::executor_from_name(j.get<std::string>(), f); }
  static void read(const json& j, LrScheduleKind& v, const std::string& f) { v = optim::lr_schedule_from_name(j.get<std::string>(), f); }
  static void read(const json& j, OptimizerKind& v, const std::string& f) { v = optim::optimizer_from_name(j.get<std::string>(), f); }
  static void read(const json& j, ProgressMode& v, const std::string& f) { v = progress_from_name(j.get<std::string>(), f); }
  static void read(const json& j, exec::Precision& v, const std::string& f) { v = exec::precision_from_name(j.get<std::string>(), f); }
};
// The layout by name; under its earlier key "channels_last" a bool, and a file with neither
// (null) was written before the per-model default, in NCHW.
struct LayoutName {
  static constexpr bool kText = true;
  static json write(Layout v) { return to_string(v); }
  static void read(const json& j, Layout& v, const std::string& f) {
    if (j.is_null() || j.is_boolean()) {
      v = j.is_boolean() && j.get<bool>() ? Layout::kChannelsLast : Layout::kNchw;
    } else {
      v = layout_from_name(j.get<std::string>(), f);
    }
  }
};

std::vector<std::string> split_keys(const std::string& keys) {
  std::vector<std::string> out;
  size_t begin = 0;
  for (size_t bar = keys.find('|'); ; bar = keys.find('|', begin)) {
    out.push_back(keys.substr(begin, bar == std::string::npos ? std::string::npos : bar - begin));
    if (bar == std::string::npos) return out;
    begin = bar + 1;
  }
}

OptionField make_field(Field field, const char* part, const char* name, const char* keys, bool text,
                       HashRule hash, const char* flag, const char* help, json (*write)(const Options&),
                       void (*read)(const json&, Options&, const std::string&)) {
  std::vector<std::string> all = split_keys(keys);
  OptionField f{field, part, name, all.front(), {all.begin() + 1, all.end()}, hash, flag, help, text, write, read};
  return f;
}

#define SP_REGISTER_FIELD(Part, part, type, name, default_value, keys, codec, hash, flag, help) \
  fields.push_back(make_field(                                                                  \
      Field::name, #Part, #name, keys, codec::kText, HashRule::k##hash, flag, help,             \
      [](const Options& o) -> json { return codec::write(o.part().name()); },                   \
      [](const json& j, Options& o, const std::string& where) { codec::read(j, o.part().name(), where); }));
#define SP_REGISTER_DATA(...) SP_REGISTER_FIELD(DataOptions, data, __VA_ARGS__)
#define SP_REGISTER_PIPELINE(...) SP_REGISTER_FIELD(PipelineOptions, pipeline, __VA_ARGS__)
#define SP_REGISTER_OPTIMIZER(...) SP_REGISTER_FIELD(OptimizerOptions, optimizer, __VA_ARGS__)
#define SP_REGISTER_RUN(...) SP_REGISTER_FIELD(RunOptions, run, __VA_ARGS__)

std::vector<OptionField> make_registry() {
  std::vector<OptionField> fields;
  SP_DATA_OPTION_FIELDS(SP_REGISTER_DATA)
  SP_PIPELINE_OPTION_FIELDS(SP_REGISTER_PIPELINE)
  SP_OPTIMIZER_OPTION_FIELDS(SP_REGISTER_OPTIMIZER)
  SP_RUN_OPTION_FIELDS(SP_REGISTER_RUN)
  // The lists from the registries that parse them.
  std::string& data = fields[static_cast<size_t>(Field::dataset)].help;
  data = "the data set: " + data::dataset_choices();
  std::string& model = fields[static_cast<size_t>(Field::model)].help;
  model = "a network of the zoo: " + c10::Join(" | ", models::model_names()) + " (resnet20, resnet56, ...)";
  return fields;
}

}  // namespace

const std::vector<OptionField>& option_fields() {
  static const std::vector<OptionField> fields = make_registry();
  return fields;
}

const OptionField& option_field(Field field) {
  return option_fields().at(static_cast<size_t>(field));
}

const std::string& field_name(Field field) {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> all;
    for (const OptionField& f : option_fields()) all.push_back(f.qualified());
    return all;
  }();
  return names.at(static_cast<size_t>(field));
}

std::string rename_fields(const std::string& message,
                          const std::function<std::string(const std::string& part, const std::string& field)>& rename) {
  static const std::regex field(
      "\\b(DataOptions|PipelineOptions|OptimizerOptions|RunOptions|ProcessGroupOptions|BenchOptions|"
      "MemoryOptions|ProfileOptions|SweepOptions|ExperimentOverrides)::(\\w+)");
  std::string out;
  auto begin = message.cbegin();
  for (std::smatch m; std::regex_search(begin, message.cend(), m, field); begin = m.suffix().first) {
    out.append(begin, m[0].first);
    out += rename(m[1].str(), m[2].str());
  }
  out.append(begin, message.cend());
  return out;
}

}  // namespace stalepipe
