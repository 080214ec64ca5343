// The registry of the option tree's stored fields, built from the tables in options.h: for
// each field its part and name, its config.json key (and the earlier keys still read), its
// help text, and how to read and write it. config.json (options_json.h), the CLI's flags and
// help (apps/stalepipe/flags.cpp) and the names in check_options' messages all come from here.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "stalepipe/api/options.h"

namespace stalepipe {

struct OptionField {
  Field field;
  std::string part;                      // "PipelineOptions"
  std::string name;                      // "ppv"
  std::string key;                       // config.json: "pipeline"
  std::vector<std::string> legacy_keys;  // read when `key` is missing: "channels_last"
  HashRule hash = HashRule::kUnlessDefault;  // in a run's hash (options.h)
  std::string flag;                      // the CLI's: "--pipeline"; "" for none
  std::string help;                      // names other fields as "Part::field"
  // Stored as text the CLI takes too (a PPV, an enum's name, devices, a training point, a
  // loss): `write` gives a string and `read` parses one.
  bool text = false;
  // The field's value in `options` as config.json holds it, and back; `read` throws
  // UsageError naming `where` for a value it refuses.
  nlohmann::json (*write)(const Options& options) = nullptr;
  void (*read)(const nlohmann::json& value, Options& options, const std::string& where) = nullptr;
  std::string qualified() const { return part + "::" + name; }  // "PipelineOptions::ppv"
};

// Every stored field once, in the order of the tables (data, pipeline, optimizer, run).
const std::vector<OptionField>& option_fields();
const OptionField& option_field(Field field);

// `message` with every "Part::field" of an option struct (DataOptions, PipelineOptions, ...,
// SweepOptions) replaced by rename(part, field): how a front end names the fields in its own
// terms (the CLI's flags, Python's keywords).
std::string rename_fields(const std::string& message,
                          const std::function<std::string(const std::string& part, const std::string& field)>& rename);

// Calls f(const OptionField&, T& value) for every stored field of `options`, T the field's type.
template <typename F>
void for_each_option_field(Options& options, F&& f) {
  const auto& fields = option_fields();
  size_t i = 0;
#define SP_VISIT_FIELD(part, type, name, default_value, key, codec, hash, flag, help) \
  f(fields[i++], options.part().name());
#define SP_VISIT_DATA(...) SP_VISIT_FIELD(data, __VA_ARGS__)
#define SP_VISIT_PIPELINE(...) SP_VISIT_FIELD(pipeline, __VA_ARGS__)
#define SP_VISIT_OPTIMIZER(...) SP_VISIT_FIELD(optimizer, __VA_ARGS__)
#define SP_VISIT_RUN(...) SP_VISIT_FIELD(run, __VA_ARGS__)
  SP_DATA_OPTION_FIELDS(SP_VISIT_DATA)
  SP_PIPELINE_OPTION_FIELDS(SP_VISIT_PIPELINE)
  SP_OPTIMIZER_OPTION_FIELDS(SP_VISIT_OPTIMIZER)
  SP_RUN_OPTION_FIELDS(SP_VISIT_RUN)
#undef SP_VISIT_DATA
#undef SP_VISIT_PIPELINE
#undef SP_VISIT_OPTIMIZER
#undef SP_VISIT_RUN
#undef SP_VISIT_FIELD
}

}  // namespace stalepipe
