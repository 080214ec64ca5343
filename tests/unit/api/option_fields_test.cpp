// The field registry (api/option_fields.h): every field of the option tree once, each one
// round-tripping through config.json, the run directories of 0.3.0 reading as they ran, and
// check_options naming fields as the registry does.
#include <fstream>
#include <functional>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <type_traits>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "stalepipe/api/option_fields.h"
#include "stalepipe/api/options_json.h"
#include "stalepipe/common/error.h"
#include "stalepipe/data/registry.h"
#include "stalepipe/models/zoo.h"
#include "support/error_of.h"

namespace stalepipe {
namespace {

// Fields of the tree that are not stored (functions, where a process sits).
const std::set<std::string> kNotStored = {"OptimizerOptions::lr_at", "OptimizerOptions::metric",
                                          "PipelineOptions::group"};

// Every field options.h declares, as "Part::field": the rows of its tables and the TORCH_ARGs
// written directly in a part.
std::set<std::string> declared_fields() {
  std::ifstream in(std::string(STALEPIPE_SOURCE_DIR) + "/include/stalepipe/api/options.h");
  std::stringstream text;
  text << in.rdbuf();
  const std::string header = text.str();
  std::set<std::string> fields;
  const std::map<std::string, std::string> tables = {{"SP_DATA_OPTION_FIELDS", "DataOptions"},
                                                     {"SP_PIPELINE_OPTION_FIELDS", "PipelineOptions"},
                                                     {"SP_OPTIMIZER_OPTION_FIELDS", "OptimizerOptions"},
                                                     {"SP_RUN_OPTION_FIELDS", "RunOptions"}};
  for (const auto& [table, part] : tables) {
    const size_t begin = header.find("#define " + table);
    const size_t end = header.find("\n\n", begin);
    const std::string rows = header.substr(begin, end - begin);
    const std::regex row(R"(\n\s*X\([^,]+,\s*(\w+),)");
    for (std::sregex_iterator m(rows.begin(), rows.end(), row), none; m != none; ++m) {
      fields.insert(part + "::" + (*m)[1].str());
    }
    // TORCH_ARGs in the part's struct itself.
    const size_t body = header.find("struct " + part + " {");
    const std::string members = header.substr(body, header.find("\n};", body) - body);
    const std::regex arg(R"(TORCH_ARG\([^,]+,\s*(\w+)\))");
    for (std::sregex_iterator m(members.begin(), members.end(), arg), none; m != none; ++m) {
      fields.insert(part + "::" + (*m)[1].str());
    }
  }
  return fields;
}

TEST(OptionFields, EveryFieldOfTheTreeIsInTheRegistryExactlyOnce) {
  std::multiset<std::string> registered, keys;
  for (const OptionField& f : option_fields()) {
    registered.insert(f.qualified());
    keys.insert(f.key);
    for (const auto& legacy : f.legacy_keys) keys.insert(legacy);
    EXPECT_EQ(&option_field(f.field), &f) << f.qualified();
    EXPECT_EQ(field_name(f.field), f.qualified());
    EXPECT_FALSE(f.help.empty()) << f.qualified();
  }
  const std::set<std::string> declared = declared_fields();
  EXPECT_GT(declared.size(), 40u);  // the header was read
  for (const std::string& field : declared) {
    if (kNotStored.count(field)) continue;
    EXPECT_EQ(registered.count(field), 1u) << field;
  }
  for (const std::string& field : registered) EXPECT_EQ(declared.count(field), 1u) << field;
  for (const std::string& key : keys) EXPECT_EQ(keys.count(key), 1u) << "config.json key " << key;
  // config.json holds the registry's keys and no other.
  const nlohmann::json j = to_json(Options());
  EXPECT_EQ(j.size(), option_fields().size());
  for (const OptionField& f : option_fields()) EXPECT_TRUE(j.contains(f.key)) << f.key;
}

// A value other than the default for each field, set through the registry's visitor.
struct SetOtherValue {
  template <typename T>
  void operator()(const OptionField& f, T& value) const {
    if (f.text) return;  // below, by text
    if constexpr (std::is_same_v<T, bool>) {
      value = !value;
    } else if constexpr (std::is_arithmetic_v<T>) {
      value = static_cast<T>(value + 3);
    } else if constexpr (std::is_same_v<T, std::string>) {
      value += "-other";
    } else if constexpr (std::is_same_v<T, std::vector<int>>) {
      value = {2, 5};
    } else if constexpr (std::is_same_v<T, std::vector<double>>) {
      value = {80.5, 90};
    } else {
      ADD_FAILURE() << f.qualified() << " is neither text nor a plain value";
    }
  }
};

const std::map<std::string, std::string> kOtherText = {
    {"ppv", "2,3"},      {"balance", "params"},   {"schedule", "hybrid"},   {"hybrid_switch", "250s"},
    {"executor", "emulated"}, {"devices", "cpu,cpu"}, {"layout", "channels-last"}, {"lr_schedule", "step"},
    {"loss", "mse"},     {"progress", "lines"}, {"precision", "bf16"}, {"algorithm", "adamw"}};

TEST(OptionFields, EveryFieldRoundTripsThroughConfigJson) {
  Options o;
  for_each_option_field(o, SetOtherValue());
  for (const OptionField& f : option_fields()) {
    if (!f.text) continue;
    ASSERT_TRUE(kOtherText.count(f.name)) << "no other value for the text field " << f.qualified();
    f.read(kOtherText.at(f.name), o, f.qualified());
  }
  const nlohmann::json written = to_json(o);
  const nlohmann::json defaults = to_json(Options());
  const Options back = options_from_json(written, "test");
  for (const OptionField& f : option_fields()) {
    EXPECT_NE(written.at(f.key), defaults.at(f.key)) << f.qualified() << " was not changed";
    EXPECT_EQ(f.write(back), written.at(f.key)) << f.qualified();
  }
  EXPECT_EQ(config_hash(back), config_hash(o));
}

TEST(OptionFields, ARunDirectoryOfVersion030ReadsAsItRanAndKeepsItsHash) {
  // config.json of a 0.3.0 ResNet-20 run, as that version wrote it (every key), and the hash
  // its checkpoints hold.
  const auto file = nlohmann::json::parse(R"({
    "augment": true, "balance": "time", "batch_size": 128, "checkpoint_every": 50,
    "data": "cifar10:/data/cifar", "delay_aware_lr": false, "delay_lr_anneal_epochs": 0.0,
    "devices": "", "drop_last": true, "dropout": 0.0, "epochs": 8, "eval_batch_size": 1000,
    "eval_every": 156, "executor": "threads", "fixed_weight_norm": false, "hybrid_norm_reset": false,
    "hybrid_switch": "", "layout": "channels-last", "loss": "cross-entropy", "lr": 0.1, "lr_gamma": 0.1,
    "lr_milestones": [], "lr_schedule": "cosine", "max_steps": 0, "micro_batches": 1, "model": "resnet20",
    "model_file": "", "momentum": 0.9, "nesterov": false, "out": "runs/r20", "partitions": 0,
    "pipeline": "7", "profile_batch": 0, "progress": "auto", "recompute": 7, "schedule": "stale",
    "seed": 1, "segment_steps": 65536, "spike_compensation": false, "stop_at_step": 0,
    "targets": [85.0, 90.0], "test_subset": 0, "threads": 2, "threads_per_worker": 0, "trace": "",
    "train_subset": 0, "warmup_epochs": 0.0, "weight_decay": 0.0005, "weight_prediction": false})");
  const Options o = options_from_json(file, "runs/r20/config.json");
  EXPECT_EQ(o.data().dataset(), "cifar10:/data/cifar");
  EXPECT_EQ(o.pipeline().ppv(), std::vector<int>{7});
  EXPECT_EQ(o.pipeline().layout(), Layout::kChannelsLast);
  EXPECT_EQ(o.run().targets(), (std::vector<double>{85, 90}));
  // Every key reads back as written; keys added since hold their defaults.
  const nlohmann::json now = to_json(o), defaults = to_json(Options());
  for (const auto& [key, value] : now.items()) {
    EXPECT_EQ(value, file.contains(key) ? file.at(key) : defaults.at(key)) << key;
  }
  EXPECT_EQ(config_hash(o), "455cfb1ba5205d46");
}

// The hash rule and the flag are columns of the table: what stays out of the hash is pinned
// here, so that moving a field in or out is a decision a test shows (it changes finished
// runs' hashes, and sweeps would train them again).
TEST(OptionFields, HashRulesAndFlagsAreTheTables) {
  std::set<std::string> never, flags;
  for (const OptionField& f : option_fields()) {
    if (f.hash == HashRule::kNever) never.insert(f.key);
    if (f.flag.empty()) {
      EXPECT_EQ(f.field, Field::segment_steps) << "only feed's segment length has no flag";
      continue;
    }
    EXPECT_TRUE(flags.insert(f.flag).second) << f.flag << " twice";
    EXPECT_TRUE(std::regex_match(f.flag, std::regex("--[a-z0-9]+(-[a-z0-9]+)*"))) << f.flag;
  }
  EXPECT_EQ(never, (std::set<std::string>{"out", "progress", "executor", "threads", "devices", "trace", "stop_at_step",
                                          "profile_batch", "targets", "recompute", "data_threads", "cache_images",
                                          "cuda_graphs"}));
  EXPECT_EQ(option_field(Field::ppv).flag, "--pipeline");  // the paper's name for a PPV's registers
  EXPECT_EQ(option_field(Field::dataset).flag, "--data");
}

// The help of a list-valued field lists what its registry parses: nothing to keep in step.
TEST(OptionFields, HelpListsEveryModelAndDataSetTheRegistriesKnow) {
  for (const std::string& name : models::model_names()) {
    EXPECT_NE(option_field(Field::model).help.find(name), std::string::npos) << name;
  }
  for (const std::string& name : data::dataset_names()) {
    EXPECT_NE(option_field(Field::dataset).help.find(name), std::string::npos) << name;
  }
}

TEST(OptionFields, CheckOptionsNamesFieldsAsTheRegistryDoes) {
  const std::vector<std::pair<Field, std::function<void(Options&)>>> bad = {
      {Field::batch_size, [](Options& o) { o.data().batch_size(0); }},
      {Field::test_subset, [](Options& o) { o.data().test_subset(-1); }},
      {Field::partitions, [](Options& o) { o.pipeline().partitions(-2); }},
      {Field::micro_batches, [](Options& o) { o.pipeline().micro_batches(0); }},
      {Field::recompute, [](Options& o) { o.pipeline().recompute(-1); }},
      {Field::lr, [](Options& o) { o.optimizer().lr(-1); }},
      {Field::momentum, [](Options& o) { o.optimizer().momentum(-1); }},
      {Field::lr_gamma, [](Options& o) { o.optimizer().lr_gamma(0); }},
      {Field::lr_milestones, [](Options& o) { o.optimizer().lr_milestones({5, 3}); }},
      {Field::spike_compensation, [](Options& o) { o.optimizer().spike_compensation(true).nesterov(true); }},
      {Field::eps, [](Options& o) { o.optimizer().algorithm(OptimizerKind::kAdamW).eps(0); }},
      {Field::betas, [](Options& o) { o.optimizer().algorithm(OptimizerKind::kAdamW).betas({0.9, 1.5}); }},
      {Field::delay_nesterov, [](Options& o) { o.optimizer().delay_nesterov(true).momentum(0); }},
      {Field::epochs, [](Options& o) { o.run().epochs(0); }},
      {Field::dropout, [](Options& o) { o.run().dropout(1); }},
  };
  for (const auto& [field, set] : bad) {
    Options o;
    set(o);
    const std::string message = test::error_of<UsageError>([&] { check_options(o); });
    EXPECT_EQ(message.rfind(option_field(field).qualified(), 0), 0u) << message;
  }
  // The layers below speak of their own arguments: the same lr refused by the schedule alone.
  optim::LrScheduleOptions schedule;
  schedule.base_lr = -1;
  EXPECT_EQ(test::error_of<UsageError>([&] { optim::LrSchedule{schedule}; }),
            "lr schedule: base_lr must be a positive number, got -1");
}

}  // namespace
}  // namespace stalepipe
